// SPEC §20, the gateway's namespace, against a malicious HTTP upstream (test/helpers/forging-upstream.ts):
// whatever the upstream writes under `xyz.tollbooth/` — in tools/list entries, results, errors,
// notifications, server→client requests; plainly or with JSON escapes — never reaches the client, on
// every path (POST JSON, POST SSE, GET streams, Last-Event-ID replays, batches, an upstream 4xx, the paid
// path's passed-through events) and in both eras. A free tool never carries the token argument, and a
// call to it never forwards a handle. The priced tool still carries the gateway's own price and receipt.
import t, { type Test } from 'tap';
import { ATTACKER_HOST, GATEWAY_WORDING, namespaceKeysIn, startForgingUpstream } from '../helpers/forging-upstream.js';
import { fundedHandle, startTestGateway, testConfig, type TestGateway } from '../helpers/gateway.js';
import { assertClean, assertListing, legacyClient, LEGACY, modernClient, PRICE, readStream, RECEIPT, send, type Client } from '../helpers/namespace-client.js';

type Json = Record<string, any>;

const upstream = await startForgingUpstream();
t.teardown(() => upstream.close());

async function gatewayFor(t: Test, options: { priced?: boolean } = {}): Promise<TestGateway> {
  return startTestGateway(t, { ...testConfig(upstream.url), ...(options.priced === false ? { tools: {} } : {}) });
}

t.test('negative control: the upstream itself sends every forged key and the impostor token argument', async (t) => {
  for (const mode of ['json', 'sse'] as const) {
    upstream.mode = mode;
    const list = await send(upstream.url, { jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} });
    const keys = list.messages.flatMap((message) => namespaceKeysIn(message));
    t.ok(keys.some((key) => key.endsWith('["xyz.tollbooth/refusal"]')), `${mode}: the \\u-escaped spelling decodes to the real key`);
    t.ok(keys.some((key) => key.endsWith('["xyz.tollbooth/receipt"]')), `${mode}: the \\/ spelling too`);
    t.match(list.text, /\\u002etollbooth/, `${mode}: written with escapes on the wire`);
    const echo = (list.messages.find((message) => message.result)?.result.tools as Json[])[0] as Json;
    t.equal(echo.inputSchema.properties.tollboothToken.description, GATEWAY_WORDING);
    const call = await send(upstream.url, { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'echo', arguments: { text: 'x' } } });
    t.ok(call.text.includes(ATTACKER_HOST), `${mode}: a forged challenge with the attacker's link`);
  }
});

for (const era of ['legacy', 'modern'] as const) {
  for (const mode of ['json', 'sse'] as const) {
    t.test(`${era}, ${mode} replies: tools/list, a free call carrying a handle, an error and a paid call — only the gateway's own price and receipt`, async (t) => {
      upstream.mode = mode;
      const gateway = await gatewayFor(t);
      const handle = await fundedHandle(gateway);
      let client: Client;
      if (era === 'legacy') {
        const opened = await legacyClient(gateway.url);
        assertClean(t, opened.initialize, 'initialize');
        client = opened.client;
      } else {
        client = modernClient(gateway.url);
      }
      assertListing(t, await client.request(1, 'tools/list'), 'tools/list');

      const before = upstream.calls.length;
      const free = await client.request(2, 'tools/call', { name: 'echo', arguments: { text: 'hi', tollboothToken: handle } });
      assertClean(t, free, 'the free call (and the events before its result)');
      t.equal(free.messages.at(-1)?.result.content[0].text, 'echo:hi');
      t.equal(free.messages.at(-1)?.result._meta['vendor.example/kept'], true, "the upstream's own _meta keys stay");
      t.same(upstream.calls.slice(before), [{ name: 'echo', arguments: { text: 'hi' }, era }], 'the upstream got the call without the handle');
      if (mode === 'sse') t.equal(free.messages.length, 3, 'the notification and the server→client request before the result were passed on');

      assertClean(t, await client.request(3, 'tools/call', { name: 'broken', arguments: { tollboothToken: handle } }), 'a JSON-RPC error');
      t.same(upstream.calls.at(-1)?.arguments, {}, 'no handle to a tool the upstream answers with an error either');

      const paid = await client.request(4, 'tools/call', { name: 'fetch_readable', arguments: { url: 'https://example.com/', tollboothToken: handle } });
      assertClean(t, paid, 'the paid call', [`.result._meta["${RECEIPT}"]`]);
      t.same(paid.messages.at(-1)?.result._meta[RECEIPT], { sku: 'research', cost: 1, remaining: 2 }, "the gateway's own receipt, not the forged one");
      t.same(upstream.calls.at(-1)?.arguments, { url: 'https://example.com/' });
    });
  }
}

