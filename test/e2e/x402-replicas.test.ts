// SPEC §19 across replicas: two `tollbooth start` processes on one Redis. The same x402 payment sent to
// both at once runs the tool exactly once and is settled exactly once (the nonce claim is in the shared
// store). A call settled by the replica that verified it is delivered when the client resumes through the
// other replica; a result that turns up at the other replica while the call is in flight is dropped
// there, and the call is not settled (only the first replica holds the payment).
// Needs a built dist/ (`npm run build`).
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import t, { type Test } from 'tap';
import type { PaymentPayload } from '@x402/core/types';
import { waitFor } from '../helpers/clock.js';
import { redisGatewayConfig, scrape, startGatewayProcess, sumCounter, type GatewayProcess } from '../helpers/gateway-process.js';
import { openSession, post, postRaw, resume, type SessionHandle } from '../helpers/legacy-session.js';
import { startPaidUpstream, type PaidUpstream, type UpstreamMode } from '../helpers/paid-upstream.js';
import { startRedis } from '../helpers/redis-server.js';
import { startFakeFacilitator, type FakeFacilitator } from '../helpers/x402-facilitator.js';
import { paymentMeta, paymentRequiredOf, withX402 } from '../helpers/x402-gateway.js';
import { newPayer } from '../helpers/x402-payer.js';

type Json = Record<string, any>;

const REFUSAL = 'xyz.tollbooth/refusal';
const RESPONSE = 'x402/payment-response';

const redis = await startRedis();
t.teardown(() => redis.stop());

interface Rig {
  upstream: PaidUpstream;
  fake: FakeFacilitator;
  a: GatewayProcess;
  b: GatewayProcess;
}

async function setUp(t: Test, mode: UpstreamMode, callDeadline = 6_000): Promise<Rig> {
  const upstream = await startPaidUpstream(mode, { ignoreCancellation: true });
  t.teardown(() => upstream.close());
  const fake = await startFakeFacilitator();
  t.teardown(() => fake.close());
  const keyPrefix = `tbx402${randomBytes(3).toString('hex')}:`;
  const config = withX402(redisGatewayConfig(upstream.url, { url: redis.url }, keyPrefix, { upstream: { url: upstream.url, callDeadline } }), fake.url);
  const [a, b] = await Promise.all([startGatewayProcess(t, config), startGatewayProcess(t, config)]);
  return { upstream, fake, a: a, b: b };
}

const call = (id: unknown, name: string, args: Json, payload?: PaymentPayload): Json => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args, ...(payload ? { _meta: paymentMeta(payload) } : {}) } });

async function postJson(url: string, body: unknown): Promise<Json> {
  const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' }, body: JSON.stringify(body) });
  return (await response.json()) as Json;
}

async function payFor(url: string, name: string, args: Json): Promise<PaymentPayload> {
  const challenge = (await postJson(url, call('challenge', name, args))).result as Json;
  return newPayer().pay(paymentRequiredOf(challenge));
}

async function sessionPayFor(session: SessionHandle, name: string, args: Json): Promise<PaymentPayload> {
  const challenge = ((await (await postRaw(session, call('challenge', name, args))).json()) as Json).result as Json;
  return newPayer().pay(paymentRequiredOf(challenge));
}

t.test('one payment sent to both replicas at once, five times each: the tool runs once, the facilitator settles once', async (t) => {
  const { upstream, fake, a, b } = await setUp(t, 'stateless-json');
  const args = { url: 'https://example.com/replicas' };
  const payload = await payFor(a.url, 'fetch_readable', args);
  const replies = await Promise.all(Array.from({ length: 10 }, (_, i) => postJson(i % 2 === 0 ? a.url : b.url, call(i, 'fetch_readable', args, payload))));
  const delivered = replies.filter((r) => r.result?._meta?.[RESPONSE]?.success);
  const refused = replies.filter((r) => r.result?._meta?.[REFUSAL]?.reason === 'payment_invalid');
  t.equal(delivered.length, 1, 'exactly one delivered');
  t.equal(refused.length, 9, 'nine refused');
  t.ok(refused.every((r) => r.result._meta[REFUSAL].invalidReason === 'invalid_exact_evm_nonce_already_used'));
  t.equal(upstream.callsOf('fetch_readable').filter((c) => c.arguments.url === args.url).length, 1, 'the tool ran once');
  t.equal(fake.calls.settle, 1, 'settled once');
  let settled = 0;
  for (const gateway of [a, b]) settled += sumCounter(await scrape(gateway.origin), 'tollbooth_x402_payments_total', { result: 'settled' });
  t.equal(settled, 1, 'one settlement counted over both replicas');
});

t.test('settled by the replica that verified it, the client gone: delivered with its settlement when resumed through the other replica', async (t) => {
  const { upstream, fake, a, b } = await setUp(t, 'sessions-resumable');
  const session = await openSession(a.url);
  const payload = await sessionPayFor(session, 'slow', { ms: 400 });
  const paid = await post(session, call(21, 'slow', { ms: 400 }, payload));
  const first = await paid.next();
  t.ok(first?.id, 'the first event carries an id');
  paid.abort();
  await waitFor(() => fake.calls.settle > 0, 'replica A to settle'); // the tool finishes; replica A settles
  t.equal(fake.calls.settle, 1);

  const resumed = await resume({ ...session, url: b.url }, first?.id as string);
  const reply = await resumed.responseFor(21, 8_000);
  resumed.abort();
  t.equal(reply?.result?.content?.[0]?.text, 'slept:400', 'the result, through the other replica');
  t.match(reply?.result?._meta?.[RESPONSE], { success: true, network: 'eip155:84532', transaction: /^0x[0-9a-f]{64}$/ }, 'with its settlement');
  t.equal(fake.calls.settle, 1, 'still settled once');
  t.equal(upstream.callsOf('slow').length, 1);
});

t.test('resumed through the other replica while in flight: dropped there, and not settled anywhere', async (t) => {
  const { upstream, fake, a, b } = await setUp(t, 'sessions-resumable');
  const session = await openSession(a.url);
  const payload = await sessionPayFor(session, 'slow', { ms: 1_000 });
  const paid = await post(session, call(22, 'slow', { ms: 1_000 }, payload));
  const first = await paid.next();
  paid.abort();
  await sleep(150);

  const resumed = await resume({ ...session, url: b.url }, first?.id as string);
  const reply = await resumed.responseFor(22, 4_000);
  resumed.abort();
  t.equal(reply, null, 'replica B cannot settle it, so it never delivers it');
  await sleep(500);
  t.equal(fake.calls.settle, 0, 'not settled: the payer keeps the money');
  t.equal(upstream.callsOf('slow').length, 1);
  let notSettled = 0;
  for (const gateway of [a, b]) notSettled += sumCounter(await scrape(gateway.origin), 'tollbooth_x402_payments_total', { result: 'not_settled' });
  t.equal(notSettled, 1, 'concluded once, unsettled, by replica A');
});
