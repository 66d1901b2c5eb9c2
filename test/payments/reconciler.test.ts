// The reconciler (SPEC §7.6) over the memory store and the Moove provider against the local fake,
// with one injected clock for the store, the settler, the reconciler and the fake (so links expire
// when the test says). Jitter is injected where the schedule itself is the behaviour.
import { Writable } from 'node:stream';
import t from 'tap';
import { createLogger } from '../../src/observability/logger.js';
import { createMetrics, type Metrics } from '../../src/observability/metrics.js';
import { MooveProvider } from '../../src/payments/moove.js';
import { Reconciler, type TickReport } from '../../src/payments/reconciler.js';
import { FINAL_LOOK_MS, Settler } from '../../src/payments/settle.js';
import { mintNonce } from '../../src/paywall/handles.js';
import { MemoryStore } from '../../src/store/memory.js';
import { quotaWindowStart, type ChargeRecord } from '../../src/store/store.js';
import { startMooveFake, type MooveFake } from '../helpers/moove-fake.js';
import { wallClock } from '../helpers/clock.js';

type Tap = Pick<typeof t, 'teardown'>;

const SECOND = 1_000;
const MINUTE = 60 * SECOND;
const CHARGE_TTL = 60 * MINUTE;
const HOUR_MS = 60 * MINUTE;
const PACK = { label: 'Research tools', amount: '5.00', currency: 'USDC', credits: 250, tool: 'fetch_readable' };

interface Harness {
  fake: MooveFake;
  provider: MooveProvider;
  store: MemoryStore;
  settler: Settler;
  metrics: Metrics;
  reconciler: Reconciler;
  now: () => number;
  travel: (ms: number) => void;
  setTime: (at: number) => void;
  logs: () => Array<Record<string, unknown>>;
  /** A live handle with a pending charge on a real link at the fake. */
  openCharge: () => Promise<ChargeRecord>;
  reads: () => number;
  newReconciler: () => Reconciler;
}

async function harness(t: Tap, options: { random?: () => number } = {}): Promise<Harness> {
  let time = Date.UTC(2026, 0, 1);
  const now = (): number => time;
  const fake = await startMooveFake({ apiKeys: ['test-key'], clock: now });
  t.teardown(() => fake.close());
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(...chunk.toString('utf8').split('\n').filter(Boolean));
      done();
    },
  });
  const logger = createLogger('info', sink);
  const metrics = createMetrics(async () => 0);
  const provider = new MooveProvider({ apiKey: 'test-key', baseUrl: fake.url, logger, metrics, random: () => 0, pacing: { ratePerSecond: 1_000, burst: 1_000 } });
  t.teardown(() => provider.close());
  const store = new MemoryStore({ now });
  const settler = new Settler({ store, provider, policy: { tolerance: 0.005, minimumFraction: 0.1 }, metrics, logger, clock: wallClock(now), random: options.random ?? (() => 0.5) });
  const newReconciler = (): Reconciler => new Reconciler({ store, provider, settler, metrics, logger, intervalMs: 60 * SECOND, clock: wallClock(now) });
  return {
    fake,
    provider,
    store,
    settler,
    metrics,
    reconciler: newReconciler(),
    now,
    travel: (ms) => {
      time += ms;
    },
    setTime: (at) => {
      time = at;
    },
    logs: () => lines.map((line) => JSON.parse(line) as Record<string, unknown>),
    reads: () => fake.calls.filter((call) => call.method === 'GET').length,
    newReconciler,
    openCharge: async () => {
      const handleHash = `hash-${mintNonce()}`;
      await store.createHandle({ handleHash, fingerprint: 'tb_s_test..abcd', principal: null, ttlMs: 30 * 24 * 60 * MINUTE });
      const begun = await store.beginCharge({ handleHash, sku: 'research', nonce: mintNonce(), snapshot: PACK, now: now(), ttlMs: CHARGE_TTL, firstPollDelayMs: 3 * SECOND });
      const link = await provider.openCharge({ nonce: begun.charge.nonce, sku: 'research', ...PACK, expiresAt: begun.charge.expiresAt });
      const attached = await store.attachLink(handleHash, begun.charge.nonce, link);
      if (!attached) throw new Error('the charge did not take its link');
      return attached;
    },
  };
}

