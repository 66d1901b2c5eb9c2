// Idempotent retries (SPEC §24) driven on the Paywall class against a real MemoryStore and the dev
// provider: a committed result is kept and replayed byte for byte without a second charge; a retry
// waits for a first call still running; another scope conflicts; a released call keeps nothing; a
// result too large is not kept; a store failure fails closed; the _meta key never reaches the upstream.
import { Writable } from 'node:stream';
import t from 'tap';
import { GatewayError } from '../../src/errors.js';
import { CHALLENGE_META_KEY, REFUSAL_META_KEY } from '../../src/mcp/challenge.js';
import type { ToolCall } from '../../src/mcp/classify.js';
import type { JsonRpcResponse } from '../../src/mcp/jsonrpc.js';
import type { PriceTag } from '../../src/mcp/tools-list.js';
import { createLogger } from '../../src/observability/logger.js';
import { createMetrics, type Metrics } from '../../src/observability/metrics.js';
import { DevProvider } from '../../src/payments/dev.js';
import { Settler } from '../../src/payments/settle.js';
import { Paywall } from '../../src/paywall/decide.js';
import { hashHandle } from '../../src/paywall/handles.js';
import { IDEMPOTENCY_META_KEY } from '../../src/paywall/idempotency-key.js';
import type { Authorisation, CallOutcome, PricedCall } from '../../src/paywall/outcome.js';
import { MemoryStore } from '../../src/store/memory.js';
import type { Store } from '../../src/store/store.js';
import { wallClock } from '../helpers/clock.js';

type Json = Record<string, any>;
const SECRET = 'idempotency-test-secret';
const HOUR = 3_600_000;
const price: PriceTag = { sku: 'research', cost: 1, amount: '5.00', currency: 'USDC', credits: 3, label: 'Research tools', charge: 'success' };

interface Call {
  priced: PricedCall;
  authorisation: Authorisation;
}

interface Rig {
  paywall: Paywall;
  store: MemoryStore;
  metrics: Metrics;
  logs: string[];
  call(args: Json, options?: { key?: string | null; principal?: string | null }): Promise<Call>;
  answer(call: Call, result: Json, kind?: 'answered' | 'failed'): Promise<JsonRpcResponse | null>;
}

function rig(options: { maxResultBytes?: number; callDeadlineMs?: number; wrapStore?: (store: Store) => Store } = {}): Rig {
  const now = Date.now;
  const store = new MemoryStore({ now });
  const used = options.wrapStore ? options.wrapStore(store) : store;
  const provider = new DevProvider({ store, publicUrl: 'http://127.0.0.1:9/mcp', now });
  const logs: string[] = [];
  const logger = createLogger('info', new Writable({ write: (chunk: Buffer, _e, done) => (logs.push(chunk.toString()), done()) }));
  const metrics = createMetrics(() => store.countPendingCharges());
  const settler = new Settler({ store: used, provider, policy: { tolerance: 0.005, minimumFraction: 0.1 }, metrics, logger, clock: wallClock(now) });
  const paywall = new Paywall({
    settings: {
      argumentName: 'tollboothToken',
      hashSecret: SECRET,
      handleTtlMs: 30 * 24 * HOUR,
      chargeTtlMs: HOUR,
      callDeadlineMs: options.callDeadlineMs ?? 20_000,
      perHandle: { ratePerSecond: 100, burst: 100 },
      challengesPerClient: { ratePerSecond: 100, burst: 100 },
      newChargesPerSecond: 10_000,
      idempotency: { ttlMs: HOUR, maxResultBytes: options.maxResultBytes ?? 1024 ** 2 },
    },
    store: used,
    provider,
    settler,
    metrics,
    logger,
    now,
  });
  let id = 0;
  return {
    paywall,
    store,
    metrics,
    logs,
    call: async (args, o = {}) => {
      const key = o.key === undefined ? 'key-1' : o.key;
      const meta = key === null ? {} : { _meta: { [IDEMPOTENCY_META_KEY]: key, other: 'kept' } };
      const request = { jsonrpc: '2.0' as const, id: ++id, method: 'tools/call', params: { name: 'fetch_readable', arguments: args, ...meta } };
      const call: ToolCall = { request, name: 'fetch_readable', args };
      const priced: PricedCall = {
        call,
        price,
        principal: o.principal ?? null,
        clientKey: 'ip:127.0.0.1',
        resultShape: async () => ({ era: 'legacy', structuredContentAllowed: false }),
        startedAt: now(),
        idempotencyKey: key,
      };
      return { priced, authorisation: await paywall.authorise(priced) };
    },
    answer: async ({ priced, authorisation }, result, kind = 'answered') => {
      if (authorisation.kind === 'answer') throw new Error('not forwarded');
      const outcome: CallOutcome = kind === 'answered' ? { kind, message: { jsonrpc: '2.0', id: priced.call.request.id ?? null, result } } : { kind: 'failed', accepted: false };
      return (await paywall.conclude(priced, authorisation, outcome, null)).message;
    },
  };
}

