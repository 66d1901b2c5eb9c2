// The behavioural suite every Store must pass (SPEC §8): memory.test.ts and the Redis tests run it
// unchanged. Handle and charge times come from the injected clock or from `now` arguments, so the
// suite moves a manual clock for them. Token buckets and leases may run on the store's own clock
// (Redis TIME): tests that need them to refill or expire move the manual clock and, unless the
// store says its clock is controllable, also wait that long for real (short waits only).
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Test } from 'tap';
import { HANDLE_TTL_FLOOR_MS, RETENTION_MS } from '../../src/store/policy.js';
import type { BeginChargeResult, ChargeRecord, OpenChargeRequest, PricedRequestRecord, PaymentNonceClaim, SpendDecision, SpendRequest, Store } from '../../src/store/store.js';
import { ledgerBehaviours } from './ledger-conformance.js';
import { quotaBehaviours } from './quota-conformance.js';

/** Returns a new, empty store on the given clock (Redis: a flushed database or a fresh key prefix): the global views (dueCharges, listCharges, countPendingCharges) must see only this test's data. */
export type MakeStore = (opts: { now: () => number }) => Promise<Store>;

export interface ConformanceOptions {
  /** True when the store's buckets and leases read the injected clock (memory), so no real waits are needed. */
  controllableClock?: boolean;
}

const HOUR = 3_600_000;
const SKU = 'research';
const OTHER_SKU = 'archive';
const GENEROUS = { ratePerSecond: 10_000, burst: 10_000 };
const SNAPSHOT = { label: 'Research pack', amount: '5.00', currency: 'USD', credits: 10, tool: 'fetch_readable' };
const CHARGE_TTL = 30 * 60_000;

const randomId = (prefix: string): string => `${prefix}${randomBytes(12).toString('base64url')}`;

export class ManualClock {
  at = Date.now();
  readonly now = (): number => this.at;
  advance(ms: number): void {
    this.at += ms;
  }
}

/** One store plus the helpers the tests share. Handle hashes and nonces are random, never reused. */
export class StoreFixture {
  constructor(
    readonly store: Store,
    readonly clock: ManualClock,
    private readonly controllableClock: boolean,
  ) {}

  async handle(options: { principal?: string | null; credits?: number; fingerprint?: string; ttlMs?: number; sku?: string } = {}): Promise<string> {
    const handleHash = randomId('h_');
    await this.store.createHandle({
      handleHash,
      fingerprint: options.fingerprint ?? randomId('tb_s_').slice(0, 9) + '..' + randomId('').slice(0, 4),
      principal: options.principal ?? null,
      ttlMs: options.ttlMs ?? HOUR,
    });
    if (options.credits) await this.store.grantCredits(handleHash, options.sku ?? SKU, options.credits);
    return handleHash;
  }

  spendRequest(handleHash: string, overrides: Partial<SpendRequest> = {}): SpendRequest {
    return {
      handleHash,
      principal: null,
      sku: SKU,
      cost: 1,
      reservationId: randomId('r_'),
      reservationDeadline: this.clock.now() + 65_000,
      ttlMs: HOUR,
      bucket: GENEROUS,
      ...overrides,
    };
  }

  spend(handleHash: string, overrides: Partial<SpendRequest> = {}): Promise<SpendDecision> {
    return this.store.reserve(this.spendRequest(handleHash, overrides));
  }

  begin(handleHash: string, overrides: Partial<OpenChargeRequest> = {}): Promise<BeginChargeResult> {
    return this.store.beginCharge({
      handleHash,
      sku: SKU,
      nonce: randomId('n_'),
      snapshot: SNAPSHOT,
      now: this.clock.now(),
      ttlMs: CHARGE_TTL,
      firstPollDelayMs: 3_000,
      ...overrides,
    });
  }

  /** A charge with its link attached: what a challenge shows. */
  async pendingCharge(handleHash: string, overrides: Partial<OpenChargeRequest> = {}): Promise<ChargeRecord> {
    const begun = await this.begin(handleHash, overrides);
    if (begun.kind !== 'begun') throw new Error(`expected a new charge, got ${begun.kind}`);
    const ref = randomId('ref_');
    const charge = await this.store.attachLink(handleHash, begun.charge.nonce, { providerRef: ref, checkoutUrl: `https://pay.test/${ref}` });
    if (!charge) throw new Error('attachLink returned null');
    return charge;
  }

  async settle(handleHash: string, charge: ChargeRecord, credits: number, outcome: 'settled' | 'underpaid' = 'settled') {
    return this.store.claimSettlement({ handleHash, nonce: charge.nonce, outcome, credits, receivedAmount: charge.amount });
  }

  async balance(handleHash: string, sku = SKU): Promise<number | null> {
    const state = await this.store.getHandle(handleHash);
    return state ? (state.balances[sku] ?? 0) : null;
  }

  /** Lets `ms` pass for buckets and leases: on the manual clock, and for real unless the store's clock is controllable. */
  async passTime(ms: number): Promise<void> {
    this.clock.advance(ms);
    if (!this.controllableClock) await sleep(ms);
  }
}

export interface ConcurrentReserveOutcome {
  reserved: number;
  insufficient: number;
  other: number;
  finalBalance: number | null;
}

/**
 * The central money promise (§11): `calls` concurrent reserves of cost 1 on a handle holding
 * `credits` credits. A correct store reserves exactly `credits` and ends at balance 0; a store that
 * reads, decides and then writes grants more. Exported so the negative control can run it alone.
 */
export async function concurrentReserveOutcome(store: Store, clock: ManualClock, calls = 200, credits = 50): Promise<ConcurrentReserveOutcome> {
  return concurrentReserveOutcomeOver([store], clock, calls, credits);
}

/** The same, with the reserves spread over several instances of one store (replicas sharing one Redis). */
export async function concurrentReserveOutcomeOver(stores: Store[], clock: ManualClock, calls = 200, credits = 50): Promise<ConcurrentReserveOutcome> {
  const fixtures = stores.map((store) => new StoreFixture(store, clock, true));
  const fixture = fixtures[0] as StoreFixture;
  const handleHash = await fixture.handle({ credits });
  const decisions = await Promise.all(Array.from({ length: calls }, (_, i) => (fixtures[i % fixtures.length] as StoreFixture).spend(handleHash)));
  const count = (kind: SpendDecision['kind']): number => decisions.filter((decision) => decision.kind === kind).length;
  const reserved = count('reserved');
  const insufficient = count('insufficient');
  return { reserved, insufficient, other: calls - reserved - insufficient, finalBalance: await fixture.balance(handleHash) };
}

/** A fresh claim of a random EIP-3009 nonce (lower-case hex), valid for ten minutes on `clock`. */
export function nonceClaim(clock: ManualClock, overrides: Partial<PaymentNonceClaim> = {}): PaymentNonceClaim {
  return {
    network: 'eip155:84532',
    asset: '0x036cbd53842c5426634e7929541ec2318f3dcf7e',
    payer: `0x${randomBytes(20).toString('hex')}`,
    nonce: `0x${randomBytes(32).toString('hex')}`,
    expiresAt: clock.now() + 10 * 60_000,
    claimedAt: clock.now(),
    sku: SKU,
    tool: 'fetch_readable',
    amount: '20000',
    ...overrides,
  };
}

/** `calls` concurrent claims of one nonce spread over `stores` (one Redis behind several instances, or one store): how many won. */
export async function concurrentNonceClaims(stores: Store[], claim: PaymentNonceClaim, calls = 200): Promise<number> {
  const results = await Promise.all(Array.from({ length: calls }, (_, i) => (stores[i % stores.length] as Store).claimPaymentNonce({ ...claim })));
  return results.filter(Boolean).length;
}

/**
 * The money promises across replicas: `makeStores` opens several instances on one backend (two
 * gateways on one Redis), and every race is spread over them. A store that locks only within one
 * instance passes the single-instance suite and fails here (negative-control.test.ts shows it).
 */
export function crossInstanceConformance(t: Test, name: string, makeStores: (opts: { now: () => number }) => Promise<Store[]>): void {
  t.test(`${name} cross-instance conformance`, async (suite) => {
    const behaviour = (title: string, body: (stores: Store[], clock: ManualClock, t: Test) => Promise<void>): void => {
      suite.test(title, async (t) => {
        const clock = new ManualClock();
        const stores = await makeStores({ now: clock.now });
        t.teardown(() => Promise.all(stores.map((store) => store.close())));
        await body(stores, clock, t);
      });
    };

    behaviour('200 concurrent reserves over the instances on 50 credits reserve exactly 50', async (stores, clock, t) => {
      t.same(await concurrentReserveOutcomeOver(stores, clock), { reserved: 50, insufficient: 150, other: 0, finalBalance: 0 });
    });

    behaviour('50 concurrent claims of one settlement over the instances grant it once', async (stores, clock, t) => {
      const f = new StoreFixture(stores[0] as Store, clock, true);
      const handleHash = await f.handle();
      const charge = await f.pendingCharge(handleHash);
      const results = await Promise.all(
        Array.from({ length: 50 }, (_, i) => (stores[i % stores.length] as Store).claimSettlement({ handleHash, nonce: charge.nonce, outcome: 'settled', credits: 10, receivedAmount: charge.amount })),
      );
      t.equal(results.filter((result) => result.claimed).length, 1, 'one claim');
      t.equal(await f.balance(handleHash), 10, 'granted once');
    });

    behaviour('concurrent commits and releases of one reservation over the instances move its credits once', async (stores, clock, t) => {
      const f = new StoreFixture(stores[0] as Store, clock, true);
      const handleHash = await f.handle({ credits: 5 });
      await f.spend(handleHash, { reservationId: 'r-race', cost: 2 });
      const results = await Promise.all(
        Array.from({ length: 40 }, (_, i) => {
          const store = stores[i % stores.length] as Store;
          return i % 4 < 2 ? store.commit(handleHash, 'r-race', 'fetch_readable') : store.release(handleHash, 'r-race');
        }),
      );
      t.equal(results.filter((result) => result !== null).length, 1, 'one conclusion moved the credits');
      const balance = await f.balance(handleHash);
      t.ok(balance === 3 || balance === 5, `committed (3) or released (5), never both: ${balance}`);
    });

    behaviour('concurrent bindings of one session over the instances: one principal wins everywhere', async (stores, _clock, t) => {
      const session = randomId('s_');
      const owners = await Promise.all(Array.from({ length: 50 }, (_, i) => (stores[i % stores.length] as Store).bindSession(session, `sub:user-${i}`, HOUR)));
      t.equal(new Set(owners).size, 1, 'one owner');
      for (const store of stores) t.equal(await store.sessionPrincipal(session, HOUR), owners[0]);
    });

    behaviour('concurrent lease requests over the instances grant one', async (stores, _clock, t) => {
      const results = await Promise.all(Array.from({ length: 20 }, (_, i) => (stores[i % stores.length] as Store).acquireLease('reconciler', `gw-${i}`, 10_000)));
      t.equal(results.filter(Boolean).length, 1);
    });

    behaviour('concurrent claims of one x402 nonce over the instances: one wins', async (stores, clock, t) => {
      t.equal(await concurrentNonceClaims(stores, nonceClaim(clock)), 1);
    });
  });
}

export function storeConformance(t: Test, name: string, makeStore: MakeStore, options: ConformanceOptions = {}): void {
  const controllable = options.controllableClock ?? false;
  t.test(`${name} store conformance`, async (suite) => declareBehaviours(suite, makeStore, controllable));
}

