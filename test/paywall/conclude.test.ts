// §6.2 step 7 and §6.5 on the Paywall class: commit or release by the charge policy, no successful
// result without a committed credit (a failed or pre-empted commit withholds it), and the conclusion of
// a registered call wherever its result turns up (the owner's POST, or a resumed stream), exactly once.
import { Writable } from 'node:stream';
import t from 'tap';
import { GatewayError } from '../../src/errors.js';
import type { ToolCall } from '../../src/mcp/classify.js';
import type { JsonRpcResponse } from '../../src/mcp/jsonrpc.js';
import type { PriceTag } from '../../src/mcp/tools-list.js';
import { createLogger } from '../../src/observability/logger.js';
import { createMetrics } from '../../src/observability/metrics.js';
import { DevProvider } from '../../src/payments/dev.js';
import { Settler } from '../../src/payments/settle.js';
import { RECEIPT_META_KEY, REFUSAL_META_KEY } from '../../src/mcp/challenge.js';
import { Paywall } from '../../src/paywall/decide.js';
import type { Authorisation, PricedCall } from '../../src/paywall/outcome.js';
import { hashHandle, mintHandle } from '../../src/paywall/handles.js';
import { MemoryStore } from '../../src/store/memory.js';
import type { PricedRequestKey, Store } from '../../src/store/store.js';
import { wallClock } from '../helpers/clock.js';

type Json = Record<string, any>;
const SECRET = 'conclude-test-secret';
const HOUR = 3_600_000;
const DEADLINE = 20_000;

function rig(options: { charge?: 'success' | 'attempt'; wrapStore?: (store: Store) => Store } = {}) {
  const clock = { now: Date.UTC(2030, 0, 1) };
  const now = () => clock.now;
  const store = new MemoryStore({ now });
  const used = options.wrapStore ? options.wrapStore(store) : store;
  const logs: string[] = [];
  const logger = createLogger('info', new Writable({ write: (chunk: Buffer, _e, done) => (logs.push(chunk.toString()), done()) }));
  const metrics = createMetrics(() => store.countPendingCharges());
  const provider = new DevProvider({ store, publicUrl: 'http://127.0.0.1:9/mcp', now });
  const settler = new Settler({ store: used, provider, policy: { tolerance: 0.005, minimumFraction: 0.1 }, metrics, logger, clock: wallClock(now) });
  const paywall = new Paywall({
    settings: { argumentName: 'tollboothToken', hashSecret: SECRET, handleTtlMs: 30 * 24 * HOUR, chargeTtlMs: HOUR, callDeadlineMs: DEADLINE, perHandle: { ratePerSecond: 100, burst: 100 }, challengesPerClient: { ratePerSecond: 100, burst: 100 }, newChargesPerSecond: 10_000 },
    store: used,
    provider,
    settler,
    metrics,
    logger,
    now,
  });
  const price: PriceTag = { sku: 'research', cost: 1, amount: '5.00', currency: 'USDC', credits: 3, label: 'Research tools', charge: options.charge ?? 'success' };
  let nextId = 0;
  /** A funded handle (3 credits) and one authorised call holding a reservation. */
  async function reserved(): Promise<{ priced: PricedCall; held: Extract<Authorisation, { kind: 'reserved' }>; handleHash: string }> {
    const handle = mintHandle();
    const handleHash = hashHandle(handle, SECRET);
    await store.createHandle({ handleHash, fingerprint: 'tb_s_xxxx..yyyy', principal: null, ttlMs: HOUR });
    await store.grantCredits(handleHash, 'research', 3);
    const args = { tollboothToken: handle };
    const call: ToolCall = { request: { jsonrpc: '2.0', id: ++nextId, method: 'tools/call', params: { name: 'fetch_readable', arguments: args } }, name: 'fetch_readable', args };
    const priced: PricedCall = { call, price, principal: null, clientKey: 'ip:127.0.0.1', resultShape: async () => ({ era: 'legacy', structuredContentAllowed: false }), startedAt: clock.now };
    const held = await paywall.authorise(priced);
    if (held.kind !== 'reserved') throw new Error('not reserved');
    return { priced, held, handleHash };
  }
  const balance = async (handleHash: string) => (await store.getHandle(handleHash))?.balances.research ?? 0;
  /** Registers the call as the proxy does for a request in an upstream session. */
  async function register(priced: PricedCall, held: Extract<Authorisation, { kind: 'reserved' }>): Promise<PricedRequestKey> {
    const key = { session: 'session-hash', requestId: JSON.stringify(priced.call.request.id) };
    await store.registerPricedRequest(key, { state: 'in_flight', handleHash: held.handleHash, reservationId: held.reservationId, tool: 'fetch_readable', sku: 'research', cost: 1, charge: price.charge, deadline: clock.now + DEADLINE, remaining: null, fingerprint: null, startedAt: clock.now }, HOUR);
    return key;
  }
  return { paywall, store, clock, logs, reserved, balance, register };
}