/** A handle holding 3 credits, funded through the real path: challenge, pay the dev link, settle on a retry. */
async function funded(r: Rig): Promise<string> {
  const first = await r.call({}, { key: null });
  if (first.authorisation.kind !== 'answer') throw new Error('expected a challenge');
  const challenge = (first.authorisation.result._meta as Json)[CHALLENGE_META_KEY] as Json;
  if (!(await r.store.payDevLink((challenge.checkoutUrl as string).split('/').at(-1) as string, '5.00'))) throw new Error('link not payable');
  const handle = challenge.retry.value as string;
  const spent = await r.call({ tollboothToken: handle }, { key: null });
  if (spent.authorisation.kind !== 'reserved') throw new Error('funding failed');
  await r.store.release(spent.authorisation.handleHash, spent.authorisation.reservationId);
  return handle;
}

const balance = async (r: Rig, handle: string): Promise<number> => (await r.store.getHandle(hashHandle(handle, SECRET)))?.balances.research ?? 0;
const refusalOf = (a: Authorisation): Json => (a.kind === 'answer' ? ((a.result._meta as Json)[REFUSAL_META_KEY] as Json) : { kind: a.kind });
const counter = async (m: Metrics, name: string): Promise<number> => ((await m.registry.getSingleMetric(name)?.get())?.values ?? []).reduce((sum, v) => sum + v.value, 0);
const RESULT = { content: [{ type: 'text', text: 'r\u00e9sum\u00e9 \u2014 "quoted" \u{1F600}' }], structuredContent: { b: 2, a: [1, 2.5, null] } };

t.test('a committed result is replayed byte for byte, with its receipt, without a second charge', async (t) => {
  const r = rig();
  const handle = await funded(r);
  const first = await r.call({ url: 'https://a.example', tollboothToken: handle });
  t.equal(first.authorisation.kind, 'reserved');
  const delivered = await r.answer(first, RESULT);
  t.equal(await balance(r, handle), 2, 'the first call is charged');
  const retry = await r.call({ url: 'https://a.example', tollboothToken: handle });
  t.equal(retry.authorisation.kind, 'answer');
  if (retry.authorisation.kind !== 'answer') return;
  t.equal(retry.authorisation.outcome, 'replayed');
  t.equal(JSON.stringify(retry.authorisation.result), JSON.stringify(delivered?.result), 'the same bytes as the delivered result');
  t.match((retry.authorisation.result._meta as Json)['xyz.tollbooth/receipt'], { sku: 'research', cost: 1, remaining: 2 }, 'the same receipt');
  t.equal(await balance(r, handle), 2, 'the retry is not charged');
  t.equal(await counter(r.metrics, 'tollbooth_idempotent_replays_total'), 1);
});

t.test('the key is stripped from what is forwarded; other _meta stays', async (t) => {
  const r = rig();
  const handle = await funded(r);
  const first = await r.call({ tollboothToken: handle });
  if (first.authorisation.kind !== 'reserved') return t.fail('not reserved');
  t.same(first.authorisation.forwardParams, { name: 'fetch_readable', arguments: {}, _meta: { other: 'kept' } });
});

t.test('a retry while the first call runs waits for it and gets its result', async (t) => {
  const r = rig();
  const handle = await funded(r);
  const first = await r.call({ tollboothToken: handle });
  const waiting = r.call({ tollboothToken: handle });
  await new Promise((resolve) => setTimeout(resolve, 120));
  const delivered = await r.answer(first, RESULT);
  const retry = await waiting;
  t.equal(retry.authorisation.kind === 'answer' && JSON.stringify(retry.authorisation.result), JSON.stringify(delivered?.result));
  t.equal(await balance(r, handle), 2, 'one charge');
});

t.test('the same key with other arguments, or another tool, is refused idempotency_conflict and charges nothing', async (t) => {
  const r = rig();
  const handle = await funded(r);
  await r.answer(await r.call({ url: 'https://a.example', tollboothToken: handle }), RESULT);
  const other = await r.call({ url: 'https://b.example', tollboothToken: handle });
  t.same(refusalOf(other.authorisation), { reason: 'idempotency_conflict' });
  t.equal(other.authorisation.kind === 'answer' && other.authorisation.outcome, 'refused_conflict');
  t.equal(await balance(r, handle), 2, 'only the first call was charged');
  t.equal(await counter(r.metrics, 'tollbooth_idempotent_replays_total'), 0);
});

t.test('the same key of another payer is another slot', async (t) => {
  const r = rig();
  const alice = await funded(r);
  const bob = await funded(r);
  await r.answer(await r.call({ url: 'x', tollboothToken: alice }), RESULT);
  const theirs = await r.call({ url: 'y', tollboothToken: bob });
  t.equal(theirs.authorisation.kind, 'reserved', 'bob runs his own call: no conflict, no replay of alice\'s result');
});