for (const mode of ['json', 'sse'] as const) {
  t.test(`legacy batches (${mode}): free-only and with a paid entry — stripped, and no handle forwarded to the free entry`, async (t) => {
    upstream.mode = mode;
    const gateway = await gatewayFor(t);
    const handle = await fundedHandle(gateway);
    const { client } = await legacyClient(gateway.url);
    const headers = { 'mcp-session-id': client.sessionId as string, 'mcp-protocol-version': '2025-03-26' };
    const echo = (id: number) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'echo', arguments: { text: `b${id}`, tollboothToken: handle } } });
    const before = upstream.calls.length;
    const freeOnly = await send(gateway.url, [echo(10), { jsonrpc: '2.0', id: 11, method: 'tools/list', params: {} }], headers);
    assertClean(t, freeOnly, 'a batch of free entries', [`.result.tools.1._meta["${PRICE}"]`]);
    const withPaid = await send(gateway.url, [echo(12), { jsonrpc: '2.0', id: 13, method: 'tools/call', params: { name: 'fetch_readable', arguments: { url: 'u', tollboothToken: handle } } }], headers);
    assertClean(t, withPaid, 'a batch holding a paid entry', [`.result._meta["${RECEIPT}"]`]);
    t.same(withPaid.messages.find((message) => message.id === 13)?.result._meta[RECEIPT], { sku: 'research', cost: 1, remaining: 2 });
    t.same(
      upstream.calls.slice(before).map((call) => call.arguments),
      [{ text: 'b10' }, { text: 'b12' }, { url: 'u' }],
      'no handle reached the upstream from any entry',
    );
  });
}

for (const priced of [true, false]) {
  t.test(`GET streams and Last-Event-ID replays carry none of the namespace (${priced ? 'priced tools' : 'no tool priced'})`, async (t) => {
    upstream.mode = 'sse';
    const gateway = await gatewayFor(t, { priced });
    const { client } = await legacyClient(gateway.url);
    const headers = { 'mcp-session-id': client.sessionId as string, 'mcp-protocol-version': LEGACY };
    const call = await client.request(5, 'tools/call', { name: 'echo', arguments: { text: 'r' } });
    t.same(call.eventIds.length, 3, 'the POST stream carried event ids');
    const replay = await readStream(gateway.url, { ...headers, 'last-event-id': call.eventIds[0] as string }, 3);
    t.equal(replay.messages.length, 3, 'the two replayed events and a live one');
    assertClean(t, replay, 'the Last-Event-ID replay');
    const live = await readStream(gateway.url, headers, 2, () => setTimeout(() => upstream.notify(client.sessionId as string), 100));
    t.equal(live.messages.length, 2, 'the opening notification and one pushed later');
    assertClean(t, live, 'the GET stream');
    if (!priced) assertListing(t, await client.request(6, 'tools/list'), 'tools/list with no tool priced', { priced: false });
  });
}

t.test("an upstream 4xx (an unknown session) on a free and on a paid call: the upstream's error body is stripped", async (t) => {
  upstream.mode = 'json';
  const gateway = await gatewayFor(t);
  const handle = await fundedHandle(gateway);
  const headers = { 'mcp-session-id': 'no-such-session', 'mcp-protocol-version': LEGACY };
  const free = await send(gateway.url, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'echo', arguments: { text: 'x' } } }, headers);
  t.equal(free.status, 404, 'the status passes through');
  assertClean(t, free, 'the 404 of a free call');
  t.equal(free.messages[0]?.error.message, 'Session not found');
  const paid = await send(gateway.url, { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'fetch_readable', arguments: { url: 'u', tollboothToken: handle } } }, headers);
  t.equal(paid.status, 404);
  assertClean(t, paid, 'the 404 of a paid call');
});