const result = (id: number, isError = false): JsonRpcResponse => ({ jsonrpc: '2.0', id, result: { content: [{ type: 'text', text: 'value' }], ...(isError ? { isError: true } : {}) } });
const meta = (message: JsonRpcResponse | null, key: string): Json | undefined => ((message?.result as Json | undefined)?._meta as Json | undefined)?.[key];
const text = (message: JsonRpcResponse | null): string => ((message?.result as Json).content as Json[])[0]!.text as string;

t.test('charge success: a result commits and gains its receipt; isError and JSON-RPC errors release and pass', async (t) => {
  const r = rig();
  const a = await r.reserved();
  const ok = await r.paywall.conclude(a.priced, a.held, { kind: 'answered', message: result(1) }, null);
  t.equal(ok.state, 'committed');
  t.same(meta(ok.message, RECEIPT_META_KEY), { sku: 'research', cost: 1, remaining: 2 });
  const b = await r.reserved();
  const failed = await r.paywall.conclude(b.priced, b.held, { kind: 'answered', message: result(2, true) }, null);
  t.equal(failed.state, 'released');
  t.same(failed.message, result(2, true), "the upstream's isError result as it came");
  t.equal(await r.balance(b.handleHash), 3);
});

t.test('charge attempt: kept once the upstream answered HTTP 2xx; a 4xx, 5xx, refused or reset connection releases and says so', async (t) => {
  const r = rig({ charge: 'attempt' });
  for (const [outcome, kept] of [
    [{ kind: 'http_refusal', status: 404 }, false],
    [{ kind: 'failed', accepted: false }, false],
    [{ kind: 'deadline', accepted: false }, false],
    [{ kind: 'failed', accepted: true }, true],
    [{ kind: 'deadline', accepted: true }, true],
    [{ kind: 'answered', message: result(9, true) }, true],
  ] as const) {
    const c = await r.reserved();
    const conclusion = await r.paywall.conclude(c.priced, c.held, outcome, null);
    t.equal(await r.balance(c.handleHash), kept ? 2 : 3, `${JSON.stringify(outcome)} → ${kept ? 'kept' : 'released'}`);
    if (outcome.kind === 'failed') t.match(text(conclusion.message), kept ? /the credit was spent/ : /no credit was spent/);
    if (outcome.kind === 'http_refusal') t.equal(conclusion.message, null, 'the 4xx is relayed as it came');
  }
});

t.test('a commit that fails (the store is down) withholds the result: payments_unavailable, the reservation left to the reconciler', async (t) => {
  const r = rig({ wrapStore: (store) => new Proxy(store, { get: (target, key) => (key === 'commit' ? async () => { throw new GatewayError('TB_ERR_STORE_UNAVAILABLE', 'down'); } : (Reflect.get(target, key) as (...a: unknown[]) => unknown).bind(target)) }) });
  const c = await r.reserved();
  const conclusion = await r.paywall.conclude(c.priced, c.held, { kind: 'answered', message: result(1) }, null);
  t.equal(conclusion.state, 'unknown');
  t.same(meta(conclusion.message, REFUSAL_META_KEY), { reason: 'payments_unavailable' });
  t.notMatch(JSON.stringify(conclusion.message), /"value"/, 'the result is not in the answer');
  t.equal(await r.balance(c.handleHash), 2, 'still reserved: the reconciler releases it after the deadline');
});

t.test('a commit that ran but whose reply was lost: the spend, the call line and the paywall_unavailable line carry the same ref (issue 33)', async (t) => {
  // The script ran in the store, then the connection dropped before its reply: the gateway sees a failure.
  const lostReply = (store: Store): Store =>
    new Proxy(store, {
      get: (target, key) =>
        key === 'commit'
          ? async (...args: Parameters<Store['commit']>) => {
              await target.commit(...args);
              throw new GatewayError('TB_ERR_STORE_UNAVAILABLE', 'the reply was lost');
            }
          : (Reflect.get(target, key) as (...a: unknown[]) => unknown).bind(target),
    });
  const r = rig({ wrapStore: lostReply });
  const c = await r.reserved();
  const conclusion = await r.paywall.conclude(c.priced, c.held, { kind: 'answered', message: result(1) }, null);
  t.same(meta(conclusion.message, REFUSAL_META_KEY), { reason: 'payments_unavailable' }, 'the caller is refused');
  const [, spend] = await r.store.ledgerTail(c.handleHash, 10);
  t.match(spend, { kind: 'spend', ref: c.held.reservationId }, 'the spend names the reservation');
  const lines = r.logs.map((line) => JSON.parse(line) as Json);
  t.match(lines.filter((line) => line.evt === 'paywall_unavailable' && line.ref === c.held.reservationId), [{ op: 'commit', code: 'TB_ERR_STORE_UNAVAILABLE' }], 'the failure is logged with the ref');
  t.match(lines.filter((line) => line.evt === 'call' && line.ref === c.held.reservationId), [{ outcome: 'authorised', cost: 0 }], 'the call line carries it, charged nothing as far as the gateway knows');
});