t.test('a principal is the payer: its key replays across handles', async (t) => {
  const r = rig();
  const handle = await funded(r);
  const first = await r.call({ url: 'x', tollboothToken: handle }, { principal: 'sub:alice' });
  const delivered = await r.answer(first, RESULT);
  const retry = await r.call({ url: 'x' }, { principal: 'sub:alice' });
  t.equal(retry.authorisation.kind === 'answer' && JSON.stringify(retry.authorisation.result), JSON.stringify(delivered?.result), 'the retry without the token gets the result');
});

t.test('a released call keeps nothing: its retry runs anew and is charged once', async (t) => {
  const r = rig();
  const handle = await funded(r);
  const failed = await r.call({ tollboothToken: handle });
  await r.answer(failed, {}, 'failed');
  t.equal(await balance(r, handle), 3, 'released');
  const isError = await r.call({ tollboothToken: handle });
  t.equal(isError.authorisation.kind, 'reserved', 'the retry runs');
  await r.answer(isError, { content: [], isError: true });
  const retry = await r.call({ tollboothToken: handle });
  t.equal(retry.authorisation.kind, 'reserved', 'an isError result is released too: the next retry runs');
  await r.answer(retry, RESULT);
  t.equal(await balance(r, handle), 2, 'charged once');
});

t.test('a challenge keeps nothing: the call after payment runs', async (t) => {
  const r = rig();
  const challenged = await r.call({ url: 'x', tollboothToken: 'tb_s_AAAAAAAAAAAAAAAAAAAAAA' });
  t.equal(challenged.authorisation.kind, 'answer');
  const again = await r.call({ url: 'x', tollboothToken: 'tb_s_AAAAAAAAAAAAAAAAAAAAAA' });
  t.equal(again.authorisation.kind === 'answer' && again.authorisation.outcome, 'challenged', 'challenged again, not answered from the slot');
});

t.test('a result over maxResultBytes is not kept: counted, logged, and its retry runs', async (t) => {
  const r = rig({ maxResultBytes: 64 });
  const handle = await funded(r);
  await r.answer(await r.call({ tollboothToken: handle }), { content: [{ type: 'text', text: 'x'.repeat(100) }] });
  t.equal(await counter(r.metrics, 'tollbooth_idempotent_results_not_kept_total'), 1);
  t.ok(r.logs.some((line) => line.includes('"evt":"idempotent_result_not_kept"') && line.includes('"reason":"too_large"')));
  t.notOk(r.logs.some((line) => line.includes('key-1')), 'the key is not logged');
  const retry = await r.call({ tollboothToken: handle });
  t.equal(retry.authorisation.kind, 'reserved');
});

t.test('a retry gives up waiting after callDeadline: refused, nothing charged', async (t) => {
  const r = rig({ callDeadlineMs: 300 });
  const handle = await funded(r);
  await r.call({ tollboothToken: handle }); // never concluded
  const started = Date.now();
  const retry = await r.call({ tollboothToken: handle });
  t.same(refusalOf(retry.authorisation), { reason: 'deadline_exceeded' });
  t.ok(Date.now() - started >= 150 && Date.now() - started < 2_000, `waited ${Date.now() - started} ms`);
  t.equal(await balance(r, handle), 2, 'only the first call holds a credit');
});

t.test('a store failure on the slot fails closed: payments_unavailable, nothing reserved', async (t) => {
  const r = rig({
    wrapStore: (store) =>
      new Proxy(store, {
        get(target, property, receiver) {
          if (property === 'beginIdempotent') return async () => Promise.reject(new GatewayError('TB_ERR_STORE_UNAVAILABLE', 'down (test)'));
          const value = Reflect.get(target, property, receiver) as unknown;
          return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
        },
      }),
  });
  const handle = await funded(r);
  const call = await r.call({ tollboothToken: handle });
  t.same(refusalOf(call.authorisation), { reason: 'payments_unavailable' });
  t.equal(await balance(r, handle), 3);
});

t.test('a call without a key is not looked up', async (t) => {
  const r = rig();
  const handle = await funded(r);
  await r.answer(await r.call({ tollboothToken: handle }, { key: null }), RESULT);
  const again = await r.call({ tollboothToken: handle }, { key: null });
  t.equal(again.authorisation.kind, 'reserved');
});

t.test('one failed look at the slot is asked again: a store blip does not refuse the call', async (t) => {
  let failures = 1;
  const r = rig({
    wrapStore: (store) =>
      new Proxy(store, {
        get(target, property, receiver) {
          const value = Reflect.get(target, property, receiver) as unknown;
          if (property === 'beginIdempotent' && failures > 0) {
            return async () => {
              failures -= 1;
              throw new GatewayError('TB_ERR_STORE_UNAVAILABLE', 'a blip (test)');
            };
          }
          return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
        },
      }),
  });
  const handle = await funded(r);
  const call = await r.call({ tollboothToken: handle });
  t.equal(call.authorisation.kind, 'reserved');
  t.equal(failures, 0, 'the blip happened');
});
