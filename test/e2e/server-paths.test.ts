// Endpoints of `servers` at the documented shape `/<name>/mcp`: the official SDK clients (v1 and v2)
// connect there, list only that endpoint's tools, meet its challenge and are served once paid — the
// path the MCP Inspector works with (it falls back to SSE on `/mcp/<name>`; README, "Several servers").
// The default endpoint stays at /mcp beside it.
import { Client as V2Client, StreamableHTTPClientTransport as V2Transport } from '@modelcontextprotocol/client';
import { Client as V1Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as V1Transport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import t from 'tap';
import { startTestGateway, testConfig } from '../helpers/gateway.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';

type Json = Record<string, any>;

const main = await startPaidUpstream('stateless-json');
const local = await startPaidUpstream('stateless-json');
t.teardown(() => Promise.all([main.close(), local.close()]));

const limits = { perHandle: { ratePerSecond: 100, burst: 100 }, challengesPerClient: { ratePerSecond: 100, burst: 100 }, newChargesPerSecond: 10_000 };
const gateway = await startTestGateway(t, {
  ...testConfig(main.url),
  tools: { fetch_readable: { sku: 'research', cost: 1 } },
  servers: { local: { path: '/local/mcp', upstream: { url: local.url }, tools: { echo: { sku: 'research', cost: 2 } } } },
  limits,
});

/** The handle a challenge carries, paid on the dev checkout. */
async function payChallenge(result: Json): Promise<string> {
  const text = result.content[0].text as string;
  const link = /(http\S+\/tollbooth\/checkout\/\S+)/.exec(text)?.[1];
  const handle = /(tb_s_[A-Za-z0-9_-]+)/.exec(text)?.[1];
  if (!link || !handle) throw new Error(`no link or handle in the challenge: ${text}`);
  const paid = await fetch(`${link}/pay`, { method: 'POST', redirect: 'manual' });
  if (paid.status !== 303) throw new Error(`the dev checkout answered ${paid.status}`);
  return handle;
}

const clients = {
  'SDK v1': async (url: string) => {
    const client = new V1Client({ name: 'paths-v1', version: '1.0.0' });
    await client.connect(new V1Transport(new URL(url)));
    return client as unknown as { listTools(): Promise<Json>; callTool(params: Json): Promise<Json>; close(): Promise<void> };
  },
  'SDK v2': async (url: string) => {
    const client = new V2Client({ name: 'paths-v2', version: '1.0.0' });
    await client.connect(new V2Transport(new URL(url)));
    return client as unknown as { listTools(): Promise<Json>; callTool(params: Json): Promise<Json>; close(): Promise<void> };
  },
};

for (const [name, connect] of Object.entries(clients)) {
  t.test(`${name}: /local/mcp lists, challenges and serves the local endpoint's tools only`, async (t) => {
    const client = await connect(`${gateway.origin}/local/mcp`);
    t.teardown(() => client.close());
    const tools = ((await client.listTools()).tools as Json[]).map((tool) => tool.name as string);
    t.ok(tools.includes('echo'), "the local upstream's echo is listed");
    const echo = ((await client.listTools()).tools as Json[]).find((tool) => tool.name === 'echo');
    t.match(echo?._meta?.['xyz.tollbooth/price'], { sku: 'research', cost: 2 }, "priced at the local endpoint's cost");

    const before = local.callsOf('echo').length;
    const challenge = await client.callTool({ name: 'echo', arguments: { text: name } });
    t.equal(challenge.isError, true, 'unpaid: a challenge');
    t.equal(local.callsOf('echo').length, before, 'nothing reached the upstream');
    const handle = await payChallenge(challenge);
    const paid = await client.callTool({ name: 'echo', arguments: { text: name, tollboothToken: handle } });
    t.notOk(paid.isError, 'paid: served');
    t.same(paid._meta?.['xyz.tollbooth/receipt'], { sku: 'research', cost: 2, remaining: 1 });
    t.equal(local.callsOf('echo').length, before + 1, 'by the local upstream, once');
    t.equal(main.callsOf('echo').length, 0, 'never by the default endpoint’s upstream');
  });
}

t.test('the default endpoint stays at /mcp beside /local/mcp', async (t) => {
  const client = await clients['SDK v1'](`${gateway.origin}/mcp`);
  t.teardown(() => client.close());
  const fetchReadable = ((await client.listTools()).tools as Json[]).find((tool) => tool.name === 'fetch_readable');
  t.match(fetchReadable?._meta?.['xyz.tollbooth/price'], { sku: 'research', cost: 1 });
});