t.test('a result whose reservation was already released (the reconciler, after the deadline) is withheld', async (t) => {
  const r = rig();
  const c = await r.reserved();
  await r.store.release(c.held.handleHash, c.held.reservationId);
  const conclusion = await r.paywall.conclude(c.priced, c.held, { kind: 'answered', message: result(1) }, null);
  t.equal(conclusion.state, 'released');
  t.same(meta(conclusion.message, REFUSAL_META_KEY), { reason: 'deadline_exceeded' });
  t.equal(await r.balance(c.handleHash), 3);
});

t.test('a registered call: the conclusion is recorded (committed with the balance left, or released)', async (t) => {
  const r = rig();
  const a = await r.reserved();
  const keyA = await r.register(a.priced, a.held);
  await r.paywall.conclude(a.priced, a.held, { kind: 'answered', message: result(1) }, keyA);
  const b = await r.reserved();
  const keyB = await r.register(b.priced, b.held);
  await r.paywall.conclude(b.priced, b.held, { kind: 'deadline', accepted: true }, keyB);
  await new Promise((resolve) => setImmediate(resolve));
  t.match(await r.store.getPricedRequest(keyA), { state: 'committed', remaining: 2 });
  t.match(await r.store.getPricedRequest(keyB), { state: 'released', remaining: null });
});

t.test('a resumed stream: committed → the result with its receipt; released → dropped', async (t) => {
  const r = rig();
  const a = await r.reserved();
  const key = await r.register(a.priced, a.held);
  await r.paywall.conclude(a.priced, a.held, { kind: 'answered', message: result(1) }, key);
  await new Promise((resolve) => setImmediate(resolve));
  const replayed = await r.paywall.concludeResumed(key, (await r.store.getPricedRequest(key))!, result(1));
  t.same(meta(replayed, RECEIPT_META_KEY), { sku: 'research', cost: 1, remaining: 2 });
  const b = await r.reserved();
  const keyB = await r.register(b.priced, b.held);
  await r.paywall.conclude(b.priced, b.held, { kind: 'deadline', accepted: true }, keyB);
  await new Promise((resolve) => setImmediate(resolve));
  t.equal(await r.paywall.concludeResumed(keyB, (await r.store.getPricedRequest(keyB))!, result(2)), null, "a released call's late result is dropped");
  t.equal(await r.balance(b.handleHash), 3);
});

t.test('a resumed stream concludes an in-flight call on what it says: a result within the deadline commits, past it releases and drops, an error releases and passes', async (t) => {
  const r = rig();
  const a = await r.reserved();
  const keyA = await r.register(a.priced, a.held);
  const passed = await r.paywall.concludeResumed(keyA, (await r.store.getPricedRequest(keyA))!, result(1));
  t.same(meta(passed, RECEIPT_META_KEY), { sku: 'research', cost: 1, remaining: 2 });
  t.equal(await r.balance(a.handleHash), 2);

  const b = await r.reserved();
  const keyB = await r.register(b.priced, b.held);
  r.clock.now += DEADLINE + 1;
  t.equal(await r.paywall.concludeResumed(keyB, (await r.store.getPricedRequest(keyB))!, result(2)), null);
  t.equal(await r.balance(b.handleHash), 3);

  const c = await r.reserved();
  const keyC = await r.register(c.priced, c.held);
  t.same(await r.paywall.concludeResumed(keyC, (await r.store.getPricedRequest(keyC))!, result(3, true)), result(3, true));
  t.equal(await r.balance(c.handleHash), 3);
  t.ok(r.logs.some((line) => line.includes('"resumed":true')), 'the call log line comes from where it was concluded');
});

t.test('the owner and a resumed stream concluding the same call at once: one commit, both deliver the paid result', async (t) => {
  const r = rig();
  const c = await r.reserved();
  const key = await r.register(c.priced, c.held);
  const record = (await r.store.getPricedRequest(key))!;
  const [owner, resumed] = await Promise.all([r.paywall.conclude(c.priced, c.held, { kind: 'answered', message: result(1) }, key), r.paywall.concludeResumed(key, record, result(1))]);
  t.equal(await r.balance(c.handleHash), 2, 'exactly one credit spent');
  t.equal(owner.state, 'committed');
  t.ok(meta(owner.message, RECEIPT_META_KEY), 'the owner delivers with a receipt');
  t.ok(meta(resumed, RECEIPT_META_KEY), 'the resumed stream delivers with a receipt');
  t.equal(r.logs.filter((line) => line.includes('"evt":"call"') && line.includes('"outcome":"authorised"')).length, 1, 'one call log line for the conclusion');
});