/**
 * Real time in the timed behaviours (TTLs, leases, buckets on a Redis server's clock): every interval
 * that must NOT have run out leaves at least this much slack, so one stall on a loaded 2-core runner
 * (a GC pause, a descheduled process) cannot flip an "still there" assertion (issue 33). An interval
 * that MUST have run out only needs to be longer: a stall makes it longer still.
 */
const TIMED_SLACK_MS = 800;
const TIMED_TTL_MS = 2_000;
/** Past a TIMED_TTL_MS interval, for "gone by now" (Redis expires to the millisecond). */
const PAST_TTL_MS = TIMED_TTL_MS + 100;

function declareBehaviours(suite: Test, makeStore: MakeStore, controllable: boolean): void {
  const run = (body: (f: StoreFixture, t: Test) => Promise<void>) => async (t: Test) => {
    const clock = new ManualClock();
    const store = await makeStore({ now: clock.now });
    t.teardown(() => store.close());
    await body(new StoreFixture(store, clock, controllable), t);
  };
  /** Declares one behaviour: a fresh store and manual clock per test, closed afterwards. */
  const behaviour = (title: string, body: (f: StoreFixture, t: Test) => Promise<void>): void => {
    suite.test(title, run(body));
  };
  /**
   * A behaviour that waits on real time against a store without a controllable clock. They run side by
   * side (each in its own store, so nothing is shared), declared after the others: the seconds of
   * slack they need are paid once, not once each.
   */
  const timed: [string, (f: StoreFixture, t: Test) => Promise<void>][] = [];
  const timedBehaviour = (title: string, body: (f: StoreFixture, t: Test) => Promise<void>): void => void timed.push([title, body]);

  // ── handles ────────────────────────────────────────────────────────────────────────────────────

  behaviour('createHandle refuses a TTL under the 1 h floor', async (f, t) => {
    await t.rejects(f.handle({ ttlMs: HANDLE_TTL_FLOOR_MS - 1 }), { code: 'TB_ERR_STORE_TTL_FLOOR' });
    await t.resolves(f.handle({ ttlMs: HANDLE_TTL_FLOOR_MS }));
  });

  behaviour('a new handle has no credits and expires ttlMs after creation', async (f, t) => {
    const handleHash = await f.handle({ principal: 'alice', ttlMs: 2 * HOUR });
    const state = await f.store.getHandle(handleHash);
    t.ok(state);
    t.equal(state?.principal, 'alice');
    t.equal(state?.balances[SKU] ?? 0, 0);
    t.notOk(state?.funded[SKU]);
    t.equal(state?.expiresAt, f.clock.now() + 2 * HOUR);
  });

  behaviour('an unknown handle reads as null', async (f, t) => {
    t.equal(await f.store.getHandle(randomId('h_')), null);
  });

  behaviour('a handle is unknown once its TTL has passed', async (f, t) => {
    const handleHash = await f.handle({ credits: 5 });
    f.clock.advance(HOUR);
    t.equal(await f.store.getHandle(handleHash), null);
    t.same(await f.spend(handleHash), { kind: 'unknown_handle' });
  });

  behaviour('a reserved call slides the handle expiry to now + ttlMs', async (f, t) => {
    const handleHash = await f.handle({ credits: 5 });
    f.clock.advance(HOUR - 60_000);
    t.match(await f.spend(handleHash), { kind: 'reserved' });
    t.equal((await f.store.getHandle(handleHash))?.expiresAt, f.clock.now() + HOUR);
    f.clock.advance(HOUR - 60_000);
    t.ok(await f.store.getHandle(handleHash), 'alive past its original expiry');
    f.clock.advance(60_000);
    t.equal(await f.store.getHandle(handleHash), null, 'gone one TTL after the last call');
  });

  behaviour('a refused call does not slide the handle', async (f, t) => {
    const handleHash = await f.handle();
    const before = (await f.store.getHandle(handleHash))?.expiresAt;
    f.clock.advance(60_000);
    t.match(await f.spend(handleHash), { kind: 'insufficient' });
    t.equal((await f.store.getHandle(handleHash))?.expiresAt, before);
  });

  behaviour('findHandlesByFingerprint lists the live handles with that fingerprint', async (f, t) => {
    const a = await f.handle({ fingerprint: 'tb_s_abcd..wxyz' });
    const b = await f.handle({ fingerprint: 'tb_s_abcd..wxyz', ttlMs: 2 * HOUR });
    await f.handle({ fingerprint: 'tb_s_other..0000' });
    t.same((await f.store.findHandlesByFingerprint('tb_s_abcd..wxyz')).sort(), [a, b].sort());
    f.clock.advance(HOUR);
    t.same(await f.store.findHandlesByFingerprint('tb_s_abcd..wxyz'), [b], 'expired handles are not listed');
    t.same(await f.store.findHandlesByFingerprint('tb_s_none..0000'), []);
  });

  behaviour('findHandlesByFingerprint finds every live handle with that fingerprint, wherever it is stored', async (f, t) => {
    const shared = 'tb_s_many..same';
    const hashes = await Promise.all(Array.from({ length: 40 }, () => f.handle({ fingerprint: shared })));
    await Promise.all(Array.from({ length: 10 }, () => f.handle()));
    t.same((await f.store.findHandlesByFingerprint(shared)).sort(), hashes.sort(), '40 handles spread over every slot (and Cluster node)');
  });

  // ── reserve: the order of decisions (§6.2 steps 3–6) ─────────────────────────────────────────────

  behaviour('reserve on an unknown handle answers unknown_handle', async (f, t) => {
    t.same(await f.spend(randomId('h_')), { kind: 'unknown_handle' });
  });

  behaviour('a bound handle refuses other principals before its bucket or credits are touched', async (f, t) => {
    const handleHash = await f.handle({ principal: 'alice', credits: 1 });
    const bucket = { ratePerSecond: 0.001, burst: 1 };
    for (const principal of ['bob', null]) {
      t.same(await f.spend(handleHash, { principal, bucket }), { kind: 'bound_to_other_principal' });
    }
    t.same(await f.spend(handleHash, { principal: 'alice', bucket }), { kind: 'reserved', remaining: 0 }, 'the owner still has its token and credit');
  });

  behaviour('an unbound handle serves any principal and stays unbound', async (f, t) => {
    const handleHash = await f.handle({ credits: 2 });
    t.match(await f.spend(handleHash, { principal: 'bob' }), { kind: 'reserved' });
    t.match(await f.spend(handleHash, { principal: 'carol' }), { kind: 'reserved' });
    t.equal((await f.store.getHandle(handleHash))?.principal, null);
  });

  behaviour('a rate_limited call moves no credit', async (f, t) => {
    const handleHash = await f.handle({ credits: 10 });
    const bucket = { ratePerSecond: 0.001, burst: 2 };
    t.match(await f.spend(handleHash, { bucket }), { kind: 'reserved', remaining: 9 });
    t.match(await f.spend(handleHash, { bucket }), { kind: 'reserved', remaining: 8 });
    const limited = await f.spend(handleHash, { bucket });
    t.equal(limited.kind, 'rate_limited');
    if (limited.kind === 'rate_limited') t.ok(limited.retryAfterMs > 0 && limited.retryAfterMs <= 1_000_000, `retryAfterMs ${limited.retryAfterMs}`);
    t.equal(await f.balance(handleHash), 8, 'balance unchanged by the refused call');
  });

  behaviour('rate_limited is decided before insufficient, and an insufficient call spends a token', async (f, t) => {
    const handleHash = await f.handle();
    const bucket = { ratePerSecond: 0.001, burst: 1 };
    t.match(await f.spend(handleHash, { bucket }), { kind: 'insufficient' });
    t.match(await f.spend(handleHash, { bucket }), { kind: 'rate_limited' });
  });

  behaviour('a reserve without a bucket takes no token (the retry that just settled its charge)', async (f, t) => {
    const handleHash = await f.handle({ credits: 3 });
    const bucket = { ratePerSecond: 0.001, burst: 1 };
    t.match(await f.spend(handleHash, { bucket }), { kind: 'reserved' });
    t.match(await f.spend(handleHash, { bucket: null }), { kind: 'reserved' }, 'no token needed');
    t.match(await f.spend(handleHash, { bucket }), { kind: 'rate_limited' }, 'the bucket is still empty');
    t.equal(await f.balance(handleHash), 1);
  });

  timedBehaviour('retryAfterMs is the time until the next whole token', async (f, t) => {
    const handleHash = await f.handle({ credits: 5 });
    const bucket = { ratePerSecond: 1_000 / TIMED_TTL_MS, burst: 1 };
    t.match(await f.spend(handleHash, { bucket }), { kind: 'reserved' });
    const limited = await f.spend(handleHash, { bucket });
    t.equal(limited.kind, 'rate_limited');
    if (limited.kind === 'rate_limited') t.ok(limited.retryAfterMs > TIMED_TTL_MS - TIMED_SLACK_MS && limited.retryAfterMs <= TIMED_TTL_MS, `retryAfterMs ${limited.retryAfterMs}`);
  });

  timedBehaviour('the handle bucket refills over time', async (f, t) => {
    const handleHash = await f.handle({ credits: 5 });
    const bucket = { ratePerSecond: 1_000 / TIMED_TTL_MS, burst: 1 }; // one token per TIMED_TTL_MS
    t.match(await f.spend(handleHash, { bucket }), { kind: 'reserved' });
    t.match(await f.spend(handleHash, { bucket }), { kind: 'rate_limited' });
    await f.passTime(PAST_TTL_MS);
    t.match(await f.spend(handleHash, { bucket }), { kind: 'reserved', remaining: 3 });
  });

  behaviour('insufficient on a fresh handle reports balance 0, not funded, no charges', async (f, t) => {
    const handleHash = await f.handle();
    t.same(await f.spend(handleHash), { kind: 'insufficient', balance: 0, funded: false, pending: null, lastCharge: null });
  });

  behaviour('reserved takes the cost and reports the remaining balance', async (f, t) => {
    const handleHash = await f.handle({ credits: 5 });
    t.same(await f.spend(handleHash, { cost: 3 }), { kind: 'reserved', remaining: 2 });
    t.match(await f.spend(handleHash, { cost: 3 }), { kind: 'insufficient', balance: 2 });
    t.same(await f.spend(handleHash, { cost: 2 }), { kind: 'reserved', remaining: 0 });
    t.equal(await f.balance(handleHash), 0);
  });

  behaviour('credits of one SKU do not pay for another', async (f, t) => {
    const handleHash = await f.handle({ credits: 3 });
    t.match(await f.spend(handleHash, { sku: OTHER_SKU }), { kind: 'insufficient', balance: 0 });
    t.equal(await f.balance(handleHash, SKU), 3);
  });

  // ── commit and release ─────────────────────────────────────────────────────────────────────────

  behaviour('commit keeps the credits spent and returns the balance net of other reservations', async (f, t) => {
    const handleHash = await f.handle({ credits: 5 });
    await f.spend(handleHash, { reservationId: 'r1', cost: 2 });
    await f.spend(handleHash, { reservationId: 'r2', cost: 1 });
    t.equal(await f.store.commit(handleHash, 'r1'), 2);
    t.equal(await f.balance(handleHash), 2);
  });

  behaviour('release gives the credits back and returns the balance', async (f, t) => {
    const handleHash = await f.handle({ credits: 5 });
    await f.spend(handleHash, { reservationId: 'r1', cost: 2 });
    t.equal(await f.store.release(handleHash, 'r1'), 5);
    t.equal(await f.balance(handleHash), 5);
  });

  behaviour('a second commit or release of a reservation returns null and moves nothing', async (f, t) => {
    const handleHash = await f.handle({ credits: 5 });
    await f.spend(handleHash, { reservationId: 'committed', cost: 2 });
    await f.spend(handleHash, { reservationId: 'released', cost: 2 });
    t.equal(await f.store.commit(handleHash, 'committed'), 1);
    t.equal(await f.store.release(handleHash, 'released'), 3);
    t.equal(await f.store.commit(handleHash, 'committed'), null);
    t.equal(await f.store.release(handleHash, 'committed'), null, 'a committed reservation is never refunded');
    t.equal(await f.store.release(handleHash, 'released'), null, 'a released reservation is never refunded twice');
    t.equal(await f.store.commit(handleHash, 'released'), null);
    t.equal(await f.store.release(handleHash, 'never-existed'), null);
    t.equal(await f.balance(handleHash), 3);
  });

  behaviour('concurrent releases of one reservation refund it once', async (f, t) => {
    const handleHash = await f.handle({ credits: 5 });
    await f.spend(handleHash, { reservationId: 'r1', cost: 3 });
    const results = await Promise.all(Array.from({ length: 20 }, () => f.store.release(handleHash, 'r1')));
    t.equal(results.filter((result) => result !== null).length, 1);
    t.equal(await f.balance(handleHash), 5);
  });

  behaviour('a reservation cannot be committed or released through another handle', async (f, t) => {
    const owner = await f.handle({ credits: 5 });
    const other = await f.handle({ credits: 5 });
    await f.spend(owner, { reservationId: 'r1', cost: 2 });
    t.equal(await f.store.release(other, 'r1'), null);
    t.equal(await f.store.commit(other, 'r1'), null);
    t.equal(await f.balance(other), 5);
    t.equal(await f.store.release(owner, 'r1'), 5);
  });

  behaviour('releaseStaleReservations releases reservations past their deadline, oldest first, at most limit', async (f, t) => {
    const handleHash = await f.handle({ credits: 10 });
    const now = f.clock.now();
    await f.spend(handleHash, { reservationId: 'stale-2', reservationDeadline: now + 2_000 });
    await f.spend(handleHash, { reservationId: 'stale-1', reservationDeadline: now + 1_000 });
    await f.spend(handleHash, { reservationId: 'stale-3', reservationDeadline: now + 3_000 });
    await f.spend(handleHash, { reservationId: 'live', reservationDeadline: now + 60_000 });
    t.equal(await f.balance(handleHash), 6);
    t.equal(await f.store.releaseStaleReservations(now + 10_000, 2), 2);
    t.equal(await f.balance(handleHash), 8);
    t.equal(await f.store.commit(handleHash, 'stale-1'), null, 'the oldest went first');
    t.equal(await f.store.commit(handleHash, 'stale-2'), null);
    t.equal(await f.store.releaseStaleReservations(now + 10_000, 10), 1);
    t.equal(await f.store.releaseStaleReservations(now + 10_000, 10), 0);
    t.equal(await f.balance(handleHash), 9);
    t.equal(await f.store.commit(handleHash, 'live'), 9, 'a reservation inside its deadline is kept');
  });

  behaviour('holdTask keeps a reservation past its call deadline until the task deadline; getTask and concludeTask', async (f, t) => {
    const handleHash = await f.handle({ credits: 10 });
    const now = f.clock.now();
    await f.spend(handleHash, { reservationId: 'task-held', reservationDeadline: now + 1_000 });
    const key = { scope: 'default', taskId: randomId('task {with} braces ') };
    const record = { handleHash, reservationId: 'task-held', tool: 'job', sku: SKU, cost: 1, charge: 'success' as const, owner: 's:abc', deadline: now + HOUR, fingerprint: null, startedAt: now };
    t.equal(await f.store.holdTask(key, record), true);
    t.same(await f.store.getTask(key), record);
    t.equal(await f.store.getTask({ scope: 'other', taskId: key.taskId }), null, 'scoped by endpoint');
    t.equal(await f.store.releaseStaleReservations(now + 10_000, 10), 0, 'past the call deadline the task still holds it');
    t.equal(await f.balance(handleHash), 9);
    t.equal(await f.store.releaseStaleReservations(now + HOUR + 1, 10), 1, 'past the task deadline it is released');
    t.equal(await f.balance(handleHash), 10);
    t.equal(await f.store.holdTask({ scope: 'default', taskId: 'gone' }, record), false, 'a reservation already gone is not held');
    t.equal(await f.store.getTask({ scope: 'default', taskId: 'gone' }), null, 'and nothing is recorded for it');
    t.equal(await f.store.concludeTask(key, { ...record, state: 'released', remaining: 10 }), true, 'the first conclusion is recorded');
    t.same(await f.store.getTask(key), { ...record, state: 'released', remaining: 10 }, 'in place of the held record');
    t.equal(await f.store.concludeTask(key, { ...record, state: 'committed', remaining: 9 }), false, 'a second conclusion changes nothing');
    t.same(await f.store.getTask(key), { ...record, state: 'released', remaining: 10 });
    t.equal(await f.store.concludeTask({ scope: 'default', taskId: 'gone' }, { ...record, state: 'committed', remaining: 1 }), false);
    t.equal(await f.store.getTask({ scope: 'default', taskId: 'gone' }), null, 'a conclusion never creates a record');
  });

  behaviour('recordConcludedTask records a task already concluded, never over a task already recorded', async (f, t) => {
    const handleHash = await f.handle({ credits: 10 });
    const now = f.clock.now();
    const record = { handleHash, reservationId: 'late-task', tool: 'job', sku: SKU, cost: 1, charge: 'success' as const, owner: 's:abc', deadline: now + HOUR, fingerprint: null, startedAt: now };
    const late = { scope: 'default', taskId: randomId('late {task} ') };
    const released = { ...record, state: 'released' as const, remaining: null };
    t.equal(await f.store.recordConcludedTask(late, released), true, 'an unknown task is recorded');
    t.same(await f.store.getTask(late), released, 'as concluded');
    t.equal(await f.store.concludeTask(late, { ...record, state: 'committed', remaining: 9 }), false, 'nothing concludes it again');
    t.equal(await f.store.recordConcludedTask(late, { ...record, state: 'committed', remaining: null }), false, 'a second record changes nothing');
    t.same(await f.store.getTask(late), released);
    const committed = { scope: 'default', taskId: randomId('attempt ') };
    t.equal(await f.store.recordConcludedTask(committed, { ...record, state: 'committed', remaining: null }), true);
    t.same(await f.store.getTask(committed), { ...record, state: 'committed', remaining: null }, 'a committed conclusion is kept as it came');
    await f.spend(handleHash, { reservationId: 'held-task', reservationDeadline: now + 1_000 });
    const held = { scope: 'default', taskId: randomId('held ') };
    const heldRecord = { ...record, reservationId: 'held-task' };
    t.equal(await f.store.holdTask(held, heldRecord), true);
    t.equal(await f.store.recordConcludedTask(held, { ...heldRecord, state: 'released', remaining: null }), false, 'a held task is not overwritten');
    t.same(await f.store.getTask(held), heldRecord, 'its record unchanged');
    t.equal(await f.balance(handleHash), 9, 'and its credit still held');
  });

  behaviour('a reservation at exactly its deadline is not stale yet', async (f, t) => {
    const handleHash = await f.handle({ credits: 1 });
    const deadline = f.clock.now() + 1_000;
    await f.spend(handleHash, { reservationId: 'r1', reservationDeadline: deadline });
    t.equal(await f.store.releaseStaleReservations(deadline, 10), 0);
    t.equal(await f.store.releaseStaleReservations(deadline + 1, 10), 1);
    t.equal(await f.store.commit(handleHash, 'r1'), null, 'a gateway answering late cannot commit it any more');
  });

  // ── operator grants ────────────────────────────────────────────────────────────────────────────

  behaviour('grantCredits adds to the balance without marking the SKU funded', async (f, t) => {
    const handleHash = await f.handle();
    t.equal(await f.store.grantCredits(handleHash, SKU, 3), 3);
    t.equal(await f.store.grantCredits(handleHash, SKU, 4), 7);
    t.notOk((await f.store.getHandle(handleHash))?.funded[SKU]);
  });

  behaviour('grantCredits refuses an unknown handle and a non-positive or fractional amount', async (f, t) => {
    const handleHash = await f.handle();
    await t.rejects(f.store.grantCredits(randomId('h_'), SKU, 3), { code: 'TB_ERR_NOT_FOUND' });
    for (const credits of [0, -2, 1.5]) await t.rejects(f.store.grantCredits(handleHash, SKU, credits), { code: 'TB_ERR_INVALID_PARAMS' });
    t.equal(await f.balance(handleHash), 0);
  });

  // ── charges: one pending charge per SKU (§6.5) ───────────────────────────────────────────────────

  behaviour('beginCharge opens a charge with the price snapshot and the first poll time', async (f, t) => {
    const handleHash = await f.handle();
    const now = f.clock.now();
    const begun = await f.begin(handleHash, { nonce: 'n1', firstPollDelayMs: 3_000 });
    t.equal(begun.kind, 'begun');
    const expected: ChargeRecord = {
      nonce: 'n1',
      handleHash,
      sku: SKU,
      ...SNAPSHOT,
      status: 'opening',
      providerRef: null,
      checkoutUrl: null,
      openedAt: now,
      expiresAt: now + CHARGE_TTL,
      lastPolledAt: 0,
      nextPollAt: now + 3_000,
      pollCount: 0,
      grantedCredits: 0,
      receivedAmount: null,
    };
    t.same(begun.charge, expected);
    t.same(await f.store.getCharge(handleHash, 'n1'), expected);
  });

  behaviour('beginCharge shares an opening charge younger than 15 s', async (f, t) => {
    const handleHash = await f.handle();
    const first = await f.begin(handleHash);
    f.clock.advance(14_000);
    const second = await f.begin(handleHash);
    t.equal(second.kind, 'existing');
    t.equal(second.charge.nonce, first.charge.nonce);
  });

  behaviour('beginCharge replaces an opening charge older than 15 s', async (f, t) => {
    const handleHash = await f.handle();
    const first = await f.begin(handleHash);
    f.clock.advance(15_000);
    const second = await f.begin(handleHash);
    t.equal(second.kind, 'begun');
    t.not(second.charge.nonce, first.charge.nonce);
  });

  behaviour('beginCharge reuses a pending charge while its link has more than 60 s left', async (f, t) => {
    const handleHash = await f.handle();
    const pending = await f.pendingCharge(handleHash);
    f.clock.advance(CHARGE_TTL - 61_000);
    const again = await f.begin(handleHash);
    t.equal(again.kind, 'existing');
    t.same(again.charge, pending);
  });

  behaviour('a pending charge about to expire is replaced but stays pending and due', async (f, t) => {
    const handleHash = await f.handle();
    const old = await f.pendingCharge(handleHash);
    f.clock.advance(CHARGE_TTL - 60_000);
    const fresh = await f.begin(handleHash);
    t.equal(fresh.kind, 'begun');
    t.not(fresh.charge.nonce, old.nonce);
    t.equal((await f.store.getCharge(handleHash, old.nonce))?.status, 'pending');
    t.ok((await f.store.dueCharges(f.clock.now(), 100)).some((charge) => charge.nonce === old.nonce), 'the reconciler still polls the old one');
    t.match(await f.spend(handleHash), { kind: 'insufficient', pending: { nonce: fresh.charge.nonce } });
    const claim = await f.settle(handleHash, old, 10);
    t.equal(claim.claimed, true, 'a late payment on the replaced link is granted');
    t.equal(await f.balance(handleHash), 10);
  });

  behaviour('each SKU has its own pending charge', async (f, t) => {
    const handleHash = await f.handle();
    const a = await f.begin(handleHash, { sku: SKU });
    const b = await f.begin(handleHash, { sku: OTHER_SKU });
    t.equal(a.kind, 'begun');
    t.equal(b.kind, 'begun');
  });

  behaviour('each handle has its own pending charge', async (f, t) => {
    const a = await f.begin(await f.handle());
    const b = await f.begin(await f.handle());
    t.equal(a.kind, 'begun');
    t.equal(b.kind, 'begun');
  });

  behaviour('concurrent beginCharge calls begin exactly one charge and all share it', async (f, t) => {
    const handleHash = await f.handle();
    const results = await Promise.all(Array.from({ length: 25 }, () => f.begin(handleHash)));
    const begun = results.filter((result) => result.kind === 'begun');
    t.equal(begun.length, 1);
    t.equal(new Set(results.map((result) => result.charge.nonce)).size, 1);
    t.equal(await f.store.countPendingCharges(), 1);
  });

  behaviour('attachLink makes an opening charge pending and findable by provider ref', async (f, t) => {
    const handleHash = await f.handle();
    const begun = await f.begin(handleHash);
    const attached = await f.store.attachLink(handleHash, begun.charge.nonce, { providerRef: 'ref-1', checkoutUrl: 'https://pay.test/ref-1' });
    t.match(attached, { nonce: begun.charge.nonce, status: 'pending', providerRef: 'ref-1', checkoutUrl: 'https://pay.test/ref-1' });
    t.same(await f.store.findChargeByRef('ref-1'), attached);
    t.same(await f.store.getCharge(handleHash, begun.charge.nonce), attached);
    t.equal(await f.store.findChargeByRef('ref-unknown'), null);
  });

  behaviour('attachLink on an unknown or already pending charge returns null', async (f, t) => {
    const handleHash = await f.handle();
    t.equal(await f.store.attachLink(handleHash, 'n-unknown', { providerRef: 'ref-x', checkoutUrl: 'https://pay.test/x' }), null);
    const pending = await f.pendingCharge(handleHash);
    t.equal(await f.store.attachLink(handleHash, pending.nonce, { providerRef: 'ref-y', checkoutUrl: 'https://pay.test/y' }), null);
    t.same(await f.store.getCharge(handleHash, pending.nonce), pending, 'the first link stays');
    t.equal(await f.store.findChargeByRef('ref-y'), null);
  });

  behaviour('attachLink shows no link for a charge whose handle the store does not hold (a failover erased it): it stays opening and aborts', async (f, t) => {
    const handleHash = `h-erased-${Math.random().toString(36).slice(2)}`;
    const begun = await f.begin(handleHash);
    t.equal(begun.kind, 'begun', 'the charge is recorded all the same (an operator can see it)');
    t.equal(await f.store.attachLink(handleHash, begun.charge.nonce, { providerRef: 'ref-erased', checkoutUrl: 'https://pay.test/erased' }), null, 'no link to show');
    t.match(await f.store.getCharge(handleHash, begun.charge.nonce), { status: 'opening' });
    t.equal(await f.store.findChargeByRef('ref-erased'), null);
    await f.store.abortCharge(handleHash, begun.charge.nonce);
    t.equal(await f.store.getCharge(handleHash, begun.charge.nonce), null);
  });

  behaviour('abortCharge drops an opening charge so the next challenge opens anew', async (f, t) => {
    const handleHash = await f.handle();
    const first = await f.begin(handleHash);
    await f.store.abortCharge(handleHash, first.charge.nonce);
    t.equal(await f.store.getCharge(handleHash, first.charge.nonce), null);
    t.match(await f.spend(handleHash), { kind: 'insufficient', pending: null });
    t.equal((await f.begin(handleHash)).kind, 'begun');
  });

  behaviour('abortCharge leaves a pending charge alone', async (f, t) => {
    const handleHash = await f.handle();
    const pending = await f.pendingCharge(handleHash);
    await f.store.abortCharge(handleHash, pending.nonce);
    t.same(await f.store.getCharge(handleHash, pending.nonce), pending);
  });

  behaviour('insufficient reports the opening, then pending, charge of the SKU', async (f, t) => {
    const handleHash = await f.handle();
    const begun = await f.begin(handleHash);
    t.match(await f.spend(handleHash), { kind: 'insufficient', pending: { nonce: begun.charge.nonce, status: 'opening' } });
    await f.store.attachLink(handleHash, begun.charge.nonce, { providerRef: 'ref-1', checkoutUrl: 'https://pay.test/1' });
    t.match(await f.spend(handleHash), { kind: 'insufficient', pending: { nonce: begun.charge.nonce, status: 'pending', checkoutUrl: 'https://pay.test/1' }, lastCharge: null });
    t.match(await f.spend(handleHash, { sku: OTHER_SKU }), { kind: 'insufficient', pending: null }, 'another SKU has none');
  });

  // ── polling ────────────────────────────────────────────────────────────────────────────────────

  behaviour('takePollSlot grants one poll per interval and schedules the next', async (f, t) => {
    const handleHash = await f.handle();
    const charge = await f.pendingCharge(handleHash);
    const now = f.clock.now();
    t.equal(await f.store.takePollSlot(handleHash, charge.nonce, now, 2_000, now + 6_000), true);
    t.match(await f.store.getCharge(handleHash, charge.nonce), { lastPolledAt: now, pollCount: 1, nextPollAt: now + 6_000 });
    t.equal(await f.store.takePollSlot(handleHash, charge.nonce, now + 1_999, 2_000, now + 9_000), false);
    t.match(await f.store.getCharge(handleHash, charge.nonce), { pollCount: 1, nextPollAt: now + 6_000 }, 'a refused slot changes nothing');
    t.equal(await f.store.takePollSlot(handleHash, charge.nonce, now + 2_000, 2_000, now + 14_000), true);
    t.match(await f.store.getCharge(handleHash, charge.nonce), { lastPolledAt: now + 2_000, pollCount: 2, nextPollAt: now + 14_000 });
  });

  behaviour('markChargeRead records the end of the current slot\'s read, never of an older one', async (f, t) => {
    const handleHash = await f.handle();
    const charge = await f.pendingCharge(handleHash);
    const now = f.clock.now();
    t.equal((await f.store.getCharge(handleHash, charge.nonce))?.lastReadAt, undefined, 'no read ended yet');
    await f.store.takePollSlot(handleHash, charge.nonce, now, 2_000, now + 6_000);
    await f.store.markChargeRead(handleHash, charge.nonce, now);
    t.match(await f.store.getCharge(handleHash, charge.nonce), { lastPolledAt: now, lastReadAt: now, pollCount: 1, status: 'pending' }, 'the read of this slot is done');
    await f.store.takePollSlot(handleHash, charge.nonce, now + 2_000, 2_000, now + 14_000);
    await f.store.markChargeRead(handleHash, charge.nonce, now);
    t.match(await f.store.getCharge(handleHash, charge.nonce), { lastPolledAt: now + 2_000, lastReadAt: now }, 'a late mark for an older slot does not claim the newer read done');
    await f.store.markChargeRead(randomId('h_'), 'n-unknown', now);
  });

  behaviour('takePollSlot on an unknown charge is refused', async (f, t) => {
    t.equal(await f.store.takePollSlot(randomId('h_'), 'n-unknown', f.clock.now(), 2_000, f.clock.now() + 6_000), false);
  });

  behaviour('concurrent takePollSlot calls grant one slot', async (f, t) => {
    const handleHash = await f.handle();
    const charge = await f.pendingCharge(handleHash);
    const now = f.clock.now();
    const slots = await Promise.all(Array.from({ length: 30 }, () => f.store.takePollSlot(handleHash, charge.nonce, now, 2_000, now + 6_000)));
    t.equal(slots.filter(Boolean).length, 1);
    t.equal((await f.store.getCharge(handleHash, charge.nonce))?.pollCount, 1);
  });

  // ── settlement: exactly once (§7.5) ────────────────────────────────────────────────────────────

  behaviour('50 concurrent claims of one charge grant its credits exactly once', async (f, t) => {
    const handleHash = await f.handle();
    const charge = await f.pendingCharge(handleHash);
    const results = await Promise.all(Array.from({ length: 50 }, () => f.settle(handleHash, charge, 10)));
    t.equal(results.filter((result) => result.claimed).length, 1);
    t.equal(await f.balance(handleHash), 10);
    for (const result of results) t.match(result, { charge: { nonce: charge.nonce, status: 'settled' }, balance: 10 });
  });

  behaviour('a settled claim funds the SKU, records the outcome, clears the pending charge and leaves the due index', async (f, t) => {
    const handleHash = await f.handle();
    const charge = await f.pendingCharge(handleHash);
    const result = await f.store.claimSettlement({ handleHash, nonce: charge.nonce, outcome: 'settled', credits: 10, receivedAmount: '5' });
    t.same(result, { claimed: true, charge: { ...charge, status: 'settled', grantedCredits: 10, receivedAmount: '5' }, balance: 10 });
    t.equal((await f.store.getHandle(handleHash))?.funded[SKU], true);
    t.same(await f.store.dueCharges(charge.expiresAt + 1, 100), []);
    t.equal(await f.store.countPendingCharges(), 0);
    t.equal((await f.begin(handleHash)).kind, 'begun', 'the next challenge opens a new link');
  });

  behaviour('after spending settled credits, insufficient says funded and shows the settled charge', async (f, t) => {
    const handleHash = await f.handle();
    const charge = await f.pendingCharge(handleHash);
    await f.settle(handleHash, charge, 2);
    t.match(await f.spend(handleHash), { kind: 'reserved', remaining: 1 });
    t.match(await f.spend(handleHash), { kind: 'reserved', remaining: 0 });
    t.match(await f.spend(handleHash), { kind: 'insufficient', balance: 0, funded: true, pending: null, lastCharge: { nonce: charge.nonce, status: 'settled' } });
  });

  behaviour('an underpaid claim grants nothing, clears the pending charge and becomes lastCharge', async (f, t) => {
    const handleHash = await f.handle();
    const charge = await f.pendingCharge(handleHash);
    const result = await f.store.claimSettlement({ handleHash, nonce: charge.nonce, outcome: 'underpaid', credits: 0, receivedAmount: '0.50' });
    t.match(result, { claimed: true, charge: { status: 'underpaid', grantedCredits: 0, receivedAmount: '0.50' }, balance: 0 });
    t.same(await f.spend(handleHash), {
      kind: 'insufficient',
      balance: 0,
      funded: false,
      pending: null,
      lastCharge: { ...charge, status: 'underpaid', grantedCredits: 0, receivedAmount: '0.50' },
    });
    t.equal((await f.begin(handleHash)).kind, 'begun', 'an underpaid link is never shown again');
    t.same(await f.store.listCharges('underpaid'), [result.charge], 'it stays listed for the operator');
  });

  behaviour('a claim grants the credits the caller computed; the price snapshot stays on the charge', async (f, t) => {
    const handleHash = await f.handle();
    const charge = await f.pendingCharge(handleHash, { snapshot: { ...SNAPSHOT, amount: '5.00', credits: 10 } });
    const result = await f.store.claimSettlement({ handleHash, nonce: charge.nonce, outcome: 'settled', credits: 6, receivedAmount: '3.00' });
    t.match(result, { claimed: true, balance: 6, charge: { amount: '5.00', credits: 10, grantedCredits: 6, label: SNAPSHOT.label, currency: 'USD', tool: SNAPSHOT.tool } });
  });

  behaviour('a late payment on an abandoned charge is still granted', async (f, t) => {
    const handleHash = await f.handle();
    const charge = await f.pendingCharge(handleHash);
    f.clock.advance(CHARGE_TTL + 1);
    t.equal(await f.store.abandonCharge(handleHash, charge.nonce, f.clock.now() + 60_000), true);
    const result = await f.settle(handleHash, charge, 10);
    t.match(result, { claimed: true, balance: 10, charge: { status: 'settled', grantedCredits: 10 } });
    t.equal((await f.settle(handleHash, charge, 10)).claimed, false, 'and only once');
    t.equal(await f.balance(handleHash), 10);
  });

  behaviour('an opening, unknown or already-claimed charge cannot be claimed', async (f, t) => {
    const handleHash = await f.handle();
    const opening = await f.begin(handleHash);
    t.match(await f.settle(handleHash, opening.charge, 10), { claimed: false, charge: { status: 'opening' }, balance: 0 });
    t.same(await f.store.claimSettlement({ handleHash, nonce: 'n-unknown', outcome: 'settled', credits: 10, receivedAmount: null }), { claimed: false, charge: null, balance: 0 });
    await f.store.abortCharge(handleHash, opening.charge.nonce);
    const pending = await f.pendingCharge(handleHash);
    await f.settle(handleHash, pending, 0, 'underpaid');
    t.match(await f.settle(handleHash, pending, 10, 'settled'), { claimed: false, charge: { status: 'underpaid', grantedCredits: 0 }, balance: 0 }, 'an outcome is final');
    t.equal(await f.balance(handleHash), 0);
  });

  behaviour('a claim through another handle hash is refused', async (f, t) => {
    const owner = await f.handle();
    const other = await f.handle();
    const charge = await f.pendingCharge(owner);
    t.match(await f.store.claimSettlement({ handleHash: other, nonce: charge.nonce, outcome: 'settled', credits: 10, receivedAmount: null }), { claimed: false });
    t.equal(await f.balance(other), 0);
    t.equal((await f.store.getCharge(owner, charge.nonce))?.status, 'pending');
  });

  behaviour('a claim after the handle expired records the outcome and grants nothing', async (f, t) => {
    const handleHash = await f.handle();
    const charge = await f.pendingCharge(handleHash);
    f.clock.advance(HOUR);
    const result = await f.settle(handleHash, charge, 10);
    t.match(result, { claimed: true, balance: 0, charge: { status: 'settled', grantedCredits: 0 } });
    t.equal((await f.settle(handleHash, charge, 10)).claimed, false);
    t.equal(await f.store.getHandle(handleHash), null);
  });

  behaviour('abandonCharge moves only pending charges', async (f, t) => {
    const handleHash = await f.handle();
    const settled = await f.pendingCharge(handleHash);
    await f.settle(handleHash, settled, 10);
    const underpaid = await f.pendingCharge(handleHash, { sku: OTHER_SKU });
    await f.settle(handleHash, underpaid, 0, 'underpaid');
    const opening = await f.begin(handleHash);
    const later = f.clock.now() + 60_000;
    t.equal(await f.store.abandonCharge(handleHash, settled.nonce, later), false);
    t.equal(await f.store.abandonCharge(handleHash, underpaid.nonce, later), false);
    t.equal(await f.store.abandonCharge(handleHash, opening.charge.nonce, later), false);
    t.equal(await f.store.abandonCharge(handleHash, 'n-unknown', later), false);
    t.equal((await f.store.getCharge(handleHash, settled.nonce))?.status, 'settled');
    t.equal((await f.store.getCharge(handleHash, underpaid.nonce))?.status, 'underpaid');
    t.equal((await f.store.getCharge(handleHash, opening.charge.nonce))?.status, 'opening');
  });

  behaviour('an abandoned charge stops being pending and becomes lastCharge', async (f, t) => {
    const handleHash = await f.handle();
    const charge = await f.pendingCharge(handleHash);
    const nextPollAt = charge.expiresAt + 60_000;
    t.equal(await f.store.abandonCharge(handleHash, charge.nonce, nextPollAt), true);
    t.equal(await f.store.abandonCharge(handleHash, charge.nonce, nextPollAt), false, 'only once');
    t.match(await f.spend(handleHash), { kind: 'insufficient', pending: null, lastCharge: { nonce: charge.nonce, status: 'abandoned' } });
    t.equal(await f.store.countPendingCharges(), 0);
    t.equal((await f.begin(handleHash)).kind, 'begun');
  });

  behaviour('an abandoned charge stays due for the reconciler at the time it was given (§7.6 late payments)', async (f, t) => {
    const handleHash = await f.handle({ ttlMs: 30 * 24 * HOUR });
    const charge = await f.pendingCharge(handleHash);
    const nextPollAt = charge.expiresAt + 60_000;
    await f.store.abandonCharge(handleHash, charge.nonce, nextPollAt);
    t.same(await f.store.dueCharges(nextPollAt - 1, 100), [], 'not before its time');
    t.match(await f.store.dueCharges(nextPollAt, 100), [{ nonce: charge.nonce, status: 'abandoned', nextPollAt }]);
    t.equal(await f.store.takePollSlot(handleHash, charge.nonce, nextPollAt, 2_000, nextPollAt + HOUR), true, 'a poll reschedules it');
    t.same(await f.store.dueCharges(nextPollAt + HOUR - 1, 100), []);
    t.match(await f.store.dueCharges(nextPollAt + HOUR, 100), [{ nonce: charge.nonce, status: 'abandoned' }]);
    t.match(await f.settle(handleHash, charge, 10), { claimed: true, balance: 10 });
    t.same(await f.store.dueCharges(nextPollAt + 2 * HOUR, 100), [], 'a claimed charge is no longer due');
  });

  behaviour('every abandoned charge of a handle stays due, not only the last one', async (f, t) => {
    const handleHash = await f.handle({ ttlMs: 30 * 24 * HOUR });
    const older = await f.pendingCharge(handleHash);
    await f.store.abandonCharge(handleHash, older.nonce, older.expiresAt + 60_000);
    const newer = await f.pendingCharge(handleHash);
    await f.store.abandonCharge(handleHash, newer.nonce, newer.expiresAt + 60_000);
    t.match(await f.spend(handleHash), { lastCharge: { nonce: newer.nonce } });
    const due = (await f.store.dueCharges(newer.expiresAt + 60_000, 100)).map((charge) => charge.nonce).sort();
    t.same(due, [older.nonce, newer.nonce].sort());
    t.match(await f.settle(handleHash, older, 10), { claimed: true, balance: 10 }, 'a late payment on the older one is granted');
  });

  behaviour('expireCharge marks a pending or abandoned charge expired, for the operator, and it leaves the due index', async (f, t) => {
    const handleHash = await f.handle({ ttlMs: 30 * 24 * HOUR });
    const abandoned = await f.pendingCharge(handleHash, { sku: 'a' });
    await f.store.abandonCharge(handleHash, abandoned.nonce, abandoned.expiresAt + 60_000);
    const pending = await f.pendingCharge(handleHash, { sku: 'b' });
    const settled = await f.pendingCharge(handleHash, { sku: 'c' });
    await f.settle(handleHash, settled, 1);
    // The reconciler gives up in the last hour of the retention window.
    f.clock.advance(abandoned.expiresAt + RETENTION_MS - HOUR / 2 - f.clock.now());
    const markedAt = f.clock.now();
    t.equal(await f.store.expireCharge(handleHash, abandoned.nonce, markedAt), true);
    t.equal(await f.store.expireCharge(handleHash, pending.nonce, markedAt), true);
    t.equal(await f.store.expireCharge(handleHash, settled.nonce, markedAt), false, 'a settled charge stays settled');
    t.equal(await f.store.expireCharge(handleHash, abandoned.nonce, markedAt), false, 'only once');
    t.match(await f.store.getCharge(handleHash, abandoned.nonce), { status: 'expired', expiredAt: markedAt });
    t.same((await f.store.listCharges('expired')).map((charge) => charge.nonce).sort(), [abandoned.nonce, pending.nonce].sort());
    t.same(await f.store.dueCharges(markedAt + HOUR, 100), [], 'no longer polled');
    t.equal(await f.store.countPendingCharges(), 0);
    t.match(await f.spend(handleHash, { sku: 'b' }), { kind: 'insufficient', pending: null }, 'an expired charge is never shown as a link');
    f.clock.advance(RETENTION_MS - HOUR);
    t.same((await f.store.listCharges('expired')).map((charge) => charge.nonce).sort(), [abandoned.nonce, pending.nonce].sort(), 'kept a retention window from when it was marked');
    t.equal(await f.store.getCharge(handleHash, settled.nonce), null, 'while the settled one has ended');
    t.equal((await f.store.findChargeByRef(pending.providerRef ?? ''))?.status, 'expired', 'still found by its link');
    t.match(await f.settle(handleHash, pending, 10), { claimed: true, balance: 10, charge: { status: 'settled' } }, 'money that arrives on it is still granted');
    t.equal((await f.store.getCharge(handleHash, pending.nonce))?.status, 'settled', 'and the record stays for the operator');
    f.clock.advance(HOUR);
    t.same(await f.store.listCharges(), [], 'all gone a retention window after the mark');
  });

  // ── reconciler views ───────────────────────────────────────────────────────────────────────────

  behaviour('dueCharges lists pending charges due by now, earliest first, at most limit', async (f, t) => {
    const base = f.clock.now();
    const late = await f.pendingCharge(await f.handle(), { now: base, firstPollDelayMs: 9_000 });
    const early = await f.pendingCharge(await f.handle(), { now: base, firstPollDelayMs: 1_000 });
    const middle = await f.pendingCharge(await f.handle(), { now: base, firstPollDelayMs: 5_000 });
    const notYet = await f.pendingCharge(await f.handle(), { now: base, firstPollDelayMs: 60_000 });
    await f.begin(await f.handle(), { now: base, firstPollDelayMs: 0 }); // opening: no link to poll
    const nonces = (charges: ChargeRecord[]): string[] => charges.map((charge) => charge.nonce);
    t.same(nonces(await f.store.dueCharges(base + 10_000, 10)), [early.nonce, middle.nonce, late.nonce]);
    t.same(nonces(await f.store.dueCharges(base + 10_000, 2)), [early.nonce, middle.nonce]);
    t.same(nonces(await f.store.dueCharges(base + 5_000, 10)), [early.nonce, middle.nonce], 'nextPollAt equal to now is due');
    await f.store.takePollSlot(early.handleHash, early.nonce, base + 10_000, 2_000, base + 70_000);
    t.same(nonces(await f.store.dueCharges(base + 10_000, 10)), [middle.nonce, late.nonce], 'a poll reschedules');
    t.same(nonces(await f.store.dueCharges(base + 80_000, 10)), [middle.nonce, late.nonce, notYet.nonce, early.nonce]);
  });

  behaviour('listCharges filters by status and countPendingCharges counts opening and pending', async (f, t) => {
    const handleHash = await f.handle();
    const settled = await f.pendingCharge(handleHash, { sku: 'a' });
    await f.settle(handleHash, settled, 1);
    const abandoned = await f.pendingCharge(handleHash, { sku: 'b' });
    await f.store.abandonCharge(handleHash, abandoned.nonce, abandoned.expiresAt);
    const pending = await f.pendingCharge(handleHash, { sku: 'c' });
    const opening = await f.begin(handleHash, { sku: 'd' });
    const nonces = async (status?: Parameters<Store['listCharges']>[0]) => (await f.store.listCharges(status)).map((charge) => charge.nonce).sort();
    t.same(await nonces('settled'), [settled.nonce]);
    t.same(await nonces('abandoned'), [abandoned.nonce]);
    t.same(await nonces('pending'), [pending.nonce]);
    t.same(await nonces('opening'), [opening.charge.nonce]);
    t.same(await nonces('underpaid'), []);
    t.same(await nonces(), [settled.nonce, abandoned.nonce, pending.nonce, opening.charge.nonce].sort());
    t.equal(await f.store.countPendingCharges(), 2);
  });

  behaviour('a returned record is a copy: changing it changes nothing in the store', async (f, t) => {
    const handleHash = await f.handle({ credits: 1 });
    const charge = await f.pendingCharge(handleHash);
    charge.status = 'settled';
    charge.credits = 1000;
    t.equal((await f.store.getCharge(handleHash, charge.nonce))?.status, 'pending');
    const state = await f.store.getHandle(handleHash);
    if (state) state.balances[SKU] = 1000;
    t.equal(await f.balance(handleHash), 1);
    const claim = await f.settle(handleHash, charge, 1);
    if (claim.charge) claim.charge.status = 'pending';
    t.equal((await f.store.getCharge(handleHash, charge.nonce))?.status, 'settled');
  });

  // ── challenge throttle, lease ──────────────────────────────────────────────────────────────────

  behaviour('takeChallengeToken allows a burst per client key, then asks to wait', async (f, t) => {
    const bucket = { ratePerSecond: 0.001, burst: 3 };
    for (let i = 0; i < 3; i++) t.same(await f.store.takeChallengeToken('client-a', bucket), { allowed: true, retryAfterMs: 0 });
    const refused = await f.store.takeChallengeToken('client-a', bucket);
    t.equal(refused.allowed, false);
    t.ok(refused.retryAfterMs > 0, `retryAfterMs ${refused.retryAfterMs}`);
    t.equal((await f.store.takeChallengeToken('client-b', bucket)).allowed, true, 'another client has its own bucket');
  });

  timedBehaviour('challenge tokens refill over time', async (f, t) => {
    const bucket = { ratePerSecond: 1_000 / TIMED_TTL_MS, burst: 1 };
    t.equal((await f.store.takeChallengeToken('client-a', bucket)).allowed, true);
    t.equal((await f.store.takeChallengeToken('client-a', bucket)).allowed, false);
    await f.passTime(PAST_TTL_MS);
    t.equal((await f.store.takeChallengeToken('client-a', bucket)).allowed, true);
  });

  timedBehaviour('a lease is exclusive until it expires and renewable by its holder', async (f, t) => {
    t.equal(await f.store.acquireLease('reconciler', 'gw-1', TIMED_TTL_MS), true);
    t.equal(await f.store.acquireLease('reconciler', 'gw-2', TIMED_TTL_MS), false);
    t.equal(await f.store.acquireLease('other-lease', 'gw-2', TIMED_TTL_MS), true, 'leases are independent');
    t.equal(await f.store.acquireLease('reconciler', 'gw-1', TIMED_TTL_MS), true, 'the holder renews');
    await f.passTime(PAST_TTL_MS);
    t.equal(await f.store.acquireLease('reconciler', 'gw-2', 10_000), true, 'an expired lease is free');
    t.equal(await f.store.acquireLease('reconciler', 'gw-1', 10_000), false);
  });

  behaviour('concurrent lease requests from different owners grant one', async (f, t) => {
    const results = await Promise.all(Array.from({ length: 10 }, (_, i) => f.store.acquireLease('reconciler', `gw-${i}`, 10_000)));
    t.equal(results.filter(Boolean).length, 1);
  });

  // ── provider events (webhook replay, §20) ─────────────────────────────────────────────────────

  timedBehaviour('claimEvent is true once per source and id while remembered, then free again', async (f, t) => {
    t.equal(await f.store.claimEvent('moove', 'evt_1', TIMED_TTL_MS), true, 'first delivery');
    t.equal(await f.store.claimEvent('moove', 'evt_1', TIMED_TTL_MS), false, 'a replay');
    t.equal(await f.store.claimEvent('moove', 'evt_2', TIMED_TTL_MS), true, 'another event');
    t.equal(await f.store.claimEvent('other', 'evt_1', TIMED_TTL_MS), true, 'another source');
    t.equal(await f.store.claimEvent('moove', 'evt_{1}:x', TIMED_TTL_MS), true, 'any printable id');
    t.equal(await f.store.claimEvent('moove', 'evt_{1}:x', TIMED_TTL_MS), false);
    await f.passTime(PAST_TTL_MS);
    t.equal(await f.store.claimEvent('moove', 'evt_1', TIMED_TTL_MS), true, 'forgotten after its time');
  });

  behaviour('concurrent claims of one event grant one', async (f, t) => {
    const results = await Promise.all(Array.from({ length: 20 }, () => f.store.claimEvent('moove', 'evt_race', 60_000)));
    t.equal(results.filter(Boolean).length, 1);
  });

  // ── dev provider links ─────────────────────────────────────────────────────────────────────────

  behaviour('a dev link round-trips and is paid once while active', async (f, t) => {
    const link = { id: randomId('dev_'), label: 'Research pack', amount: '5.00', currency: 'USD', credits: 10, expiresAt: f.clock.now() + CHARGE_TTL, status: 'active' as const, receivedAmount: null };
    await f.store.putDevLink(link);
    t.same(await f.store.getDevLink(link.id), link);
    const payments = await Promise.all(Array.from({ length: 10 }, () => f.store.payDevLink(link.id, '4.50')));
    t.equal(payments.filter(Boolean).length, 1);
    t.same(await f.store.getDevLink(link.id), { ...link, status: 'completed', receivedAmount: '4.50' });
    t.equal(await f.store.payDevLink(link.id, '5.00'), false);
    t.equal((await f.store.getDevLink(link.id))?.receivedAmount, '4.50');
  });

  behaviour('an expired or unknown dev link cannot be paid', async (f, t) => {
    const expired = { id: randomId('dev_'), label: 'Research pack', amount: '5.00', currency: 'USD', credits: 10, expiresAt: f.clock.now() - 1_000, status: 'active' as const, receivedAmount: null };
    await f.store.putDevLink(expired);
    t.equal(await f.store.payDevLink(expired.id, '5.00'), false);
    t.match(await f.store.getDevLink(expired.id), { status: 'active', receivedAmount: null }, 'still readable after expiry');
    t.equal(await f.store.payDevLink(randomId('dev_'), '5.00'), false);
    t.equal(await f.store.getDevLink(randomId('dev_')), null);
  });

  behaviour('ping resolves', async (f, t) => {
    await t.resolves(f.store.ping());
  });

  // ── concurrency on one handle ──────────────────────────────────────────────────────────────────

  behaviour('200 concurrent reserves on 50 credits reserve exactly 50 and end at 0', async (f, t) => {
    t.same(await concurrentReserveOutcome(f.store, f.clock), { reserved: 50, insufficient: 150, other: 0, finalBalance: 0 });
  });

  behaviour('concurrent commits, releases and reserves keep the ledger exact', async (f, t) => {
    const handleHash = await f.handle({ credits: 100 });
    const ids = Array.from({ length: 100 }, (_, i) => `r${i}`);
    await Promise.all(ids.map((reservationId) => f.spend(handleHash, { reservationId })));
    t.equal(await f.balance(handleHash), 0);
    const settlements = await Promise.all(
      ids.flatMap((id, i) => (i % 2 === 0 ? [f.store.commit(handleHash, id), f.store.release(handleHash, id)] : [f.store.release(handleHash, id), f.store.release(handleHash, id)])),
    );
    t.equal(settlements.filter((result) => result !== null).length, 100, 'each reservation settled exactly once');
    const refunded = await f.balance(handleHash);
    const again = await Promise.all(Array.from({ length: 150 }, () => f.spend(handleHash)));
    t.equal(again.filter((decision) => decision.kind === 'reserved').length, refunded, 'exactly the refunded credits can be spent again');
    t.equal(await f.balance(handleHash), 0);
  });

  behaviour('concurrent claims of different charges on one handle all add up', async (f, t) => {
    const handleHash = await f.handle();
    const charges = await Promise.all(['a', 'b', 'c', 'd', 'e'].map((sku) => f.pendingCharge(handleHash, { sku })));
    const results = await Promise.all(charges.flatMap((charge) => [f.settle(handleHash, charge, 3), f.settle(handleHash, charge, 3)]));
    t.equal(results.filter((result) => result.claimed).length, 5);
    const state = await f.store.getHandle(handleHash);
    t.same(['a', 'b', 'c', 'd', 'e'].map((sku) => state?.balances[sku]), [3, 3, 3, 3, 3]);
  });

  // ── priced-request registry (SPEC §6.5) ─────────────────────────────────────────────────────────

  const pricedRecord = (f: StoreFixture, overrides: Partial<PricedRequestRecord> = {}): PricedRequestRecord => ({
    state: 'in_flight',
    handleHash: randomId('h_'),
    reservationId: randomId('r_'),
    tool: 'fetch_readable',
    sku: SKU,
    cost: 1,
    charge: 'success',
    deadline: f.clock.now() + 20_000,
    remaining: null,
    fingerprint: 'tb_s_abcd..wxyz',
    startedAt: f.clock.now(),
    ...overrides,
  });

  behaviour('a registered priced request reads back; 5 and "5" are different requests; other sessions do not see it', async (f, t) => {
    const session = randomId('s_');
    const record = pricedRecord(f);
    await f.store.registerPricedRequest({ session, requestId: '5' }, record, HOUR);
    t.same(await f.store.getPricedRequest({ session, requestId: '5' }), record);
    t.equal(await f.store.getPricedRequest({ session, requestId: '"5"' }), null, 'the string id "5" is another request');
    t.equal(await f.store.getPricedRequest({ session: randomId('s_'), requestId: '5' }), null, 'another session');
  });

  behaviour('concluding an in-flight request sets its state once; a concluded request keeps its state', async (f, t) => {
    const session = randomId('s_');
    await f.store.registerPricedRequest({ session, requestId: '1' }, pricedRecord(f), HOUR);
    await f.store.registerPricedRequest({ session, requestId: '2' }, pricedRecord(f), HOUR);
    t.match(await f.store.concludePricedRequest({ session, requestId: '1' }, 'committed', 7), { state: 'committed', remaining: 7 });
    t.match(await f.store.concludePricedRequest({ session, requestId: '1' }, 'released', null), { state: 'committed', remaining: 7 }, 'committed stays committed');
    t.match(await f.store.concludePricedRequest({ session, requestId: '2' }, 'released', null), { state: 'released', remaining: null });
    t.match(await f.store.concludePricedRequest({ session, requestId: '2' }, 'committed', 3), { state: 'released', remaining: null }, 'released stays released');
    t.equal(await f.store.concludePricedRequest({ session, requestId: '3' }, 'committed', 1), null, 'an unknown request is null');
  });

  behaviour('concurrent conclusions of one priced request: exactly one state wins and every caller sees it', async (f, t) => {
    const session = randomId('s_');
    await f.store.registerPricedRequest({ session, requestId: '9' }, pricedRecord(f), HOUR);
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => f.store.concludePricedRequest({ session, requestId: '9' }, i % 2 === 0 ? 'committed' : 'released', i % 2 === 0 ? 4 : null)));
    const states = new Set(results.map((r) => r?.state));
    t.equal(states.size, 1, 'one state for every caller');
    t.equal((await f.store.getPricedRequest({ session, requestId: '9' }))?.state, [...states][0]);
  });

  timedBehaviour('a priced request is forgotten once its session lifetime passed; registering again extends it', async (f, t) => {
    const session = randomId('s_');
    const short = TIMED_TTL_MS / 10;
    await f.store.registerPricedRequest({ session, requestId: '1' }, pricedRecord(f), TIMED_TTL_MS);
    await f.store.registerPricedRequest({ session, requestId: '2' }, pricedRecord(f), short);
    await f.passTime(TIMED_TTL_MS - TIMED_SLACK_MS); // well past `short`, TIMED_SLACK_MS short of the session's life
    t.ok(await f.store.getPricedRequest({ session, requestId: '2' }), 'a shorter ttl never shortens the session');
    await f.passTime(TIMED_SLACK_MS + 100);
    t.equal(await f.store.getPricedRequest({ session, requestId: '1' }), null);
    t.equal(await f.store.concludePricedRequest({ session, requestId: '1' }, 'committed', 1), null);
  });

  // ── end of the priced-request registry ─────────────────────────────────────────────────────────

  // ── x402 authorization claims (SPEC §19) ───────────────────────────────────────────────────────

  behaviour('a payment nonce is claimed once, and the record says what claimed it', async (f, t) => {
    const claim = nonceClaim(f.clock);
    t.equal(await f.store.claimPaymentNonce(claim), true);
    t.equal(await f.store.claimPaymentNonce({ ...claim, sku: 'other', claimedAt: claim.claimedAt + 1 }), false, 'a second claim loses');
    t.match(await f.store.getPaymentNonce(claim), { ...claim, state: 'claimed', transaction: null, finishedAt: null, sku: SKU });
    f.clock.advance(9 * 60_000);
    t.equal(await f.store.claimPaymentNonce(claim), false, 'still claimed before expiresAt');
  });

  behaviour('letter case never makes a second key for one authorization', async (f, t) => {
    const claim = nonceClaim(f.clock);
    t.equal(await f.store.claimPaymentNonce(claim), true);
    const shouted = { ...claim, payer: claim.payer.toUpperCase().replace('0X', '0x'), asset: claim.asset.toUpperCase().replace('0X', '0x'), nonce: claim.nonce.toUpperCase().replace('0X', '0x') };
    t.equal(await f.store.claimPaymentNonce(shouted), false);
    t.match(await f.store.getPaymentNonce(shouted), { payer: claim.payer, nonce: claim.nonce });
  });

  behaviour('claims of another nonce, payer, asset or network are independent', async (f, t) => {
    const claim = nonceClaim(f.clock);
    t.equal(await f.store.claimPaymentNonce(claim), true);
    const others = [
      { ...claim, nonce: nonceClaim(f.clock).nonce },
      { ...claim, payer: nonceClaim(f.clock).payer },
      { ...claim, asset: '0x833589fcd6edb6e08f4c7c32d4f71b54bda02913' },
      { ...claim, network: 'eip155:8453' },
    ];
    t.same(await Promise.all(others.map((other) => f.store.claimPaymentNonce(other))), [true, true, true, true]);
  });

  behaviour('finishPaymentNonce records the outcome once; an unknown claim is false', async (f, t) => {
    const claim = nonceClaim(f.clock);
    t.equal(await f.store.finishPaymentNonce(claim, { state: 'settled', transaction: '0xabc', at: f.clock.now() }), false, 'nothing to finish yet');
    await f.store.claimPaymentNonce(claim);
    const at = f.clock.now() + 1_500;
    t.equal(await f.store.finishPaymentNonce(claim, { state: 'settled', transaction: `0x${'ab'.repeat(32)}`, at }), true);
    t.equal(await f.store.finishPaymentNonce(claim, { state: 'settle_failed', transaction: null, at }), false, 'a finished claim stays as it ended');
    t.match(await f.store.getPaymentNonce(claim), { state: 'settled', transaction: `0x${'ab'.repeat(32)}`, finishedAt: at });
    t.equal(await f.store.claimPaymentNonce(claim), false, 'a finished claim still refuses the nonce');
    const unsettled = nonceClaim(f.clock);
    await f.store.claimPaymentNonce(unsettled);
    t.equal(await f.store.finishPaymentNonce(unsettled, { state: 'not_settled', transaction: null, at }), true);
    t.match(await f.store.getPaymentNonce(unsettled), { state: 'not_settled', transaction: null });
  });

  // ── the durable outbox's records (SPEC §21) ────────────────────────────────────────────────────

  const settlementOf = (claim: PaymentNonceClaim, at: number) => ({ network: claim.network, asset: claim.asset, payer: claim.payer, nonce: claim.nonce, sku: claim.sku, tool: claim.tool, amount: claim.amount, transaction: `0x${'cd'.repeat(32)}`, at });
  const x402Rows = async (f: StoreFixture, payer: string) => (await f.store.readLedger({ kind: 'payer', payer }, { limit: 100 })).filter((entry) => entry.kind === 'x402_settle');

  behaviour('recordX402Settlement settles a claim and writes one x402_settle entry, however often it is written', async (f, t) => {
    const claim = nonceClaim(f.clock);
    await f.store.claimPaymentNonce(claim);
    const record = settlementOf(claim, f.clock.now());
    t.equal(await f.store.recordX402Settlement(record), true, 'the first write records it');
    t.match(await f.store.getPaymentNonce(claim), { state: 'settled', transaction: record.transaction });
    t.same(await Promise.all([1, 2, 3].map(() => f.store.recordX402Settlement(record))), [false, false, false], 'a retried write (lost reply, outbox drain, another process) is a no-op');
    const rows = await x402Rows(f, claim.payer);
    t.equal(rows.length, 1, 'one entry');
    t.match(rows[0], { ref: claim.nonce, tool: claim.tool, amount: claim.amount, network: claim.network, asset: claim.asset, payer: claim.payer, transaction: record.transaction, credits: 0 });
  });

  behaviour('recordX402Settlement writes the entry when the claim is gone, and not again after finishPaymentNonce recorded it', async (f, t) => {
    const lost = nonceClaim(f.clock);
    t.equal(await f.store.recordX402Settlement(settlementOf(lost, f.clock.now())), true, 'the money moved: recorded without its claim record');
    t.equal((await x402Rows(f, lost.payer)).length, 1);
    const finished = nonceClaim(f.clock);
    await f.store.claimPaymentNonce(finished);
    await f.store.finishPaymentNonce(finished, { state: 'settled', transaction: `0x${'cd'.repeat(32)}`, at: f.clock.now() });
    t.equal(await f.store.recordX402Settlement(settlementOf(finished, f.clock.now())), false, 'already settled by the direct write');
    t.equal((await x402Rows(f, finished.payer)).length, 1, 'still one entry');
  });

  behaviour('200 concurrent claims of one nonce: exactly one wins', async (f, t) => {
    t.equal(await concurrentNonceClaims([f.store], nonceClaim(f.clock)), 1);
  });
  // ── retried writes (SPEC §21): a re-run of the same attempt answers as the first run did ────────

  behaviour('a script re-run answers as the first run did: reserve, commit, release', async (f, t) => {
    const handleHash = await f.handle({ credits: 5 });
    const first = f.spendRequest(handleHash, { cost: 2, attempt: 'a-reserve' });
    const reserved = await f.store.reserve(first);
    t.same(reserved, { kind: 'reserved', remaining: 3 });
    t.same(await f.store.reserve(first), reserved, 'the re-run answers the same');
    t.equal(await f.balance(handleHash), 3, 'and reserved once');
    t.equal(await f.store.commit(handleHash, first.reservationId, 'fetch_readable', 'a-commit'), 3);
    await f.spend(handleHash, { cost: 1 });
    t.equal(await f.store.commit(handleHash, first.reservationId, 'fetch_readable', 'a-commit'), 3, 'a re-run of the commit answers its first balance');
    t.equal(await f.store.commit(handleHash, first.reservationId, 'fetch_readable'), null, 'another caller still sees it committed');
    const second = f.spendRequest(handleHash, { cost: 1, attempt: 'b-reserve' });
    await f.store.reserve(second);
    t.equal(await f.store.release(handleHash, second.reservationId, 'b-release'), 2);
    t.equal(await f.store.release(handleHash, second.reservationId, 'b-release'), 2, 'a re-run of the release answers the same');
    t.equal(await f.store.release(handleHash, second.reservationId), null);
    t.equal(await f.balance(handleHash), 2);
    const spends = (await f.store.ledgerTail(handleHash, 10)).filter((entry) => entry.kind === 'spend');
    t.equal(spends.length, 1, 'one spend entry for the committed reservation');
  });

  behaviour('a script re-run answers as the first run did: an operator grant', async (f, t) => {
    const handleHash = await f.handle();
    t.equal(await f.store.grantCredits(handleHash, SKU, 4, 'goodwill', 'g-1'), 4);
    t.equal(await f.store.grantCredits(handleHash, SKU, 4, 'goodwill', 'g-1'), 4);
    t.equal(await f.balance(handleHash), 4, 'granted once');
    t.equal(await f.store.grantCredits(handleHash, SKU, 4, 'goodwill', 'g-2'), 8, 'another attempt is another grant');
  });

  behaviour('a script re-run answers as the first run did: begin a charge, attach its link, claim it', async (f, t) => {
    const handleHash = await f.handle();
    const request = { handleHash, sku: SKU, nonce: randomId('n_'), snapshot: SNAPSHOT, now: f.clock.now(), ttlMs: CHARGE_TTL, firstPollDelayMs: 3_000, attempt: 'c-begin' };
    const begun = await f.store.beginCharge(request);
    t.equal(begun.kind, 'begun');
    t.same(await f.store.beginCharge(request), begun, 'the opener is still the opener');
    const link = { providerRef: randomId('ref_'), checkoutUrl: 'https://pay.test/x' };
    const attached = await f.store.attachLink(handleHash, request.nonce, link, 'c-attach');
    t.match(attached, { status: 'pending' });
    t.same(await f.store.attachLink(handleHash, request.nonce, link, 'c-attach'), attached, 'the link is still attached for the re-run');
    t.equal(await f.store.attachLink(handleHash, request.nonce, link), null, 'another caller cannot attach again');
    const claim = { handleHash, nonce: request.nonce, outcome: 'settled' as const, credits: 10, receivedAmount: '5', attempt: 'c-claim' };
    const claimed = await f.store.claimSettlement(claim);
    t.match(claimed, { claimed: true, balance: 10 });
    t.same(await f.store.claimSettlement(claim), claimed, 'the re-run is told it claimed');
    t.match(await f.store.claimSettlement({ ...claim, attempt: 'other' }), { claimed: false }, 'another observer is not');
    t.equal(await f.balance(handleHash), 10, 'granted once');
    const grants = (await f.store.ledgerTail(handleHash, 10)).filter((entry) => entry.kind === 'grant');
    t.equal(grants.length, 1, 'one grant entry');
  });

  behaviour('a script re-run answers as the first run did: x402 nonce claim and settle record', async (f, t) => {
    const claim = nonceClaim(f.clock, { attempt: 'x-claim' });
    t.equal(await f.store.claimPaymentNonce(claim), true);
    t.equal(await f.store.claimPaymentNonce(claim), true, 'the re-run still holds the claim');
    t.equal(await f.store.claimPaymentNonce({ ...claim, attempt: 'x-other' }), false, 'another claim is a replay');
    const outcome = { state: 'settled' as const, transaction: `0x${'cd'.repeat(32)}`, at: f.clock.now() };
    t.equal(await f.store.finishPaymentNonce(claim, outcome, 'x-finish'), true);
    t.equal(await f.store.finishPaymentNonce(claim, outcome, 'x-finish'), true, 'the re-run is told it recorded the outcome');
    t.equal(await f.store.finishPaymentNonce(claim, outcome), false);
    const entries = await f.store.readLedger({ kind: 'payer', payer: claim.payer }, { limit: 10 });
    t.equal(entries.filter((entry) => entry.kind === 'x402_settle').length, 1, 'one x402_settle entry');
  });

  behaviour('an orphan payment is recorded once per provider ref and listed oldest first', async (f, t) => {
    const now = f.clock.now();
    t.equal(await f.store.recordOrphanPayment({ providerRef: 'ref-b', receivedAmount: '5', noticedAt: now + 10, source: 'webhook' }), true);
    t.equal(await f.store.recordOrphanPayment({ providerRef: 'ref-a', receivedAmount: null, noticedAt: now, source: 'dev' }), true);
    t.equal(await f.store.recordOrphanPayment({ providerRef: 'ref-b', receivedAmount: '9', noticedAt: now + 20, source: 'webhook' }), false, 'the first record stays');
    t.same(await f.store.listOrphanPayments(), [
      { providerRef: 'ref-a', receivedAmount: null, noticedAt: now, source: 'dev' },
      { providerRef: 'ref-b', receivedAmount: '5', noticedAt: now + 10, source: 'webhook' },
    ]);
  });

  // ── ledger (SPEC §17): ledger-conformance.ts ──────────────────────────────────────────────────────
  ledgerBehaviours(behaviour);

  // ── budgets and allowances (SPEC §23): quota-conformance.ts ───────────────────────────────────────
  quotaBehaviours(behaviour);

  // ── sessions bound to principals (SPEC §20) ────────────────────────────────────────────────────

  behaviour('bindSession: the first principal wins and the binding never changes', async (f, t) => {
    const session = randomId('s_');
    t.equal(await f.store.sessionPrincipal(session, HOUR), null, 'an unknown session is nobody\'s');
    t.equal(await f.store.bindSession(session, 'sub:alice', HOUR), 'sub:alice');
    t.equal(await f.store.bindSession(session, 'client:alice', HOUR), 'sub:alice', 'a second binding is refused: the first owner is returned');
    t.equal(await f.store.bindSession(session, 'sub:alice', HOUR), 'sub:alice');
    t.equal(await f.store.sessionPrincipal(session, HOUR), 'sub:alice');
    t.equal(await f.store.sessionPrincipal(randomId('s_'), HOUR), null, 'another session is unbound');
  });

  timedBehaviour('a session binding lives ttlMs from its last look-up, then the session is nobody\'s', async (f, t) => {
    const session = randomId('s_');
    const ttl = TIMED_TTL_MS;
    // Each look-up comes TIMED_SLACK_MS before the binding would end; the two waits add up past one ttl,
    // so the second look-up finds the binding only because the first one slid it.
    const step = ttl - TIMED_SLACK_MS;
    await f.store.bindSession(session, 'sub:alice', ttl);
    await f.passTime(step);
    t.equal(await f.store.sessionPrincipal(session, ttl), 'sub:alice');
    await f.passTime(step);
    t.equal(await f.store.sessionPrincipal(session, ttl), 'sub:alice', 'the look-up slid it');
    await f.passTime(ttl + 100);
    t.equal(await f.store.sessionPrincipal(session, ttl), null, 'gone after ttlMs without a look-up');
    t.equal(await f.store.bindSession(session, 'sub:bob', ttl), 'sub:bob', 'an expired binding can be taken again');
  });

  behaviour('concurrent bindings of one session by different principals: exactly one wins and all see it', async (f, t) => {
    const session = randomId('s_');
    const owners = await Promise.all(Array.from({ length: 50 }, (_, i) => f.store.bindSession(session, `sub:user-${i}`, HOUR)));
    t.equal(new Set(owners).size, 1, 'one owner');
    t.equal(await f.store.sessionPrincipal(session, HOUR), owners[0]);
  });
  // ── end of sessions bound to principals ────────────────────────────────────────────────────────

  // ── idempotent results (SPEC §24) ──────────────────────────────────────────────────────────────
  const claim = (scope: string, owner = randomId('o_'), runningTtlMs = HOUR) => ({ scope, owner, runningTtlMs });

  behaviour('beginIdempotent: the first call of a slot runs; the same scope waits, then gets the kept result byte for byte', async (f, t) => {
    const slot = randomId('slot_');
    const first = claim('scope-a');
    t.same(await f.store.beginIdempotent(slot, first), { kind: 'first' });
    t.same(await f.store.beginIdempotent(slot, claim('scope-a')), { kind: 'running' }, 'a second attempt while the first runs');
    const result = JSON.stringify({ content: [{ type: 'text', text: 'r\u00e9sum\u00e9 \u2014 "quoted"' }], _meta: { 'xyz.tollbooth/receipt': { sku: SKU, cost: 1, remaining: 4 } } });
    t.equal(await f.store.finishIdempotent(slot, first.owner, result, HOUR), true);
    const done = await f.store.beginIdempotent(slot, claim('scope-a'));
    t.same(done, { kind: 'done', result });
    t.equal(done.kind === 'done' && done.result, result, 'the same bytes');
    t.same(await f.store.beginIdempotent(randomId('slot_'), claim('scope-a')), { kind: 'first' }, 'another slot is independent');
  });

  behaviour('beginIdempotent: the same slot with another scope conflicts, while running and once done', async (f, t) => {
    const slot = randomId('slot_');
    const first = claim('scope-a');
    await f.store.beginIdempotent(slot, first);
    t.same(await f.store.beginIdempotent(slot, claim('scope-b')), { kind: 'conflict' });
    await f.store.finishIdempotent(slot, first.owner, '{"ok":true}', HOUR);
    t.same(await f.store.beginIdempotent(slot, claim('scope-b')), { kind: 'conflict' });
  });

  behaviour('abandonIdempotent: a released call keeps nothing and its retry runs anew; only its own attempt can abandon', async (f, t) => {
    const slot = randomId('slot_');
    const first = claim('scope-a');
    await f.store.beginIdempotent(slot, first);
    await f.store.abandonIdempotent(slot, randomId('o_'));
    t.same(await f.store.beginIdempotent(slot, claim('scope-a')), { kind: 'running' }, 'another owner cannot abandon it');
    await f.store.abandonIdempotent(slot, first.owner);
    await f.store.abandonIdempotent(slot, first.owner);
    const retry = claim('scope-b');
    t.same(await f.store.beginIdempotent(slot, retry), { kind: 'first' }, 'the slot is free again, for any scope');
    t.equal(await f.store.finishIdempotent(slot, first.owner, '{"late":true}', HOUR), false, 'the abandoned attempt cannot finish it');
    t.equal(await f.store.finishIdempotent(slot, retry.owner, '{"n":2}', HOUR), true);
    await f.store.abandonIdempotent(slot, retry.owner);
    t.same(await f.store.beginIdempotent(slot, claim('scope-b')), { kind: 'done', result: '{"n":2}' }, 'a kept result is never abandoned');
  });

  behaviour('beginIdempotent: the same attempt asking again (a lost reply) is still first', async (f, t) => {
    const slot = randomId('slot_');
    const first = claim('scope-a');
    t.same(await f.store.beginIdempotent(slot, first), { kind: 'first' });
    t.same(await f.store.beginIdempotent(slot, first), { kind: 'first' });
    t.equal(await f.store.finishIdempotent(slot, first.owner, '{}', HOUR), true);
    t.equal(await f.store.finishIdempotent(slot, first.owner, '{}', HOUR), true, 'finishing twice is harmless');
    t.same(await f.store.beginIdempotent(slot, first), { kind: 'done', result: '{}' });
  });

  // Real time on Redis (TTLs run on the server's clock): 2 s TTLs, every check ≥ 800 ms from an edge.
  timedBehaviour('an in-flight marker ends after runningTtlMs (a crashed call); a kept result after ttlMs', async (f, t) => {
    const slot = randomId('slot_');
    const crashed = claim('scope-a', randomId('o_'), 2_000);
    await f.store.beginIdempotent(slot, crashed);
    await f.passTime(2_800);
    const next = claim('scope-a', randomId('o_'), 2_000);
    t.same(await f.store.beginIdempotent(slot, next), { kind: 'first' }, 'the marker of a call that never concluded is gone');
    t.equal(await f.store.finishIdempotent(slot, crashed.owner, '{"old":1}', 2_000), false, 'the crashed attempt cannot finish it');
    t.equal(await f.store.finishIdempotent(slot, next.owner, '{"new":1}', 4_000), true);
    await f.passTime(2_200);
    t.same(await f.store.beginIdempotent(slot, claim('scope-a')), { kind: 'done', result: '{"new":1}' }, "the result outlives the marker's TTL");
    await f.passTime(2_600);
    t.same(await f.store.beginIdempotent(slot, claim('scope-a')), { kind: 'first' }, 'gone after ttlMs');
  });

  behaviour('concurrent beginIdempotent on one slot: exactly one is first, every other waits', async (f, t) => {
    t.same(await concurrentIdempotentBegins(f.store, 50), { first: 1, running: 49, other: 0 });
  });
  // ── end of idempotent results ──────────────────────────────────────────────────────────────────

  suite.test('timed behaviours (real time, side by side)', { jobs: timed.length }, async (group) => {
    for (const [title, body] of timed) group.test(title, { buffered: true }, run(body));
  });
}

// ── idempotent results (SPEC §24): the concurrency check, shared with negative-control.test.ts ──────

/** `calls` concurrent first looks at one fresh slot, all with the same scope, tallied by answer. */
export async function concurrentIdempotentBegins(store: Store, calls: number): Promise<{ first: number; running: number; other: number }> {
  const slot = randomId('slot_');
  const answers = await Promise.all(Array.from({ length: calls }, () => store.beginIdempotent(slot, { scope: 'scope-a', owner: randomId('o_'), runningTtlMs: HOUR })));
  const first = answers.filter((a) => a.kind === 'first').length;
  const running = answers.filter((a) => a.kind === 'running').length;
  return { first, running, other: calls - first - running };
}
