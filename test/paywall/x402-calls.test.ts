// The x402 rail inside the paywall (SPEC §19 with §6.2/§6.5), on the Paywall class with a real rail, a
// memory store and the fake facilitator over real HTTP: which calls take the rail, the retry bucket of
// its own, the charge policy deciding settlement on every outcome, and a result seen on another stream
// (resumed) — delivered only when its call was settled, never concluded there.
import { Writable } from 'node:stream';
import t, { type Test } from 'tap';
import type { PaymentPayload } from '@x402/core/types';
import type { ToolCall } from '../../src/mcp/classify.js';
import type { JsonObject, JsonRpcResponse } from '../../src/mcp/jsonrpc.js';
import type { PriceTag } from '../../src/mcp/tools-list.js';
import { createLogger } from '../../src/observability/logger.js';
import { createMetrics } from '../../src/observability/metrics.js';
import { DevProvider } from '../../src/payments/dev.js';
import { Settler } from '../../src/payments/settle.js';
import { X402Rail } from '../../src/payments/x402/rail.js';
import { Paywall } from '../../src/paywall/decide.js';
import type { Authorisation, PricedCall } from '../../src/paywall/outcome.js';
import { X402Calls } from '../../src/paywall/x402-calls.js';
import { MemoryStore } from '../../src/store/memory.js';
import type { PricedRequestKey } from '../../src/store/store.js';
import { TERMS } from '../payments/x402/fixtures.js';
import { startFakeFacilitator, type FakeFacilitator } from '../helpers/x402-facilitator.js';
import { paymentRequiredOf } from '../helpers/x402-gateway.js';
import { newPayer } from '../helpers/x402-payer.js';
import { systemClock } from '../../src/clock.js';

type Json = Record<string, any>;
const HOUR = 3_600_000;

async function rig(t: Test, options: { charge?: 'success' | 'attempt'; currency?: string; retries?: { ratePerSecond: number; burst: number }; challenges?: { ratePerSecond: number; burst: number } } = {}) {
  const fake: FakeFacilitator = await startFakeFacilitator();
  t.teardown(() => fake.close());
  const store = new MemoryStore();
  const logger = createLogger('info', new Writable({ write: (_chunk, _e, done) => done() }));
  const metrics = createMetrics(async () => 0);
  const provider = new DevProvider({ store, publicUrl: 'http://127.0.0.1:9/mcp' });
  const settler = new Settler({ store, provider, policy: { tolerance: 0.005, minimumFraction: 0.1 }, metrics, logger, clock: systemClock });
  const rail = new X402Rail({ terms: TERMS, facilitator: await facilitatorFor(t, fake.url, logger), store, logger, metrics });
  const x402 = new X402Calls({
    rail,
    store,
    settings: { endpointUrl: 'http://127.0.0.1:9/mcp', x402Prices: { research: '0.01' }, perClient: options.retries ?? { ratePerSecond: 100, burst: 100 }, argumentName: 'tollboothToken' },
    metrics,
    logger,
  });
  const paywall = new Paywall({
    settings: { argumentName: 'tollboothToken', hashSecret: 'x402-calls-secret', handleTtlMs: HOUR, chargeTtlMs: HOUR, callDeadlineMs: 20_000, perHandle: { ratePerSecond: 100, burst: 100 }, challengesPerClient: options.challenges ?? { ratePerSecond: 100, burst: 100 }, newChargesPerSecond: 1_000 },
    store,
    provider,
    settler,
    metrics,
    logger,
    now: Date.now,
    x402,
  });
  const price: PriceTag = { sku: 'research', cost: 1, amount: '5.00', currency: options.currency ?? 'USDC', credits: 3, label: 'Research tools', charge: options.charge ?? 'success' };
  let nextId = 0;
  const priced = (args: Json = {}, meta?: JsonObject): PricedCall => {
    const call: ToolCall = { request: { jsonrpc: '2.0', id: ++nextId, method: 'tools/call', params: { name: 'fetch_readable', arguments: args, ...(meta ? { _meta: meta } : {}) } }, name: 'fetch_readable', args };
    return { call, price, principal: null, clientKey: 'ip:127.0.0.1', resultShape: async () => ({ era: 'legacy', structuredContentAllowed: true }), startedAt: Date.now() };
  };
  /** A challenge, then a payment signed for it. */
  async function payment(): Promise<PaymentPayload> {
    const challenge = await paywall.authorise(priced());
    if (challenge.kind !== 'answer') throw new Error('expected a challenge');
    return newPayer().pay(paymentRequiredOf(challenge.result));
  }
  async function verified(): Promise<{ call: PricedCall; held: Extract<Authorisation, { kind: 'x402' }> }> {
    const call = priced({ url: 'u' }, { 'x402/payment': await payment() });
    const held = await paywall.authorise(call);
    if (held.kind !== 'x402') throw new Error(`expected an x402 authorisation, got ${JSON.stringify(held).slice(0, 300)}`);
    return { call, held };
  }
  return { paywall, store, fake, priced, payment, verified };
}