const linkOf = (charge: ChargeRecord): string => charge.providerRef as string;

async function statusOf(h: Harness, charge: ChargeRecord): Promise<string | undefined> {
  return (await h.store.getCharge(charge.handleHash, charge.nonce))?.status;
}

// ---------------------------------------------------------------------------------------------
// Schedule

t.test('schedule: polls ~3 s after opening, then 6 s, 12 s, 24 s, 48 s after the previous, capped at 60 s', async (t) => {
  const h = await harness(t); // jitter factor exactly 1
  const charge = await h.openCharge();
  const opened = charge.openedAt;
  const pollTimes: number[] = [];
  let due = charge.nextPollAt;
  for (let i = 0; i < 7; i++) {
    h.setTime(due - 1);
    await h.reconciler.tick();
    const before = h.reads();
    h.setTime(due);
    const report = await h.reconciler.tick();
    t.equal(report.polled, 1, `poll ${i + 1} happens when due`);
    t.equal(h.reads(), before + 1, `poll ${i + 1} reads the link once`);
    pollTimes.push((due - opened) / SECOND);
    due = (await h.store.getCharge(charge.handleHash, charge.nonce))!.nextPollAt;
  }
  t.same(pollTimes, [3, 9, 21, 45, 93, 153, 213], 'seconds after opening: gaps 6, 12, 24, 48, 60, 60');
  t.equal(h.reads(), 7, 'no poll before it was due');
});

t.test('schedule: each gap carries ±30% jitter', async (t) => {
  const low = await harness(t, { random: () => 0 });
  const high = await harness(t, { random: () => 0.999_999 });
  const charge = await low.openCharge();
  const at = low.now();
  const gaps = [6, 12, 24, 48, 60, 60, 60];
  gaps.forEach((gap, pollCount) => {
    const lowGap = low.settler.nextPollAt({ ...charge, pollCount }, at) - at;
    const highGap = high.settler.nextPollAt({ ...charge, pollCount }, at) - at;
    t.equal(lowGap, Math.round(gap * SECOND * 0.7), `after poll ${pollCount + 1}: shortest gap is 70% of ${gap} s`);
    t.ok(highGap <= gap * SECOND * 1.3 && highGap > gap * SECOND * 1.29, `after poll ${pollCount + 1}: longest gap is 130% of ${gap} s`);
  });
});

t.test('schedule: a charge that is not due is not read (a due-time index, not a scan)', async (t) => {
  const h = await harness(t);
  await h.openCharge();
  h.travel(2 * SECOND);
  const report = await h.reconciler.tick();
  t.same({ leader: report.leader, polled: report.polled }, { leader: true, polled: 0 });
  t.equal(h.reads(), 0);
});

// ---------------------------------------------------------------------------------------------
// Abandoning expired charges

t.test('abandon: a charge past its TTL whose link Moove reads inactive is abandoned', async (t) => {
  const h = await harness(t);
  const charge = await h.openCharge();
  h.travel(CHARGE_TTL + SECOND);
  const report = await h.reconciler.tick();
  t.equal(report.abandoned, 1);
  t.equal(await statusOf(h, charge), 'abandoned');
  const expired = (await h.metrics.settlements.get()).values.find((v) => v.labels.result === 'expired');
  t.equal(expired?.value, 1, 'tollbooth_settlements_total{result="expired"}');
});

t.test('abandon: past its TTL while Moove still reads the link active (lazy sweep) is abandoned too', async (t) => {
  const h = await harness(t);
  h.fake.inactiveLagMs = 10 * MINUTE;
  const charge = await h.openCharge();
  h.travel(CHARGE_TTL + SECOND);
  t.equal((await h.reconciler.tick()).abandoned, 1);
  t.equal(await statusOf(h, charge), 'abandoned');
});

