// The §6.2 decision order, driven directly on the Paywall class against a real MemoryStore and the dev
// provider, with one injected clock: challenge / unknown handle / bound principal / rate limit before
// credits move / settle-on-retry / reasons after settlement / store and provider failures fail closed.
import { Writable } from 'node:stream';
import t from 'tap';
import { GatewayError } from '../../src/errors.js';
import type { ToolCall } from '../../src/mcp/classify.js';
import type { PriceTag } from '../../src/mcp/tools-list.js';
import { createLogger } from '../../src/observability/logger.js';
import { createMetrics } from '../../src/observability/metrics.js';
import { DevProvider } from '../../src/payments/dev.js';
import type { PaymentProvider } from '../../src/payments/provider.js';
import { ProviderError } from '../../src/payments/provider.js';
import { Settler } from '../../src/payments/settle.js';
import { CHALLENGE_META_KEY, REFUSAL_META_KEY } from '../../src/mcp/challenge.js';
import { Paywall } from '../../src/paywall/decide.js';
import type { Authorisation, PricedCall } from '../../src/paywall/outcome.js';
import { hashHandle } from '../../src/paywall/handles.js';
import { MemoryStore } from '../../src/store/memory.js';
import type { Store } from '../../src/store/store.js';
import { wallClock } from '../helpers/clock.js';

type Json = Record<string, any>;
const SECRET = 'decide-test-secret';
const HOUR = 3_600_000;

const price: PriceTag = { sku: 'research', cost: 1, amount: '5.00', currency: 'USDC', credits: 3, label: 'Research tools', charge: 'success' };

interface Rig {
  paywall: Paywall;
  store: MemoryStore;
  clock: { now: number };
  logs: string[];
  call(args?: Json, options?: { principal?: string | null; clientKey?: string; cost?: number; resultShape?: PricedCall['resultShape'] }): Promise<Authorisation>;
  payLink(checkoutUrl: string, received?: string): Promise<void>;
}

