// SPEC §6.5 and §19 together: an x402-paid call on a resumable upstream (SDK v1 server with an event
// store, sessions, SSE). Only the exchange that verified the payment holds it, so only that exchange can
// settle: a call it completes is settled even when the client hung up, and its result is delivered when
// the client resumes; a call released at the deadline is never settled and its late result never
// delivered; a result that turns up on another stream while the call is in flight is dropped and the
// call is not settled (docs/decisions.md, "x402 on the request path").
import { setTimeout as sleep } from 'node:timers/promises';
import t, { type Test } from 'tap';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { PaymentPayload } from '@x402/core/types';
import { waitFor } from '../helpers/clock.js';
import { startTestGateway, testConfig, type TestGateway } from '../helpers/gateway.js';
import { openSession, post, postRaw, resume, type SessionHandle } from '../helpers/legacy-session.js';
import { startPaidUpstream, type PaidUpstream } from '../helpers/paid-upstream.js';
import { startFakeFacilitator, type FakeFacilitator } from '../helpers/x402-facilitator.js';
import { paymentMeta, paymentRequiredOf, withX402 } from '../helpers/x402-gateway.js';
import { newPayer } from '../helpers/x402-payer.js';

type Json = Record<string, any>;

const REFUSAL = 'xyz.tollbooth/refusal';
const NOTE = 'xyz.tollbooth/x402';
const RESPONSE = 'x402/payment-response';

interface Rig {
  upstream: PaidUpstream;
  gateway: TestGateway;
  fake: FakeFacilitator;
}

async function setUp(t: Test, options: { callDeadline?: string; ignoreCancellation?: boolean } = {}): Promise<Rig> {
  const upstream = await startPaidUpstream('sessions-resumable', { ignoreCancellation: options.ignoreCancellation ?? false });
  t.teardown(() => upstream.close());
  const fake = await startFakeFacilitator();
  t.teardown(() => fake.close());
  const base = testConfig(upstream.url);
  const gateway = await startTestGateway(t, withX402({ ...base, upstream: { url: upstream.url, callDeadline: options.callDeadline ?? '10s' }, tools: { ...base.tools, polling: { sku: 'research', cost: 1 }, progress: { sku: 'research', cost: 1 } } }, fake.url));
  return { upstream, gateway, fake };
}

const call = (id: unknown, name: string, args: Json, payload?: PaymentPayload): Json => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args, ...(payload ? { _meta: paymentMeta(payload) } : {}) } });

/** The unpaid call in the session (answered as JSON by the gateway), then a payment for it. */
async function payFor(session: SessionHandle, name: string, args: Json): Promise<PaymentPayload> {
  const reply = await postRaw(session, call(`challenge-${Math.random()}`, name, args));
  const challenge = ((await reply.json()) as Json).result as Json;
  return newPayer().pay(paymentRequiredOf(challenge));
}

t.test('a client that hangs up after the first event: the call completes and is settled once; the result is delivered on resume', async (t) => {
  const { upstream, gateway, fake } = await setUp(t);
  const session = await openSession(gateway.url);
  const payload = await payFor(session, 'slow', { ms: 400 });
  const paid = await post(session, call(7, 'slow', { ms: 400 }, payload));
  const first = await paid.next();
  t.ok(first?.id, 'the first event carries an id');
  paid.abort();
  await waitFor(() => fake.calls.settle > 0, 'the settlement'); // the tool finishes upstream and the gateway settles while nobody listens
  t.equal(fake.calls.settle, 1, 'settled by the exchange that held the payment, the client gone');

  const resumed = await resume(session, first?.id as string);
  const reply = await resumed.responseFor(7, 5_000);
  resumed.abort();
  t.equal(reply?.result?.content?.[0]?.text, 'slept:400', 'the result the payer paid for');
  t.match(reply?.result?._meta?.[RESPONSE], { success: true, network: 'eip155:84532', transaction: /^0x[0-9a-f]{64}$/ }, 'with its settlement');
  t.equal(fake.calls.settle, 1, 'settled exactly once');
  t.equal(upstream.callsOf('slow').length, 1, 'the tool ran once');
});