t.test('abandon: a charge past its TTL that Moove says completed is granted, not abandoned', async (t) => {
  const h = await harness(t);
  const charge = await h.openCharge();
  await h.fake.pay(linkOf(charge), '5.00');
  h.travel(CHARGE_TTL + SECOND);
  const report = await h.reconciler.tick();
  t.same({ granted: report.granted, abandoned: report.abandoned }, { granted: 1, abandoned: 0 });
  t.equal(await statusOf(h, charge), 'settled');
  t.equal((await h.store.getHandle(charge.handleHash))?.balances.research, 250);
});

t.test('abandon: a charge inside its TTL whose link is still active stays pending', async (t) => {
  const h = await harness(t);
  const charge = await h.openCharge();
  h.travel(CHARGE_TTL - MINUTE);
  const report = await h.reconciler.tick();
  t.same({ polled: report.polled, abandoned: report.abandoned }, { polled: 1, abandoned: 0 });
  t.equal(await statusOf(h, charge), 'pending');
});

t.test('abandon: an underpaid charge is never abandoned; it stays listed for the operator', async (t) => {
  const h = await harness(t);
  const charge = await h.openCharge();
  await h.fake.pay(linkOf(charge), '0.10');
  h.travel(3 * SECOND);
  await h.reconciler.tick();
  t.equal(await statusOf(h, charge), 'underpaid');
  h.travel(CHARGE_TTL);
  t.equal((await h.reconciler.tick()).abandoned, 0);
  t.same((await h.store.listCharges('underpaid')).map((c) => c.nonce), [charge.nonce]);
});

// ---------------------------------------------------------------------------------------------
// One replica at a time

t.test('lease: of two reconcilers on one store, exactly one leads each tick', async (t) => {
  const h = await harness(t);
  const other = h.newReconciler();
  await h.openCharge();
  for (let i = 0; i < 3; i++) {
    h.travel(3 * SECOND);
    const reports: TickReport[] = await Promise.all([h.reconciler.tick(), other.tick()]);
    t.equal(reports.filter((r) => r.leader).length, 1, `tick ${i + 1}: one leader`);
  }
  t.ok(h.reads() <= 3, 'the charge was read at most once per tick');
});

t.test('lease: the leader keeps the lease while it ticks; another takes over once it stops', async (t) => {
  const h = await harness(t);
  const other = h.newReconciler();
  t.equal((await h.reconciler.tick()).leader, true, 'first leader');
  h.travel(3 * SECOND);
  t.equal((await other.tick()).leader, false, 'the other is refused while the lease is fresh');
  t.equal((await h.reconciler.tick()).leader, true, 'the leader renews');
  h.travel(3 * 3 * SECOND + 1); // the lease lasts three tick periods
  t.equal((await other.tick()).leader, true, 'the leader went quiet: the other takes over');
  t.equal((await h.reconciler.tick()).leader, false, 'and the old leader now waits');
});

// ---------------------------------------------------------------------------------------------
// Bounded batches and provider rate limits

t.test('batch: one tick polls at most 50 due charges; the next tick takes the rest', async (t) => {
  const h = await harness(t);
  for (let i = 0; i < 60; i++) await h.openCharge();
  h.travel(3 * SECOND);
  t.equal((await h.reconciler.tick()).polled, 50, 'first tick');
  t.equal(h.reads(), 50);
  t.equal((await h.reconciler.tick()).polled, 10, 'second tick');
  t.equal(h.reads(), 60);
});

t.test('rate limits: a read answered 429 is retried with backoff and the charge still settles', async (t) => {
  const h = await harness(t);
  const charge = await h.openCharge();
  await h.fake.pay(linkOf(charge), '5.00');
  h.fake.failNext(2, { status: 429 }, { method: 'GET' });
  h.travel(3 * SECOND);
  t.equal((await h.reconciler.tick()).granted, 1);
  t.equal(h.reads(), 3, 'two 429s, then the answer');
});

