// Many callers on one handle (SPEC §6.2 step 6, §11): concurrent retries never spend more than the
// handle holds, and a legacy batch mixing free and priced entries is never a way around the paywall.
import t from 'tap';
import { startPaidUpstream, type PaidUpstream } from '../helpers/paid-upstream.js';
import { fundedHandle, researchBalance, startTestGateway, testConfig, type TestGateway } from '../helpers/gateway.js';

type Json = Record<string, any>;

let upstream: PaidUpstream;
t.before(async () => {
  upstream = await startPaidUpstream('stateless-json');
});
t.teardown(() => upstream.close());

let nextId = 1;
async function post(gateway: TestGateway, body: unknown, version = '2025-11-25'): Promise<{ status: number; json: any }> {
  const response = await fetch(gateway.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': version },
    body: JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, json: text ? JSON.parse(text) : null };
}
const call = (name: string, args: Json, id: number = nextId++) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } });

const balance = researchBalance;

t.test('60 concurrent retries on a handle holding 3 credits: exactly 3 reach the upstream', async (t) => {
  const gateway = await startTestGateway(t, testConfig(upstream.url));
  const handle = await fundedHandle(gateway);
  const before = upstream.callsOf('slow').length;
  // `slow` keeps every authorised call in flight while the others decide.
  const replies = await Promise.all(Array.from({ length: 60 }, () => post(gateway, call('slow', { ms: 150, tollboothToken: handle }))));
  const authorised = replies.filter((r) => r.json.result?._meta?.['xyz.tollbooth/receipt']);
  const challenged = replies.filter((r) => r.json.result?._meta?.['xyz.tollbooth/challenge']);
  t.equal(authorised.length, 3, 'three calls ran');
  t.equal(challenged.length, 57, 'every other call was challenged');
  t.ok(challenged.every((r) => ['credits_exhausted', 'payment_required'].includes(r.json.result._meta['xyz.tollbooth/challenge'].reason)));
  t.ok(challenged.every((r) => r.json.result._meta['xyz.tollbooth/challenge'].retry.value === handle), 'on the same handle');
  const links = new Set(challenged.map((r) => r.json.result._meta['xyz.tollbooth/challenge'].checkoutUrl));
  t.equal(links.size, 1, 'concurrent challenges for one handle share one new link');
  t.equal(upstream.callsOf('slow').length - before, 3, 'exactly 3 upstream calls');
  t.equal(await balance(gateway, handle), 0);
  // remaining is net of reservations other calls still hold: never above what is really left.
  // Receipts are net of reservations other calls hold: none claims more than is left, the last says 0.
  const remaining = authorised.map((r) => r.json.result._meta['xyz.tollbooth/receipt'].remaining as number);
  t.ok(remaining.every((n) => n >= 0 && n <= 2), `receipts ${remaining.join(',')}`);
  t.equal(Math.min(...remaining), 0);
});

t.test('concurrent unpaid first calls from one client each get their own handle', async (t) => {
  const gateway = await startTestGateway(t, testConfig(upstream.url));
  const replies = await Promise.all(Array.from({ length: 10 }, () => post(gateway, call('fetch_readable', { url: 'x' }))));
  const handles = new Set(replies.map((r) => r.json.result._meta['xyz.tollbooth/challenge'].retry.value));
  t.equal(handles.size, 10);
});

t.test('a batch mixing free and priced entries: free ones run, unpaid priced ones are challenged', async (t) => {
  const gateway = await startTestGateway(t, testConfig(upstream.url));
  const marker = `batch-${Date.now()}`;
  const before = upstream.callsOf('fetch_readable').length;
  const reply = await post(gateway, [call('echo', { text: marker }, 1), call('fetch_readable', { url: marker }, 2), call('fetch_readable', { url: marker, tollboothToken: 'tb_s_AAAAAAAAAAAAAAAAAAAAAA' }, 3)], '2025-03-26');
  t.equal(reply.status, 200);
  t.same(reply.json.map((m: Json) => m.id), [1, 2, 3], 'replies in the original order');
  t.match(reply.json[0].result.content[0].text, marker, 'the free entry ran');
  t.equal(reply.json[1].result._meta['xyz.tollbooth/challenge'].reason, 'payment_required');
  t.equal(reply.json[2].result._meta['xyz.tollbooth/challenge'].reason, 'unknown_handle');
  t.equal(upstream.callsOf('fetch_readable').length, before, 'no priced entry reached the upstream');
});

t.test('a batch repeating one funded handle five times spends 3 credits and forwards 3 entries', async (t) => {
  const gateway = await startTestGateway(t, testConfig(upstream.url));
  const handle = await fundedHandle(gateway);
  const marker = `batch5-${Date.now()}`;
  const entries = Array.from({ length: 5 }, (_, i) => call('fetch_readable', { url: marker, tollboothToken: handle }, 100 + i));
  const reply = await post(gateway, [call('echo', { text: 'free' }, 99), ...entries], '2025-03-26');
  const paid = reply.json.filter((m: Json) => m.result?._meta?.['xyz.tollbooth/receipt']);
  const challenged = reply.json.filter((m: Json) => m.result?._meta?.['xyz.tollbooth/challenge']);
  t.equal(paid.length, 3);
  t.equal(challenged.length, 2);
  t.ok(challenged.every((m: Json) => m.result._meta['xyz.tollbooth/challenge'].reason === 'credits_exhausted'));
  const seen = upstream.callsOf('fetch_readable').filter((c) => c.arguments.url === marker);
  t.equal(seen.length, 3, 'exactly the funded number reached the upstream');
  t.ok(seen.every((c) => !('tollboothToken' in c.arguments)), 'the token was stripped from every forwarded entry');
  t.notOk(upstream.sawText(handle), 'the handle never reached the upstream in any body');
  t.equal(await balance(gateway, handle), 0);
});

t.test('a batch that repeats a request id is refused before anything moves', async (t) => {
  const gateway = await startTestGateway(t, testConfig(upstream.url));
  const handle = await fundedHandle(gateway);
  const reply = await post(gateway, [call('fetch_readable', { url: 'a', tollboothToken: handle }, 7), call('echo', { text: 'b' }, 7)], '2025-03-26');
  t.equal(reply.status, 400);
  t.equal(reply.json.error.code, -32600);
  t.equal(await balance(gateway, handle), 3);
});