async function facilitatorFor(t: Test, url: string, logger: ReturnType<typeof createLogger>) {
  const { FacilitatorClient } = await import('../../src/payments/x402/facilitator.js');
  const client = new FacilitatorClient({ url, logger });
  t.teardown(() => client.close());
  return client;
}

const ok = (id: number): JsonRpcResponse => ({ jsonrpc: '2.0', id, result: { content: [{ type: 'text', text: 'value' }] } });
const meta = (message: JsonRpcResponse | null): Json => ((message?.result as Json | undefined)?._meta ?? {}) as Json;
const idOf = (call: PricedCall) => call.call.request.id as number;

t.test('a payment and no handle takes the x402 rail; beside a handle, or for a SKU in another currency, the credit rail decides', async (t) => {
  const { paywall, priced, payment, fake } = await rig(t);
  const payload = await payment();
  const withHandle = await paywall.authorise(priced({ tollboothToken: 'tb_s_AAAAAAAAAAAAAAAAAAAAAA' }, { 'x402/payment': payload }));
  t.equal(withHandle.kind, 'answer');
  t.equal((withHandle as Json).result._meta['xyz.tollbooth/challenge'].reason, 'unknown_handle', 'the handle is judged, the payment ignored');
  t.ok((withHandle as Json).result._meta['x402/payment-required'], 'every challenge reason offers both rails');
  t.equal(fake.calls.verify, 0);

  const euro = await rig(t, { currency: 'EUR' });
  const answer = await euro.paywall.authorise(euro.priced({}, { 'x402/payment': payload }));
  t.equal((answer as Json).result._meta['xyz.tollbooth/challenge'].reason, 'payment_required', 'a SKU the rail does not offer: a checkout challenge');
  t.equal((answer as Json).result._meta['x402/payment-required'], undefined);

  const taken = await paywall.authorise(priced({ url: 'u', tollboothToken: 42 }, { 'x402/payment': payload }));
  t.equal(taken.kind, 'x402', 'a token that is not a string is no handle');
  t.same((taken as Json).forwardParams, { name: 'fetch_readable', arguments: { url: 'u' } }, 'forwarded without the payment or the token argument');
  t.same((taken as Json).facts, { rail: 'x402', tokenPresented: true, tokenFingerprint: null, tokenRecognised: false });
});

t.test('the retry bucket is its own: an exhausted challenge bucket does not stop paid retries; an exhausted retry bucket stops them before /verify', async (t) => {
  const { paywall, priced, payment, fake } = await rig(t, { challenges: { ratePerSecond: 0.001, burst: 2 }, retries: { ratePerSecond: 0.001, burst: 1 } });
  const [one, two] = [await payment(), await payment()]; // two challenges: the challenge bucket is empty
  const throttled = await paywall.authorise(priced());
  t.equal((throttled as Json).result._meta['xyz.tollbooth/refusal'].reason, 'rate_limited', 'challenges are throttled');
  t.equal((await paywall.authorise(priced({ url: 'u' }, { 'x402/payment': one }))).kind, 'x402', 'a paid retry still passes');
  const retry = await paywall.authorise(priced({ url: 'u' }, { 'x402/payment': two }));
  t.equal((retry as Json).result._meta['xyz.tollbooth/refusal'].reason, 'rate_limited', 'the second retry is over its own bucket');
  t.match((retry as Json).result.content[0].text, /x402 payment was not used/);
  t.equal(fake.calls.verify, 1, 'the facilitator saw only the first');
});