t.test('rate limits: when Moove keeps answering 429 the tick stops polling instead of working through the batch', async (t) => {
  const h = await harness(t);
  for (let i = 0; i < 5; i++) await h.openCharge();
  h.fake.failNext(1_000, { status: 429 }, { method: 'GET' });
  h.travel(3 * SECOND);
  const report = await h.reconciler.tick();
  t.equal(report.polled, 0);
  t.equal(h.reads(), 4, 'one charge, four tries, then the tick backs off');
  t.ok(h.logs().some((line) => line.evt === 'reconcile_rate_limited'), 'one line tells the operator why polling paused');
});

t.test('errors: a charge whose read fails is logged and read again at its next due time', async (t) => {
  const h = await harness(t);
  const charge = await h.openCharge();
  await h.fake.pay(linkOf(charge), '5.00');
  h.fake.failNext(4, { status: 503 }, { method: 'GET' });
  h.travel(3 * SECOND);
  const failed = await h.reconciler.tick();
  t.equal(failed.granted, 0);
  const line = h.logs().find((l) => l.evt === 'reconcile_error');
  t.ok(line, 'a reconcile_error line');
  t.notMatch(JSON.stringify(h.logs()), linkOf(charge), 'the link id is not logged');
  const next = (await h.store.getCharge(charge.handleHash, charge.nonce))!.nextPollAt;
  t.ok(next > h.now(), 'scheduled for later, not hammered');
  h.setTime(next);
  t.equal((await h.reconciler.tick()).granted, 1, 'settled on the next due poll');
});

// ---------------------------------------------------------------------------------------------
// Stale reservations (§6.5)

t.test('reservations: one whose call never concluded is released after callDeadline + 5 s, not before', async (t) => {
  const h = await harness(t);
  const charge = await h.openCharge();
  await h.store.grantCredits(charge.handleHash, 'research', 3);
  const callDeadline = 20 * SECOND;
  const start = h.now();
  const reserve = (reservationId: string, at: number) =>
    h.store.reserve({
      handleHash: charge.handleHash,
      principal: null,
      sku: 'research',
      cost: 1,
      reservationId,
      reservationDeadline: at + callDeadline + 5 * SECOND,
      ttlMs: 30 * 24 * 60 * MINUTE,
      bucket: { ratePerSecond: 100, burst: 100 },
    });
  t.equal((await reserve('crashed-call', start)).kind, 'reserved');
  h.travel(10 * SECOND);
  t.equal((await reserve('live-call', h.now())).kind, 'reserved');
  t.equal((await h.store.getHandle(charge.handleHash))?.balances.research, 1);

  h.setTime(start + callDeadline + 5 * SECOND);
  t.equal((await h.reconciler.tick()).released, 0, 'not at the deadline itself');
  h.travel(1);
  t.equal((await h.reconciler.tick()).released, 1, 'just after it: the crashed call only');
  t.equal((await h.store.getHandle(charge.handleHash))?.balances.research, 2, 'its credit is back');
  t.ok(h.logs().some((line) => line.evt === 'reservations_released' && line.count === 1), 'an operator line with the count');
  t.equal(await h.store.commit(charge.handleHash, 'live-call'), 2, 'the live call still commits');
});

t.test('stale: budget and allowance draws of a call that never finished are given back after its deadline', async (t) => {
  const h = await harness(t);
  const start = h.now();
  const day = 24 * 60 * MINUTE;
  const budget = { name: 'budget:daily', subject: 'p:alice', windowMs: day, windowStart: quotaWindowStart(start, day), calls: 1, credits: 1, maxCalls: 1, maxCredits: null };
  const allowance = { ...budget, name: 'allowance:trial', subject: 'c:203.0.113.7' };
  t.same(await h.store.reserveQuotas({ holdId: 'crashed-call', draws: [budget, allowance], deadline: start + 25 * SECOND }), { kind: 'held' });
  h.setTime(start + 25 * SECOND);
  t.equal((await h.reconciler.tick()).quotaHoldsReleased, 0, 'not at the deadline itself');
  h.travel(1);
  t.equal((await h.reconciler.tick()).quotaHoldsReleased, 2, 'just after it: one per subject drawn on');
  t.same((await h.store.quotaUsage([budget, allowance])).map((u) => u.calls), [0, 0], 'the draws are back');
  t.ok(h.logs().some((line) => line.evt === 'quota_holds_released' && line.count === 2), 'an operator line with the count');
});

