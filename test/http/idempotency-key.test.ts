// The idempotency key on the MCP endpoint (SPEC §24), in-process gateway, real SDK upstream over HTTP:
// the _meta key never reaches the upstream; the header keys a single call; a batch ignores the header
// (one header cannot key several calls) and honours each entry's own _meta key.
import t from 'tap';
import { IDEMPOTENCY_META_KEY } from '../../src/paywall/idempotency-key.js';
import { fundedHandle, researchBalance, startTestGateway, testConfig } from '../helpers/gateway.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';

type Json = Record<string, any>;
let nextId = 1;

async function post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<Json | Json[]> {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18', ...headers },
    body: JSON.stringify(body),
  });
  return (await response.json()) as Json | Json[];
}

const call = (args: Json, meta?: Json): Json => ({ jsonrpc: '2.0', id: nextId++, method: 'tools/call', params: { name: 'fetch_readable', arguments: args, ...(meta ? { _meta: meta } : {}) } });

t.test('the _meta key keys the call and never reaches the upstream; the header keys a single call', async (t) => {
  const upstream = await startPaidUpstream('stateless-json');
  t.teardown(() => upstream.close());
  const gateway = await startTestGateway(t, testConfig(upstream.url));
  const handle = await fundedHandle(gateway);

  const first = (await post(gateway.url, call({ url: 'm', tollboothToken: handle }, { [IDEMPOTENCY_META_KEY]: 'meta-key', keep: 1 }))) as Json;
  const again = (await post(gateway.url, call({ url: 'm', tollboothToken: handle }, { [IDEMPOTENCY_META_KEY]: 'meta-key', keep: 1 }))) as Json;
  t.same(again.result, first.result, 'replayed');
  const forwarded = upstream.bodies.map((body) => JSON.parse(body) as Json).filter((message) => message.method === 'tools/call');
  t.equal(forwarded.length, 1, 'one upstream call');
  t.same(forwarded[0]?.params._meta, { keep: 1 }, 'the key was stripped, the rest of _meta forwarded');

  const byHeader = (await post(gateway.url, call({ url: 'h', tollboothToken: handle }), { 'idempotency-key': 'header-key' })) as Json;
  const replay = (await post(gateway.url, call({ url: 'h', tollboothToken: handle }), { 'idempotency-key': 'header-key' })) as Json;
  t.same(replay.result, byHeader.result);
  t.equal(await researchBalance(gateway, handle), 1, 'two calls charged, two replays free');
});

t.test('a batch ignores the Idempotency-Key header and honours each entry\'s _meta key', async (t) => {
  const upstream = await startPaidUpstream('stateless-json');
  t.teardown(() => upstream.close());
  const gateway = await startTestGateway(t, testConfig(upstream.url, { skus: { research: { label: 'Research tools', amount: '5.00', currency: 'USDC', credits: 10 } } }));
  const handle = await fundedHandle(gateway);
  const replies = (await post(gateway.url, [call({ url: 'a', tollboothToken: handle }), call({ url: 'b', tollboothToken: handle })], { 'idempotency-key': 'one-for-all' })) as Json[];
  t.same(replies.map((reply) => reply.result?.content?.[0]?.text), ['ok:{"url":"a"}', 'ok:{"url":"b"}'], 'both ran: no conflict, no wait on each other');
  const keyed = (await post(gateway.url, [call({ url: 'c', tollboothToken: handle }, { [IDEMPOTENCY_META_KEY]: 'entry-key' })])) as Json[];
  const replayed = (await post(gateway.url, call({ url: 'c', tollboothToken: handle }, { [IDEMPOTENCY_META_KEY]: 'entry-key' }))) as Json;
  t.same(replayed.result, keyed[0]?.result, 'an entry\'s own key is kept and replayed');
  t.equal(await researchBalance(gateway, handle), 7, 'three calls charged');
});