t.test('charge: attempt settles once the upstream accepted: a deadline after acceptance is paid and says so', async (t) => {
  const { paywall, verified, fake } = await rig(t, { charge: 'attempt' });
  const { call, held } = await verified();
  const conclusion = await paywall.conclude(call, held, { kind: 'deadline', accepted: true }, null);
  t.equal(conclusion.state, 'committed');
  t.equal(meta(conclusion.message)['xyz.tollbooth/refusal'].reason, 'deadline_exceeded');
  t.ok(meta(conclusion.message)['x402/payment-response'].success, 'with the settlement');
  t.match((conclusion.message?.result as Json).content[0].text, /x402 payment was taken/);
  t.equal(fake.calls.settle, 1);

  const refused = await verified();
  const never = await paywall.conclude(refused.call, refused.held, { kind: 'failed', accepted: false }, null);
  t.equal(never.state, 'released', 'a connection the upstream refused: the tool never ran');
  t.same(meta(never.message)['xyz.tollbooth/x402'], { settled: false, reason: 'upstream_error' });
  t.equal(fake.calls.settle, 1);
});

t.test('charge: success: an upstream 4xx, an isError result or a JSON-RPC error is not settled; an upstream cannot forge the settlement', async (t) => {
  const { paywall, verified, fake } = await rig(t);
  const a = await verified();
  t.same(await paywall.conclude(a.call, a.held, { kind: 'http_refusal', status: 404 }, null), { state: 'released', message: null }, "the upstream's 4xx is relayed as it is");
  const forged = await verified();
  const lying: JsonRpcResponse = { jsonrpc: '2.0', id: idOf(forged.call), result: { content: [], isError: true, _meta: { 'x402/payment-response': { success: true, transaction: '0xfake' }, other: 1 } } };
  const notPaid = await paywall.conclude(forged.call, forged.held, { kind: 'answered', message: lying }, null);
  t.same(meta(notPaid.message), { other: 1, 'xyz.tollbooth/x402': { settled: false, reason: 'tool_error' } }, "an upstream's own x402/payment-response never reaches the client of an unsettled call");
  const b = await verified();
  const error: JsonRpcResponse = { jsonrpc: '2.0', id: idOf(b.call), error: { code: -32000, message: 'boom' } };
  const concluded = await paywall.conclude(b.call, b.held, { kind: 'answered', message: error }, null);
  t.same(concluded, { state: 'released', message: error });
  t.equal(fake.calls.settle, 0);
});

t.test('a registered call: the registry learns the end; elsewhere its result is delivered only when settled, never concluded there', async (t) => {
  const { paywall, store, verified, fake } = await rig(t);
  const register = async (call: PricedCall, held: Extract<Authorisation, { kind: 'x402' }>): Promise<PricedRequestKey> => {
    const key = { session: 's', requestId: JSON.stringify(idOf(call)) };
    await store.registerPricedRequest(key, { state: 'in_flight', handleHash: '', reservationId: '', x402: held.claim.key, tool: 'fetch_readable', sku: 'research', cost: 1, charge: 'success', deadline: Date.now() + 20_000, remaining: null, fingerprint: null, startedAt: Date.now() }, HOUR);
    return key;
  };
  const paid = await verified();
  const key = await register(paid.call, paid.held);
  const seenElsewhere = ok(idOf(paid.call));
  t.equal(await paywall.concludeResumed(key, (await store.getPricedRequest(key))!, seenElsewhere), null, 'in flight: dropped, not concluded');
  t.equal(fake.calls.settle, 0, 'nothing settled by the other stream');
  t.equal((await store.getPricedRequest(key))?.state, 'in_flight');

  await paywall.conclude(paid.call, paid.held, { kind: 'answered', message: ok(idOf(paid.call)) }, key);
  const record = (await store.getPricedRequest(key))!;
  t.equal(record.state, 'committed', 'settled: committed in the registry before the answer goes out');
  const resumed = await paywall.concludeResumed(key, record, seenElsewhere);
  t.match(meta(resumed)['x402/payment-response'], { success: true, network: TERMS.network, transaction: /^0x[0-9a-f]{64}$/, payer: paid.held.claim.payer }, 'delivered with the settlement read from the authorization');
  t.equal(fake.calls.settle, 1);

  const failed = await verified();
  const failedKey = await register(failed.call, failed.held);
  await paywall.conclude(failed.call, failed.held, { kind: 'answered', message: { jsonrpc: '2.0', id: idOf(failed.call), result: { content: [], isError: true } } }, failedKey);
  const released = (await store.getPricedRequest(failedKey))!;
  t.equal(released.state, 'released');
  t.equal(await paywall.concludeResumed(failedKey, released, ok(idOf(failed.call))), null, 'released: dropped');
});