// ---------------------------------------------------------------------------------------------
// Late payments, dead links and unreadable charges (§7.2, §7.6, revision 2)

const DAY = 24 * 60 * MINUTE;
const RETENTION = 7 * DAY;

/** Runs the reconciler at every due time of one charge until `until` (or the charge leaves the schedule); returns the poll times. */
async function pollUntil(h: Harness, charge: ChargeRecord, until: number): Promise<number[]> {
  const times: number[] = [];
  for (;;) {
    const current = await h.store.getCharge(charge.handleHash, charge.nonce);
    if (!current || current.nextPollAt > until || (current.status !== 'pending' && current.status !== 'abandoned')) return times;
    h.setTime(Math.max(h.now(), current.nextPollAt));
    const before = h.reads();
    await h.reconciler.tick();
    if (h.reads() === before) return times; // due but not polled: the reconciler no longer looks at it
    times.push(h.now());
  }
}

t.test('late payments: an abandoned charge keeps being polled, on a backoff capped at 1 h, and a late payment is granted', async (t) => {
  const h = await harness(t);
  const charge = await h.openCharge();
  h.setTime(charge.expiresAt + SECOND);
  await h.reconciler.tick();
  t.equal(await statusOf(h, charge), 'abandoned');
  const polls = await pollUntil(h, charge, charge.expiresAt + 3 * DAY);
  const gaps = polls.slice(1).map((at, i) => at - (polls[i] as number));
  t.ok(polls.length > 10, `polled ${polls.length} times over three days`);
  t.ok(gaps.every((gap) => gap >= MINUTE && gap <= HOUR_MS), 'every gap is between 1 min and 1 h');
  t.ok(gaps.slice(0, 5).every((gap, i) => i === 0 || gap > (gaps[i - 1] as number)), 'the first gaps grow');
  t.equal(Math.max(...gaps), HOUR_MS, 'capped at 1 h');
  await h.fake.pay(linkOf(charge), '5.00');
  h.setTime((await h.store.getCharge(charge.handleHash, charge.nonce))!.nextPollAt);
  t.equal((await h.reconciler.tick()).granted, 1, 'the late payment is granted, without any retry or webhook');
  t.equal((await h.store.getHandle(charge.handleHash))?.balances.research, 250);
  t.equal(await statusOf(h, charge), 'settled');
});

t.test('late payments: a payment on an older abandoned charge of a handle is granted, exactly once', async (t) => {
  const h = await harness(t);
  const older = await h.openCharge();
  h.setTime(older.expiresAt + SECOND);
  await h.reconciler.tick();
  // A second charge on the same handle, abandoned too: it is the handle's last charge.
  const begun = await h.store.beginCharge({ handleHash: older.handleHash, sku: 'research', nonce: mintNonce(), snapshot: PACK, now: h.now(), ttlMs: CHARGE_TTL, firstPollDelayMs: 3 * SECOND });
  const link = await h.provider.openCharge({ nonce: begun.charge.nonce, sku: 'research', ...PACK, expiresAt: begun.charge.expiresAt });
  const newer = (await h.store.attachLink(older.handleHash, begun.charge.nonce, link))!;
  h.setTime(newer.expiresAt + SECOND);
  await h.reconciler.tick();
  t.same([await statusOf(h, older), await statusOf(h, newer)], ['abandoned', 'abandoned']);

  await h.fake.pay(linkOf(older), '5.00');
  const grants = [];
  for (let i = 0; i < 30; i++) {
    h.travel(HOUR_MS);
    grants.push((await h.reconciler.tick()).granted);
  }
  t.equal(grants.reduce((a, b) => a + b, 0), 1, 'granted once');
  t.equal((await h.store.getHandle(older.handleHash))?.balances.research, 250);
  t.same([await statusOf(h, older), await statusOf(h, newer)], ['settled', 'abandoned']);
});

