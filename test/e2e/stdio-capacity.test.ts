// SPEC §22 through the gateway: capacity is for paying clients. A stdio server that takes 2.5 s to start,
// maxChildren 2: a burst of unpaid priced calls is answered with challenges and spawns no child (the tool
// catalog is read off the request path, in one session that is closed); a paying client's initialize then
// succeeds; /readyz and tollbooth_stdio_children show the slots; afterwards no child is left, no zombie.
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import t from 'tap';
import { waitFor } from '../helpers/clock.js';
import { testConfig, startTestGateway } from '../helpers/gateway.js';
import { callTool, scrape, sumCounter } from '../helpers/gateway-process.js';
import { newMarker, processesInGroups, processesWith } from '../helpers/processes.js';

const SLOW_START = fileURLToPath(new URL('../fixtures/bridge/slow-start.mjs', import.meta.url));

t.test('unpaid priced calls spawn no child; a paying client then initialises; nothing is left behind', async (t) => {
  const marker = newMarker();
  const gateway = await startTestGateway(t, testConfig('http://127.0.0.1:9/mcp', {
    upstream: { command: [process.execPath, SLOW_START, '2500', marker], stdio: { maxChildren: 2, initTimeout: '8s', killTimeout: '1s' } },
    tools: { echo: { sku: 'research', cost: 1 } },
    logging: { level: 'debug' },
  }));
  // Every process of the test, sampled all along: the most at once, and every group seen.
  const groups = new Set<number>();
  let most = 0;
  const sample = (): number => {
    const live = processesWith(marker);
    for (const p of live) groups.add(p.pgid);
    most = Math.max(most, live.length);
    return live.length;
  };
  const sampler = setInterval(sample, 20);
  t.teardown(() => clearInterval(sampler));
  const children = async (): Promise<Record<string, number>> => {
    const text = await scrape(gateway.origin);
    return Object.fromEntries(['starting', 'active', 'idle', 'free'].map((state) => [state, sumCounter(text, 'tollbooth_stdio_children', { server: 'default', state })]));
  };
  // The start-up probe and the catalog's one session come and go.
  const catalogClosed = (): boolean => gateway.logs().some((line) => line.evt === 'bridge_session_end' && line.why === 'the client deleted the session');
  await waitFor(async () => catalogClosed() && sample() === 0 && (await children()).free === 2, 'the catalog read to finish, its session closed and its child stopped', { timeoutMs: 30_000 });

  most = 0;
  const outcomes = await Promise.all(Array.from({ length: 30 }, () => callTool(gateway.url, 'echo', { text: 'unpaid' })));
  t.strictSame([...new Set(outcomes.map((o) => o.kind))], ['challenged'], 'every unpaid call got a challenge');
  sample();
  t.equal(most, 0, 'no child was spawned for unpaid calls');
  t.strictSame(await children(), { starting: 0, active: 0, idle: 0, free: 2 }, 'both slots free for paying clients');

  const client = new Client({ name: 'paying', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(gateway.url));
  await client.connect(transport);
  t.ok((await client.listTools()).tools.some((tool) => tool.name === 'echo'), 'the paying client initialised and lists the tools');
  t.equal(sample(), 1, 'its one child');
  const ready = await (await fetch(`${gateway.origin}/readyz`)).json() as { upstream: { children: Record<string, number> } };
  t.strictSame(ready.upstream.children, { max: 2, starting: 0, active: 1, idle: 0, free: 1 }, '/readyz shows the slots');
  await transport.terminateSession();
  await client.close();
  await waitFor(() => sample() === 0, 'its child to stop when the session ends', { timeoutMs: 20_000 });
  // The gateway (this process) reaps its child when the exit reaches its event loop: wait for that, as the
  // shutdown tests do; a child never reaped stays a zombie and fails the assertion below.
  await waitFor(() => processesInGroups(groups).length === 0, 'every process of the children\'s groups to be gone', { timeoutMs: 5_000 }).catch(() => undefined);
  t.strictSame(processesInGroups(groups), [], 'no child, grandchild or zombie left in any child\'s process group');
});
