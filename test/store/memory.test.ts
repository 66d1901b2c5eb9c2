// MemoryStore: the shared conformance suite, then what only the memory store promises (its clock
// drives buckets and leases too, and it sweeps what can no longer matter so memory stays bounded).
import t from 'tap';
import { MemoryStore } from '../../src/store/memory.js';
import { RETENTION_MS } from '../../src/store/policy.js';
import { ManualClock, StoreFixture, storeConformance } from './conformance.js';

storeConformance(t, 'MemoryStore', async ({ now }) => new MemoryStore({ now }), { controllableClock: true });

const HOUR = 3_600_000;
const MINUTE = 60_000;

function memoryFixture(): { store: MemoryStore; clock: ManualClock; f: StoreFixture } {
  const clock = new ManualClock();
  const store = new MemoryStore({ now: clock.now });
  return { store, clock, f: new StoreFixture(store, clock, true) };
}

t.test('the default clock is Date.now', async (t) => {
  const store = new MemoryStore();
  await store.createHandle({ handleHash: 'h1', fingerprint: 'tb_s_abcd..wxyz', principal: null, ttlMs: HOUR });
  const expiresAt = (await store.getHandle('h1'))?.expiresAt ?? 0;
  t.ok(Math.abs(expiresAt - (Date.now() + HOUR)) < 1_000);
});

t.test('buckets and leases run on the injected clock', async (t) => {
  const { store, clock } = memoryFixture();
  const bucket = { ratePerSecond: 1, burst: 1 };
  t.equal((await store.takeChallengeToken('client', bucket)).allowed, true);
  t.same(await store.takeChallengeToken('client', bucket), { allowed: false, retryAfterMs: 1_000 });
  clock.advance(400);
  t.same(await store.takeChallengeToken('client', bucket), { allowed: false, retryAfterMs: 600 });
  clock.advance(600);
  t.equal((await store.takeChallengeToken('client', bucket)).allowed, true);
  t.equal(await store.acquireLease('reconciler', 'a', 1_000), true);
  clock.advance(999);
  t.equal(await store.acquireLease('reconciler', 'b', 1_000), false);
  clock.advance(1);
  t.equal(await store.acquireLease('reconciler', 'b', 1_000), true);
});

t.test('expired handles, with their reservations, are swept', async (t) => {
  const { store, clock, f } = memoryFixture();
  const handleHash = await f.handle({ credits: 3 });
  await f.spend(handleHash, { reservationDeadline: clock.now() + 2 * HOUR });
  t.match(store.stats(), { handles: 1, reservations: 1 });
  clock.advance(HOUR + MINUTE);
  await store.ping();
  await store.getHandle('anything'); // any call sweeps once the minute is up
  t.match(store.stats(), { handles: 0, reservations: 0 });
  t.equal(await store.releaseStaleReservations(clock.now() + 3 * HOUR, 10), 0);
});

t.test('charges are kept for the retention window after their link expired, then swept', async (t) => {
  const { store, clock, f } = memoryFixture();
  const handleHash = await f.handle({ ttlMs: 30 * 24 * HOUR });
  const settled = await f.pendingCharge(handleHash);
  await f.settle(handleHash, settled, 10);
  const pending = await f.pendingCharge(handleHash, { sku: 'other' });
  clock.advance(settled.expiresAt + RETENTION_MS - clock.now() - 1);
  store.sweep(clock.now());
  t.equal(store.stats().charges, 2, 'still readable one ms before the end of retention');
  clock.advance(1);
  store.sweep(clock.now());
  t.equal(store.stats().charges, 0, 'a pending charge the reconciler never abandoned goes too');
  t.equal(await store.findChargeByRef(pending.providerRef ?? ''), null);
  t.match(await f.spend(handleHash, { sku: 'other' }), { kind: 'insufficient', pending: null, lastCharge: null }, 'no pointer is left dangling');
});

t.test('an opening charge whose opener died is swept when its link would have expired', async (t) => {
  const { store, clock, f } = memoryFixture();
  const handleHash = await f.handle({ ttlMs: 2 * HOUR });
  const opening = await f.begin(handleHash);
  clock.advance(opening.charge.expiresAt - clock.now());
  store.sweep(clock.now());
  t.equal(store.stats().charges, 0);
  t.equal(await store.countPendingCharges(), 0);
});

t.test('dev links are kept for the retention window after expiry, then swept', async (t) => {
  const { store, clock } = memoryFixture();
  await store.putDevLink({ id: 'dev1', label: 'x', amount: '1.00', currency: 'USD', credits: 1, expiresAt: clock.now() + MINUTE, status: 'active', receivedAmount: null });
  clock.advance(MINUTE + RETENTION_MS - 1);
  store.sweep(clock.now());
  t.ok(await store.getDevLink('dev1'), 'the reconciler can still read it after expiry');
  clock.advance(1);
  store.sweep(clock.now());
  t.equal(await store.getDevLink('dev1'), null);
});

t.test('a challenge bucket is swept once it has refilled, and expired leases too', async (t) => {
  const { store, clock } = memoryFixture();
  const bucket = { ratePerSecond: 1, burst: 5 };
  for (let i = 0; i < 3; i++) await store.takeChallengeToken(`client-${i}`, bucket);
  await store.acquireLease('reconciler', 'a', 10_000);
  t.match(store.stats(), { challengeBuckets: 3, leases: 1 });
  clock.advance(999);
  store.sweep(clock.now());
  t.match(store.stats(), { challengeBuckets: 3, leases: 1 }, 'not yet full');
  clock.advance(10_000);
  store.sweep(clock.now());
  t.match(store.stats(), { challengeBuckets: 0, leases: 0 });
  t.equal((await store.takeChallengeToken('client-0', { ratePerSecond: 1, burst: 1 })).allowed, true, 'a swept bucket is a full one');
});

t.test('the sweep runs by itself inside calls at most once a minute', async (t) => {
  const { store, clock, f } = memoryFixture();
  await f.handle();
  clock.advance(HOUR);
  t.equal(store.stats().handles, 1, 'nothing runs between calls');
  await store.countPendingCharges();
  t.equal(store.stats().handles, 1, 'calls that do not read the clock do not sweep');
  await store.takeChallengeToken('client', { ratePerSecond: 1, burst: 1 });
  t.equal(store.stats().handles, 0);
});

t.test('a handle re-created under the same hash starts fresh', async (t) => {
  const { store, f } = memoryFixture();
  await store.createHandle({ handleHash: 'h1', fingerprint: 'tb_s_aaaa..1111', principal: null, ttlMs: HOUR });
  await f.spend('h1', { reservationId: 'r1', cost: 0 });
  await store.createHandle({ handleHash: 'h1', fingerprint: 'tb_s_bbbb..2222', principal: 'alice', ttlMs: HOUR });
  t.same(await store.findHandlesByFingerprint('tb_s_aaaa..1111'), []);
  t.same(await store.findHandlesByFingerprint('tb_s_bbbb..2222'), ['h1']);
  t.equal(store.stats().reservations, 0);
});