t.test('late payments: polling stops at the end of the retention window; an unreadable charge is then marked expired', async (t) => {
  const h = await harness(t);
  const readable = await h.openCharge();
  const unreadable = await h.openCharge();
  h.fake.remove(linkOf(unreadable)); // Moove no longer knows the link: 404 on every read
  h.setTime(readable.expiresAt + SECOND);
  await h.reconciler.tick();
  t.same([await statusOf(h, readable), await statusOf(h, unreadable)], ['abandoned', 'abandoned']);
  const insideRetention = readable.expiresAt + RETENTION - 1;
  const readablePolls = await pollUntil(h, readable, insideRetention);
  await pollUntil(h, unreadable, insideRetention); // polled in the same passes: both were opened at once
  t.ok(readablePolls.length > 150 && readablePolls.length < 250, `polled ${readablePolls.length} times over the retention window`);
  t.ok((readablePolls.at(-1) as number) >= readable.expiresAt + RETENTION - FINAL_LOOK_MS, 'the last look is in the last hour of the retention window');
  t.equal(await statusOf(h, readable), 'abandoned', 'a readable, unpaid charge just ends');
  t.equal(await statusOf(h, unreadable), 'expired', 'one never readable is marked expired');
  t.same((await h.store.listCharges('expired')).map((c) => c.nonce), [unreadable.nonce], 'listed for the operator');
  h.setTime(readable.expiresAt + RETENTION + DAY);
  const reads = h.reads();
  await h.reconciler.tick();
  t.equal(h.reads(), reads, 'nothing is polled after the retention window');
  t.same((await h.store.listCharges('expired')).map((c) => c.nonce), [unreadable.nonce], 'the expired charge is still listed a day later');
  t.ok(h.logs().some((line) => line.evt === 'charge_expired'), 'an operator line says a charge was never readable');
});

t.test('unreadable: a pending charge whose provider read keeps failing is abandoned once past its TTL, then marked expired', async (t) => {
  const h = await harness(t);
  const charge = await h.openCharge();
  h.fake.failNext(100_000, { status: 500 }, { method: 'GET' });
  h.travel(3 * SECOND);
  await h.reconciler.tick();
  t.equal(await statusOf(h, charge), 'pending', 'inside its TTL a failing read changes nothing');
  h.setTime(charge.expiresAt + SECOND);
  await pollUntil(h, charge, charge.expiresAt + 2 * MINUTE);
  t.equal(await statusOf(h, charge), 'abandoned', 'past its TTL it is abandoned though the provider cannot be read');
  await pollUntil(h, charge, charge.expiresAt + RETENTION);
  t.equal(await statusOf(h, charge), 'expired', 'still unreadable at the end of the retention window: expired');
});

t.test('dead link: a link Moove reports inactive before our TTL is abandoned at once', async (t) => {
  const h = await harness(t);
  const charge = await h.openCharge();
  h.fake.expire(linkOf(charge));
  h.travel(3 * SECOND);
  t.equal((await h.reconciler.tick()).abandoned, 1);
  t.equal(await statusOf(h, charge), 'abandoned');
  t.ok(charge.expiresAt > h.now() + 50 * MINUTE, 'long before its TTL');
  t.equal(await h.store.countPendingCharges(), 0, 'no longer pending');
});

t.test('dead link: a link Moove answers 404 for before our TTL is abandoned at once', async (t) => {
  const h = await harness(t);
  const charge = await h.openCharge();
  h.fake.remove(linkOf(charge));
  h.travel(3 * SECOND);
  t.equal((await h.reconciler.tick()).abandoned, 1);
  t.equal(await statusOf(h, charge), 'abandoned');
});