t.test('a call released at the deadline is not settled, and its late result is never delivered', async (t) => {
  const { upstream, gateway, fake } = await setUp(t, { callDeadline: '600ms', ignoreCancellation: true });
  const session = await openSession(gateway.url);
  const payload = await payFor(session, 'slow', { ms: 1_500 });
  const paid = await post(session, call(9, 'slow', { ms: 1_500 }, payload));
  const first = await paid.next();
  const refused = await paid.responseFor(9, 5_000);
  t.equal(refused?.result?._meta?.[REFUSAL]?.reason, 'deadline_exceeded', 'the POST is answered at the deadline');
  t.same(refused?.result?._meta?.[NOTE], { settled: false, reason: 'deadline_exceeded' }, 'not settled, and it says so');
  t.match(refused?.result?.content?.[0]?.text, /x402 payment was not taken/);

  await sleep(1_500); // the tool (ignoring the cancellation) finishes and its result is kept for replay
  const resumed = await resume(session, first?.id as string);
  const late = await resumed.responseFor(9, 1_000);
  resumed.abort();
  t.equal(late, null, 'the late result does not reach the client');
  t.equal(fake.calls.settle, 0, 'never settled');
  // Negative control: the upstream does replay the late result to whoever asks it directly.
  const direct = await resume({ ...session, url: upstream.url }, first?.id as string);
  const replayed = await direct.responseFor(9, 3_000);
  direct.abort();
  t.equal(replayed?.result?.content?.[0]?.text, 'slept:1500');
});

t.test('an upstream that closes the POST stream on purpose (2025-11-25 polling): the x402 call fails closed, not settled, and the client is told', async (t) => {
  const { upstream, gateway, fake } = await setUp(t);
  const client = new Client({ name: 'x402-polling', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(gateway.url), { reconnectionOptions: { initialReconnectionDelay: 50, maxReconnectionDelay: 200, reconnectionDelayGrowFactor: 1.5, maxRetries: 5 } }));
  t.teardown(() => client.close());
  const challenge = (await client.callTool({ name: 'polling', arguments: { ms: 300 } })) as Json;
  const payload = await newPayer().pay(paymentRequiredOf(challenge));
  const result = (await client.callTool({ name: 'polling', arguments: { ms: 300 }, _meta: paymentMeta(payload) })) as Json;
  t.equal(result._meta?.[REFUSAL]?.reason, 'upstream_unavailable', 'a refusal, not a hang');
  t.same(result._meta?.[NOTE], { settled: false, reason: 'upstream_error' });
  t.equal(fake.calls.settle, 0, 'not settled: the payer keeps the money');
  t.equal(upstream.callsOf('polling').length, 1);
  await waitFor(() => upstream.cancellations.length > 0, 'notifications/cancelled at the upstream');
  t.equal(upstream.cancellations.length, 1, 'the upstream was told to cancel');
});

t.test('a client that resumes while the tool still runs (the upstream moves the stream to the GET): dropped there, not settled', async (t) => {
  // The tool ignores the cancellation, so its result really turns up on the resumed GET.
  const { upstream, gateway, fake } = await setUp(t, { ignoreCancellation: true });
  const session = await openSession(gateway.url);
  const payload = await payFor(session, 'slow', { ms: 800 });
  const paid = await post(session, call(8, 'slow', { ms: 800 }, payload));
  const first = await paid.next();
  paid.abort();
  await sleep(150);

  const resumed = await resume(session, first?.id as string);
  const reply = await resumed.responseFor(8, 3_000);
  resumed.abort();
  t.equal(reply, null, 'the result is not delivered on a stream that cannot settle it');
  t.equal(fake.calls.settle, 0, 'not settled: the payer keeps the money');
  t.equal(upstream.callsOf('slow').length, 1);
  const line = gateway.logs().find((l) => l.evt === 'call' && l.rail === 'x402' && l.tool === 'slow');
  t.match(line, { settled: false, outcome: 'upstream_error' }, 'the owner concluded it unsettled');
  t.ok(gateway.logs().some((l) => l.evt === 'priced_response_dropped' && l.tool === 'slow'), 'the result did turn up on the GET, and was dropped there');
});

t.test('a settlement refused on an SSE reply: the result event is replaced by payment_failed under the same event id; no part of the result goes out', async (t) => {
  const { gateway, fake } = await setUp(t);
  const session = await openSession(gateway.url);
  const payload = await payFor(session, 'progress', { steps: 2 });
  fake.failSettle({ mode: 'refuse', reason: 'insufficient_funds' }, 1);
  const paid = await post(session, { ...call(31, 'progress', { steps: 2 }, payload), params: { name: 'progress', arguments: { steps: 2 }, _meta: { ...paymentMeta(payload), progressToken: 'p1' } } });
  t.match(paid.response.headers.get('content-type'), /text\/event-stream/);
  const reply = await paid.responseFor(31, 5_000);
  t.match(reply?.result?._meta?.[REFUSAL], { reason: 'payment_failed', errorReason: 'insufficient_funds' });
  const last = paid.events.at(-1);
  t.ok(last?.id, 'the final event keeps an event id (the held result event\'s)');
  t.ok(paid.events.some((e) => e.message?.method === 'notifications/progress'), 'progress before the result streamed as it came');
  t.notOk(paid.events.some((e) => e.data?.includes('done:2')), "nothing of the tool's result");
  t.equal(fake.calls.settle, 1);
});
