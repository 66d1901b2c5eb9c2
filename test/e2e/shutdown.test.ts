// SPEC §22, stopping: each stdio child leads its own process group and is stopped as a group (SIGTERM,
// SIGKILL after killTimeout), so an `npx`-style wrapper that forwards no signal — and ignores SIGTERM — goes
// down with the server it started. `tollbooth start` on SIGTERM stops accepting, lets the call in flight
// finish (up to drainTimeout), stops its children and exits 0; /proc shows nothing left, no zombie.
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import t from 'tap';
import { waitFor } from '../helpers/clock.js';
import { testConfig } from '../helpers/gateway.js';
import { startGatewayProcess } from '../helpers/gateway-process.js';
import { newMarker, processesInGroups, processesWith } from '../helpers/processes.js';

const fixture = (name: string): string => fileURLToPath(new URL(`../fixtures/bridge/${name}`, import.meta.url));
const DRAIN_MS = 2_000;
const KILL_MS = 1_000;

t.test('SIGTERM with an npx-style wrapper: the call in flight finishes, every child is gone, exit 0', async (t) => {
  const marker = newMarker();
  const gateway = await startGatewayProcess(t, testConfig('http://127.0.0.1:9/mcp', {
    server: { drainTimeout: `${DRAIN_MS}ms` },
    upstream: { command: [process.execPath, fixture('npx-wrapper.mjs'), process.execPath, fixture('raw-server.mjs'), marker], stdio: { killTimeout: `${KILL_MS}ms` } },
    tools: {},
    logging: { level: 'warn' },
  }));
  const client = new Client({ name: 'shutdown', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(gateway.url)));
  const groups = new Set<number>();
  // The client's session has its own child; the tool catalog's read may have one at the same moment
  // (a wrapper and its server each): wait for a wrapper with its server, then look at every group.
  await waitFor(() => {
    const live = processesWith(marker);
    for (const p of live) groups.add(p.pgid);
    return live.some((p) => live.some((q) => q !== p && q.pgid === p.pgid));
  }, 'a wrapper and the server it started', { timeoutMs: 20_000 });
  const tree = processesWith(marker);
  const leaders = tree.filter((p) => p.pid === p.pgid);
  t.ok(leaders.length >= 1 && leaders.length <= 2, `each wrapper leads a process group of its own (wrappers: ${leaders.length}, the session's, maybe the catalog read's)`);
  t.ok(tree.every((p) => leaders.some((leader) => leader.pid === p.pgid)), 'each server shares its wrapper\'s process group');
  t.notOk(tree.some((p) => p.pgid === gateway.child.pid), 'not in the gateway\'s group');

  // A call in flight when SIGTERM comes: it finishes within the drain.
  let progressed = false;
  const inFlight = client.callTool({ name: 'slow', arguments: { ms: 300, steps: 3 } }, undefined, { onprogress: () => void (progressed = true) });
  await waitFor(() => progressed, 'the call to be running in the server (its first progress)', { timeoutMs: 10_000 });
  const started = performance.now();
  const exit = gateway.stop();
  const result = await inFlight.catch((error: unknown) => ({ error }));
  t.match(result, { content: [{ text: 'slow done' }] }, 'the call in flight finished during the drain');
  t.equal(await exit, 0, `exit 0 (output: ${gateway.output().slice(-400)})`);
  const seconds = (performance.now() - started) / 1000;
  t.comment(`SIGTERM → exit in ${seconds.toFixed(2)} s (drainTimeout ${DRAIN_MS / 1000} s + killTimeout ${KILL_MS / 1000} s)`);
  t.ok(seconds < (DRAIN_MS + KILL_MS) / 1000 + 10, 'within drainTimeout + killTimeout (+ generous slack)');
  await waitFor(() => processesInGroups(groups).length === 0, 'every process of the child\'s group to be gone', { timeoutMs: 5_000 }).catch(() => undefined);
  t.strictSame(processesInGroups(groups), [], 'no wrapper, no server, no zombie left');
  t.strictSame(processesWith(marker), []);
  await client.close().catch(() => undefined);
});