/** A store whose chosen methods throw the store-unavailable error, to prove the paywall fails closed. */
function failing(store: Store, methods: (keyof Store)[]): Store {
  return new Proxy(store, {
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver) as unknown;
      if (methods.includes(property as keyof Store)) {
        return async () => {
          throw new GatewayError('TB_ERR_STORE_UNAVAILABLE', 'the store is down (test)');
        };
      }
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

function rig(options: { perHandle?: { ratePerSecond: number; burst: number }; challengesPerClient?: { ratePerSecond: number; burst: number }; wrapStore?: (store: Store) => Store; wrapProvider?: (p: PaymentProvider) => PaymentProvider } = {}): Rig {
  const clock = { now: Date.UTC(2030, 0, 1) };
  const now = () => clock.now;
  const store = new MemoryStore({ now });
  const used = options.wrapStore ? options.wrapStore(store) : store;
  const dev = new DevProvider({ store, publicUrl: 'http://127.0.0.1:9/mcp', now });
  const provider = options.wrapProvider ? options.wrapProvider(dev) : dev;
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
      callDeadlineMs: 20_000,
      perHandle: options.perHandle ?? { ratePerSecond: 100, burst: 100 },
      challengesPerClient: options.challengesPerClient ?? { ratePerSecond: 100, burst: 100 },
      newChargesPerSecond: 10_000,
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
    clock,
    logs,
    call: (args = {}, o = {}) => {
      const request = { jsonrpc: '2.0' as const, id: ++id, method: 'tools/call', params: { name: 'fetch_readable', arguments: args } };
      const call: ToolCall = { request, name: 'fetch_readable', args };
      const priced: PricedCall = {
        call,
        price: { ...price, cost: o.cost ?? 1 },
        principal: o.principal ?? null,
        clientKey: o.clientKey ?? (o.principal ? `p:${o.principal}` : 'ip:127.0.0.1'),
        resultShape: o.resultShape ?? (async () => ({ era: 'legacy', structuredContentAllowed: false })),
        startedAt: clock.now,
      };
      return paywall.authorise(priced);
    },
    payLink: async (checkoutUrl, received = '5.00') => {
      const linkId = checkoutUrl.split('/').at(-1) as string;
      if (!(await store.payDevLink(linkId, received))) throw new Error('link not payable');
    },
  };
}

const challengeOf = (a: Authorisation): Json => {
  if (a.kind !== 'answer') throw new Error(`expected an answer, got ${a.kind}`);
  return (a.result._meta as Json)[CHALLENGE_META_KEY] as Json;
};
const refusalOf = (a: Authorisation): Json => {
  if (a.kind !== 'answer') throw new Error(`expected an answer, got ${a.kind}`);
  return (a.result._meta as Json)[REFUSAL_META_KEY] as Json;
};
const balance = async (r: Rig, handle: string): Promise<number> => (await r.store.getHandle(hashHandle(handle, SECRET)))?.balances.research ?? 0;

/** A handle funded with the 3-credit pack through the real path: challenge, pay, settle on retry. */
async function funded(r: Rig, principal: string | null = null): Promise<string> {
  const first = challengeOf(await r.call({}, { principal }));
  await r.payLink(first.checkoutUrl as string);
  const handle = first.retry.value as string;
  const spent = await r.call({ tollboothToken: handle }, { principal });
  if (spent.kind !== 'reserved') throw new Error('funding failed');
  await r.store.release(spent.handleHash, spent.reservationId);
  return handle;
}

t.test('step 2: no token → payment_required with a fresh handle and a link', async (t) => {
  const r = rig();
  const answer = await r.call({ url: 'x' });
  t.equal(answer.kind, 'answer');
  const c = challengeOf(answer);
  t.equal(c.reason, 'payment_required');
  t.match(c.retry.value, /^tb_s_[A-Za-z0-9_-]{22}$/);
  t.match(c.checkoutUrl, /^http:\/\/127\.0\.0\.1:9\/tollbooth\/checkout\//);
  t.ok(await r.store.getHandle(hashHandle(c.retry.value, SECRET)), 'the handle exists in the store, by its keyed hash');
  t.equal((answer as Extract<Authorisation, { kind: 'answer' }>).outcome, 'challenged');
});

t.test('step 2: a token that is not a string is treated as absent', async (t) => {
  const r = rig();
  for (const token of [42, null, ['tb_s_x'], { a: 1 }]) {
    const c = challengeOf(await r.call({ tollboothToken: token }));
    t.equal(c.reason, 'payment_required', JSON.stringify(token));
  }
});

t.test('step 2: the challenge throttle refuses rate_limited and mints nothing', async (t) => {
  const r = rig({ challengesPerClient: { ratePerSecond: 0.1, burst: 1 } });
  challengeOf(await r.call());
  const refused = await r.call();
  t.same(refusalOf(refused), { reason: 'rate_limited', retryAfterSeconds: 10 });
  t.equal((await r.store.listCharges()).length, 1, 'no second charge opened');
  t.same(refusalOf(await r.call({ tollboothToken: 'tb_s_unknownunknownunknown' })).reason, 'rate_limited', 'unknown handles are throttled too');
  t.equal(challengeOf(await r.call({}, { clientKey: 'ip:10.0.0.2' })).reason, 'payment_required', 'another client is not affected');
});

t.test('step 3: an unknown or malformed handle → unknown_handle with a different, new handle', async (t) => {
  const r = rig();
  for (const token of ['tb_s_AAAAAAAAAAAAAAAAAAAAAA', 'tb_s_bad', 'garbage', 'x'.repeat(10_000)]) {
    const c = challengeOf(await r.call({ tollboothToken: token }));
    t.equal(c.reason, 'unknown_handle');
    t.not(c.retry.value, token);
  }
});

t.test('step 3: an expired handle is unknown', async (t) => {
  const r = rig();
  const handle = challengeOf(await r.call()).retry.value as string;
  r.clock.now += 31 * 24 * HOUR;
  t.equal(challengeOf(await r.call({ tollboothToken: handle })).reason, 'unknown_handle');
});

t.test('step 4: a handle bound to another principal is refused, not disclosed, nothing minted', async (t) => {
  const r = rig();
  const handle = challengeOf(await r.call({}, { principal: 'alice' })).retry.value as string;
  const chargesBefore = (await r.store.listCharges()).length;
  const refused = await r.call({ tollboothToken: handle }, { principal: 'mallory' });
  t.same(refusalOf(refused), { reason: 'bound_to_other_principal' });
  const answer = refused.kind === 'answer' ? JSON.stringify(refused.result) : '';
  t.notMatch(answer, handle, 'the handle is not in the answer');
  t.notMatch(answer, /tb_s_/, 'no new handle either');
  t.equal((await r.store.listCharges()).length, chargesBefore, 'no charge opened');
  t.equal((await r.call({ tollboothToken: handle }, { principal: null })).kind, 'answer', 'a principal-less caller is refused as well');
  t.same(refusalOf(await r.call({ tollboothToken: handle }, { principal: null })), { reason: 'bound_to_other_principal' });
});

t.test('a refusal whose result shape fails is caught like any failure: payments_unavailable, logged, never a rejection', async (t) => {
  // Regression (found by @typescript-eslint/return-await): the step 4 and 5 refusals were returned without
  // `await` inside authorise's try, so a rejection from building them skipped the catch that logs and refuses.
  const r = rig();
  const handle = challengeOf(await r.call({}, { principal: 'alice' })).retry.value as string;
  let asked = 0;
  const flaky = async () => {
    if (++asked === 1) throw new GatewayError('TB_ERR_STORE_UNAVAILABLE', 'the catalog look-up failed (test)');
    return { era: 'legacy' as const, structuredContentAllowed: false };
  };
  const refused = await r.call({ tollboothToken: handle }, { principal: 'mallory', resultShape: flaky });
  t.same(refusalOf(refused), { reason: 'payments_unavailable' });
  t.ok(r.logs.some((line) => line.includes('"evt":"paywall_unavailable"')), 'the failure is logged');
});

t.test('step 4: the bound principal itself is served', async (t) => {
  const r = rig();
  const handle = await funded(r, 'alice');
  t.equal((await r.call({ tollboothToken: handle }, { principal: 'alice' })).kind, 'reserved');
});

t.test('step 5: rate_limited is decided before any credit moves', async (t) => {
  // The funding retry reserves twice (short, settle, reserve again) but takes one token: one is left.
  const r = rig({ perHandle: { ratePerSecond: 1, burst: 2 } });
  const handle = await funded(r);
  t.equal(await balance(r, handle), 3);
  const first = await r.call({ tollboothToken: handle });
  t.equal(first.kind, 'reserved');
  t.equal(await balance(r, handle), 2);
  const limited = await r.call({ tollboothToken: handle });
  t.same(refusalOf(limited), { reason: 'rate_limited', retryAfterSeconds: 1 });
  t.equal(await balance(r, handle), 2, 'no credit moved for the refused call');
  r.clock.now += 1_000;
  t.equal((await r.call({ tollboothToken: handle })).kind, 'reserved', 'the bucket refills with the clock');
});

t.test('step 5: an empty bucket refuses even when the balance is short (no challenge, no link)', async (t) => {
  const r = rig({ perHandle: { ratePerSecond: 1, burst: 1 } });
  const handle = challengeOf(await r.call()).retry.value as string;
  challengeOf(await r.call({ tollboothToken: handle }));
  t.equal(refusalOf(await r.call({ tollboothToken: handle })).reason, 'rate_limited');
});

t.test('step 6: an unpaid retry reuses the pending link on the same handle', async (t) => {
  const r = rig();
  const first = challengeOf(await r.call());
  const again = challengeOf(await r.call({ tollboothToken: first.retry.value }));
  t.equal(again.reason, 'payment_required');
  t.equal(again.retry.value, first.retry.value);
  t.equal(again.checkoutUrl, first.checkoutUrl);
  t.equal(again.expiresAt, first.expiresAt);
});

t.test('step 6: paying then retrying settles and reserves in the same call', async (t) => {
  const r = rig();
  const first = challengeOf(await r.call());
  await r.payLink(first.checkoutUrl);
  const paid = await r.call({ tollboothToken: first.retry.value, url: 'u' });
  t.equal(paid.kind, 'reserved');
  if (paid.kind === 'reserved') t.same(paid.forwardParams, { name: 'fetch_readable', arguments: { url: 'u' } }, 'token stripped, nothing else changed');
  t.equal(await balance(r, first.retry.value), 2);
});

t.test('step 6: the provider is asked at most once per 2 s per charge', async (t) => {
  let reads = 0;
  const r = rig({
    wrapProvider: (p) => ({ name: p.name, openCharge: (i) => p.openCharge(i), readCharge: (ref) => (reads++, p.readCharge(ref)) }),
  });
  const first = challengeOf(await r.call());
  for (let i = 0; i < 5; i++) await r.call({ tollboothToken: first.retry.value });
  t.equal(reads, 1, 'five quick retries, one provider read');
  r.clock.now += 2_000;
  await r.call({ tollboothToken: first.retry.value });
  t.equal(reads, 2);
});

t.test('step 6: after spending the pack the reason is credits_exhausted with a new link', async (t) => {
  const r = rig();
  const first = challengeOf(await r.call());
  await r.payLink(first.checkoutUrl);
  for (let i = 0; i < 3; i++) t.equal((await r.call({ tollboothToken: first.retry.value })).kind, 'reserved');
  const c = challengeOf(await r.call({ tollboothToken: first.retry.value }));
  t.equal(c.reason, 'credits_exhausted');
  t.equal(c.retry.value, first.retry.value);
  t.not(c.checkoutUrl, first.checkoutUrl);
});

t.test('step 6: a cost larger than the balance challenges without spending', async (t) => {
  const r = rig();
  const handle = await funded(r);
  const c = challengeOf(await r.call({ tollboothToken: handle }, { cost: 4 }));
  t.equal(c.reason, 'credits_exhausted');
  t.equal(await balance(r, handle), 3);
});

// Regression: when the retry itself discovered the underpayment (no webhook/dev callback first), the
// challenge said payment_required and re-showed the underpaid link.
t.test('§7.4: an underpaid charge makes the next challenge say underpaid with a new link', async (t) => {
  const r = rig();
  const first = challengeOf(await r.call());
  await r.payLink(first.checkoutUrl, '0.40');
  const c = challengeOf(await r.call({ tollboothToken: first.retry.value }));
  t.equal(c.reason, 'underpaid');
  t.not(c.checkoutUrl, first.checkoutUrl, 'the underpaid link is never shown again');
  t.equal(await balance(r, first.retry.value), 0);
  const charges = await r.store.listCharges('underpaid');
  t.equal(charges.length, 1, 'the underpaid charge stays listed for the operator');
});

t.test('§7.4: an expired link makes the next challenge payment_required with a new link', async (t) => {
  const r = rig();
  const first = challengeOf(await r.call());
  r.clock.now += HOUR + 1;
  const c = challengeOf(await r.call({ tollboothToken: first.retry.value }));
  t.equal(c.reason, 'payment_required');
  t.not(c.checkoutUrl, first.checkoutUrl);
  t.ok(Date.parse(c.expiresAt) > r.clock.now, 'the new link is valid');
});

t.test('store failure on reserve → payments_unavailable, nothing spent', async (t) => {
  let broken = false;
  const r = rig({ wrapStore: (s) => new Proxy(s, { get: (target, p) => (p === 'reserve' && broken ? failing(target, ['reserve']).reserve.bind(target) : (Reflect.get(target, p) as (...a: unknown[]) => unknown).bind(target)) }) });
  const handle = await funded(r);
  broken = true;
  const refused = await r.call({ tollboothToken: handle });
  t.same(refusalOf(refused), { reason: 'payments_unavailable' });
  t.match(JSON.stringify(refused), /no credit was spent/);
  t.equal(await balance(r, handle), 3);
  t.match(r.logs.join(''), /TB_ERR_STORE_UNAVAILABLE/);
});

t.test('store failure while minting a handle → payments_unavailable, no handle leaked', async (t) => {
  const r = rig({ wrapStore: (s) => failing(s, ['createHandle']) });
  const refused = await r.call();
  t.same(refusalOf(refused), { reason: 'payments_unavailable' });
  t.notMatch(JSON.stringify(refused), /tb_s_/);
});

t.test('store failure while opening a charge → payments_unavailable', async (t) => {
  const r = rig({ wrapStore: (s) => failing(s, ['beginCharge']) });
  t.same(refusalOf(await r.call()), { reason: 'payments_unavailable' });
});

t.test('provider failure while opening a charge → payments_unavailable, and the next challenge opens a link', async (t) => {
  let down = true;
  const r = rig({
    wrapProvider: (p) => ({
      name: p.name,
      openCharge: async (i) => {
        if (down) throw new ProviderError('server', 'provider 503 (test)');
        return p.openCharge(i);
      },
      readCharge: (ref) => p.readCharge(ref),
    }),
  });
  t.same(refusalOf(await r.call()), { reason: 'payments_unavailable' });
  down = false;
  t.equal(challengeOf(await r.call()).reason, 'payment_required');
});

t.test('provider failure while reading a pending charge → payments_unavailable, nothing spent', async (t) => {
  let down = false;
  const r = rig({
    wrapProvider: (p) => ({
      name: p.name,
      openCharge: (i) => p.openCharge(i),
      readCharge: async (ref) => {
        if (down) throw new ProviderError('network', 'provider unreachable (test)');
        return p.readCharge(ref);
      },
    }),
  });
  const first = challengeOf(await r.call());
  await r.payLink(first.checkoutUrl);
  down = true;
  t.same(refusalOf(await r.call({ tollboothToken: first.retry.value })), { reason: 'payments_unavailable' });
  down = false;
  r.clock.now += 2_000;
  t.equal((await r.call({ tollboothToken: first.retry.value })).kind, 'reserved', 'the payment is still found later');
});

t.test('facts for the call log: presented, fingerprint, recognised', async (t) => {
  const r = rig();
  const none = await r.call();
  t.same(none.facts, { rail: 'credits', tokenPresented: false, tokenFingerprint: null, tokenRecognised: false });
  const handle = challengeOf(none).retry.value as string;
  const known = await r.call({ tollboothToken: handle });
  t.same(known.facts, { rail: 'credits', tokenPresented: true, tokenFingerprint: `${handle.slice(0, 9)}..${handle.slice(-4)}`, tokenRecognised: true });
  const unknown = await r.call({ tollboothToken: 'tb_s_AAAAAAAAAAAAAAAAAAAAAA' });
  t.same(unknown.facts, { rail: 'credits', tokenPresented: true, tokenFingerprint: 'tb_s_AAAA..AAAA', tokenRecognised: false });
});
