// Idempotent retries on the x402 rail (SPEC §24 with §19): the payment-identifier extension id is the
// key, the verified payer its owner. A retry carrying a new signed payment with the same id gets the
// first call's result (its settlement included) and its own payment is not settled; the same id with
// other arguments is refused idempotency_conflict. Real rail, memory store, the fake facilitator over HTTP.
import { Writable } from 'node:stream';
import t, { type Test } from 'tap';
import type { PaymentPayload } from '@x402/core/types';
import { systemClock } from '../../src/clock.js';
import type { ToolCall } from '../../src/mcp/classify.js';
import type { JsonObject, JsonRpcResponse } from '../../src/mcp/jsonrpc.js';
import type { PriceTag } from '../../src/mcp/tools-list.js';
import { createLogger } from '../../src/observability/logger.js';
import { createMetrics } from '../../src/observability/metrics.js';
import { DevProvider } from '../../src/payments/dev.js';
import { Settler } from '../../src/payments/settle.js';
import { FacilitatorClient } from '../../src/payments/x402/facilitator.js';
import { X402Rail } from '../../src/payments/x402/rail.js';
import { Paywall } from '../../src/paywall/decide.js';
import { idempotencyKeyOf } from '../../src/paywall/idempotency-key.js';
import type { PricedCall } from '../../src/paywall/outcome.js';
import { X402Calls } from '../../src/paywall/x402-calls.js';
import { MemoryStore } from '../../src/store/memory.js';
import { TERMS } from '../payments/x402/fixtures.js';
import { startFakeFacilitator } from '../helpers/x402-facilitator.js';
import { paymentRequiredOf } from '../helpers/x402-gateway.js';
import { newPayer } from '../helpers/x402-payer.js';

type Json = Record<string, any>;
const HOUR = 3_600_000;

async function rig(t: Test) {
  const fake = await startFakeFacilitator();
  t.teardown(() => fake.close());
  const store = new MemoryStore();
  const logger = createLogger('info', new Writable({ write: (_chunk, _e, done) => done() }));
  const metrics = createMetrics(async () => 0);
  const provider = new DevProvider({ store, publicUrl: 'http://127.0.0.1:9/mcp' });
  const settler = new Settler({ store, provider, policy: { tolerance: 0.005, minimumFraction: 0.1 }, metrics, logger, clock: systemClock });
  const facilitator = new FacilitatorClient({ url: fake.url, logger });
  t.teardown(() => facilitator.close());
  const rail = new X402Rail({ terms: TERMS, facilitator, store, logger, metrics });
  const x402 = new X402Calls({
    rail,
    store,
    settings: { endpointUrl: 'http://127.0.0.1:9/mcp', x402Prices: { research: '0.01' }, perClient: { ratePerSecond: 100, burst: 100 }, argumentName: 'tollboothToken' },
    metrics,
    logger,
  });
  const paywall = new Paywall({
    settings: { argumentName: 'tollboothToken', hashSecret: 's', handleTtlMs: HOUR, chargeTtlMs: HOUR, callDeadlineMs: 20_000, perHandle: { ratePerSecond: 100, burst: 100 }, challengesPerClient: { ratePerSecond: 100, burst: 100 }, newChargesPerSecond: 1_000 },
    store,
    provider,
    settler,
    metrics,
    logger,
    now: Date.now,
    x402,
  });
  const price: PriceTag = { sku: 'research', cost: 1, amount: '5.00', currency: 'USDC', credits: 3, label: 'Research tools', charge: 'success' };
  let nextId = 0;
  const priced = (args: Json, meta?: JsonObject): PricedCall => {
    const params = { name: 'fetch_readable', arguments: args, ...(meta ? { _meta: meta } : {}) };
    const call: ToolCall = { request: { jsonrpc: '2.0', id: ++nextId, method: 'tools/call', params }, name: 'fetch_readable', args };
    return { call, price, principal: null, clientKey: 'ip:127.0.0.1', resultShape: async () => ({ era: 'legacy', structuredContentAllowed: true }), startedAt: Date.now(), idempotencyKey: idempotencyKeyOf(undefined, params) };
  };
  const payer = newPayer();
  /** A challenge, then a payment signed for it by the one payer, carrying the payment-identifier `id`. */
  async function payment(id: string): Promise<PaymentPayload> {
    const challenge = await paywall.authorise(priced({}));
    if (challenge.kind !== 'answer') throw new Error('expected a challenge');
    const signed = await payer.pay(paymentRequiredOf(challenge.result));
    return { ...signed, extensions: { 'payment-identifier': { info: { id } } } };
  }
  return { paywall, fake, priced, payment, metrics };
}

const ok = (id: number): JsonRpcResponse => ({ jsonrpc: '2.0', id, result: { content: [{ type: 'text', text: 'value' }] } });

t.test('a retry with the same payment-identifier gets the settled result again and its own payment is not settled', async (t) => {
  const { paywall, fake, priced, payment, metrics } = await rig(t);
  const id = 'pay_7d5d747be160e280504c099d984bcfe0';
  const first = priced({ url: 'u' }, { 'x402/payment': await payment(id) });
  const held = await paywall.authorise(first);
  t.equal(held.kind, 'x402');
  if (held.kind !== 'x402') return;
  const delivered = await paywall.conclude(first, held, { kind: 'answered', message: ok(first.call.request.id as number) }, null);
  t.equal(delivered.state, 'committed');
  t.ok((delivered.message?.result as Json)._meta['x402/payment-response'].success, 'settled');
  t.equal(fake.calls.settle, 1);

  const retry = await paywall.authorise(priced({ url: 'u' }, { 'x402/payment': await payment(id) }));
  t.equal(retry.kind === 'answer' && retry.outcome, 'replayed');
  t.equal(retry.kind === 'answer' && JSON.stringify(retry.result), JSON.stringify(delivered.message?.result), 'the same result, its settlement included');
  t.equal(fake.calls.verify, 2, 'the retry\'s payment was verified (the payer is proven, not just named)');
  t.equal(fake.calls.settle, 1, 'and not settled: the payer keeps it');
  t.equal((await metrics.registry.getSingleMetric('tollbooth_idempotent_replays_total')?.get())?.values[0]?.value, 1);

  const other = await paywall.authorise(priced({ url: 'other' }, { 'x402/payment': await payment(id) }));
  t.equal(other.kind === 'answer' && (other.result._meta as Json)['xyz.tollbooth/refusal'].reason, 'idempotency_conflict');
  t.equal(fake.calls.settle, 1);
});

t.test('a released x402 call keeps nothing: the retry with the same id runs and settles once', async (t) => {
  const { paywall, fake, priced, payment } = await rig(t);
  const id = 'pay_released_once_0123456789';
  const first = priced({ url: 'u' }, { 'x402/payment': await payment(id) });
  const held = await paywall.authorise(first);
  if (held.kind !== 'x402') return t.fail('not x402');
  await paywall.conclude(first, held, { kind: 'failed', accepted: false }, null);
  const retry = priced({ url: 'u' }, { 'x402/payment': await payment(id) });
  const again = await paywall.authorise(retry);
  t.equal(again.kind, 'x402', 'the retry runs');
  if (again.kind !== 'x402') return;
  await paywall.conclude(retry, again, { kind: 'answered', message: ok(retry.call.request.id as number) }, null);
  t.equal(fake.calls.settle, 1);
});
