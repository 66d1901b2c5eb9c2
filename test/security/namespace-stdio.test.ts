// SPEC §20, the gateway's namespace, for a stdio upstream: a malicious stdio server
// (test/fixtures/bridge/forging-server.mjs) served through the bridge, which the gateway proxies like any
// HTTP upstream. Nothing the child writes under `xyz.tollbooth/` reaches the client — POST replies, the
// GET stream, a Last-Event-ID replay, in both eras — its free tool loses the token argument, and a call
// to it carries no handle into the child.
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import { fundedHandle, startTestGateway, testConfig, type TestGateway } from '../helpers/gateway.js';
import { assertClean, assertListing, legacyClient, LEGACY, modernClient, readStream, RECEIPT, type Client } from '../helpers/namespace-client.js';

const FORGING_STDIO = [process.execPath, fileURLToPath(new URL('../fixtures/bridge/forging-server.mjs', import.meta.url))];

async function gatewayFor(t: Test): Promise<TestGateway> {
  const base = testConfig('http://unused.invalid/mcp');
  return startTestGateway(t, { ...base, upstream: { command: FORGING_STDIO }, tools: { fetch_readable: { sku: 'research', cost: 1 } } });
}

/** What the child's echo tool received so far (it says so in plain text, which the gateway leaves alone). */
async function receivedByChild(client: Client, id: number): Promise<unknown> {
  const reply = await client.request(id, 'tools/call', { name: 'received', arguments: {} });
  return JSON.parse(reply.messages.at(-1)?.result.content[0].text as string) as unknown;
}

for (const era of ['legacy', 'modern'] as const) {
  t.test(`stdio, ${era}: tools/list, a free call carrying a handle, an error and a paid call — only the gateway's own price and receipt`, async (t) => {
    const gateway = await gatewayFor(t);
    const handle = await fundedHandle(gateway, 'fetch_readable', { url: 'fund' });
    let client: Client;
    if (era === 'legacy') {
      const opened = await legacyClient(gateway.url);
      assertClean(t, opened.initialize, 'initialize');
      client = opened.client;
    } else {
      client = modernClient(gateway.url);
    }
    assertListing(t, await client.request(1, 'tools/list'), 'tools/list');
    const free = await client.request(2, 'tools/call', { name: 'echo', arguments: { text: 'hi', tollboothToken: handle } });
    assertClean(t, free, 'the free call (and the events before its result)');
    t.equal(free.messages.at(-1)?.result.content[0].text, 'echo:hi');
    t.same(await receivedByChild(client, 3), [{ text: 'hi' }], 'the child got the call without the handle');
    assertClean(t, await client.request(4, 'tools/call', { name: 'broken', arguments: {} }), 'a JSON-RPC error');
    const paid = await client.request(5, 'tools/call', { name: 'fetch_readable', arguments: { url: 'https://example.com/', tollboothToken: handle } });
    assertClean(t, paid, 'the paid call', [`.result._meta["${RECEIPT}"]`]);
    t.same(paid.messages.at(-1)?.result._meta[RECEIPT], { sku: 'research', cost: 1, remaining: 2 }, "the gateway's own receipt");
  });
}

t.test('stdio: the GET stream and a Last-Event-ID replay carry none of the namespace', async (t) => {
  const gateway = await gatewayFor(t);
  const { client } = await legacyClient(gateway.url);
  const headers = { 'mcp-session-id': client.sessionId as string, 'mcp-protocol-version': LEGACY };
  const call = await client.request(1, 'tools/call', { name: 'echo', arguments: { text: 'r' } });
  t.ok(call.eventIds.length >= 2, 'the bridge gave the POST stream event ids');
  const replay = await readStream(gateway.url, { ...headers, 'last-event-id': call.eventIds[0] as string }, 2);
  t.ok(replay.messages.length >= 2, 'events replayed');
  assertClean(t, replay, 'the Last-Event-ID replay');
  // A notification the child sends after its answer goes to the session's GET stream.
  const live = await readStream(gateway.url, headers, 1, () => void client.request(2, 'tools/call', { name: 'later', arguments: { ms: 200 } }));
  t.equal(live.messages.length, 1, 'the late notification arrived on the GET stream');
  assertClean(t, live, 'the GET stream');
});
