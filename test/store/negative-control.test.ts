// The concurrency check of the conformance suite must be able to fail: on a store that reads,
// awaits, then writes, 200 concurrent reserves on 50 credits grant far more than 50 calls; and the
// cross-instance check (crossInstanceConformance) on a store whose lock is per instance. If this
// test ever fails, the suite's concurrency test has become vacuous.
import t from 'tap';
import { MemoryStore } from '../../src/store/memory.js';
import { ManualClock, concurrentIdempotentBegins, concurrentReserveOutcome, concurrentReserveOutcomeOver } from './conformance.js';
import { InstanceLockedStore, SharedBooks } from './instance-locked-store.js';
import { NaiveStore } from './naive-store.js';

t.test('the concurrency check catches a read-then-write store over-granting', async (t) => {
  const clock = new ManualClock();
  const outcome = await concurrentReserveOutcome(new NaiveStore({ now: clock.now }), clock);
  t.ok(outcome.reserved > 50, `the naive store reserved ${outcome.reserved} calls on 50 credits`);
  t.not(outcome.reserved, 50);
});

t.test('the same check passes on MemoryStore (the control of the control)', async (t) => {
  const clock = new ManualClock();
  t.same(await concurrentReserveOutcome(new MemoryStore({ now: clock.now }), clock), { reserved: 50, insufficient: 150, other: 0, finalBalance: 0 });
});

t.test('the naive store is correct without concurrency, so only the race makes it fail', async (t) => {
  const clock = new ManualClock();
  const outcome = await concurrentReserveOutcome(new NaiveStore({ now: clock.now }), clock, 1, 50);
  t.same(outcome, { reserved: 1, insufficient: 0, other: 0, finalBalance: 49 });
});

// Across replicas: a store that locks per instance passes on one instance and over-grants on two.
t.test('the cross-instance check catches a store that locks only within one instance', async (t) => {
  const clock = new ManualClock();
  const books = new SharedBooks();
  const outcome = await concurrentReserveOutcomeOver([new InstanceLockedStore(books, { now: clock.now }), new InstanceLockedStore(books, { now: clock.now })], clock);
  t.ok(outcome.reserved > 50, `two instances reserved ${outcome.reserved} calls on 50 credits`);
});

t.test('the per-instance lock alone is correct: one instance reserves exactly 50 (so only the second instance makes it fail)', async (t) => {
  const clock = new ManualClock();
  t.same(await concurrentReserveOutcomeOver([new InstanceLockedStore(new SharedBooks(), { now: clock.now })], clock), { reserved: 50, insufficient: 150, other: 0, finalBalance: 0 });
});

t.test('the idempotency check catches a look-then-write slot letting several duplicates run', async (t) => {
  const clock = new ManualClock();
  const naive = await concurrentIdempotentBegins(new NaiveStore({ now: clock.now }), 50);
  t.ok(naive.first > 1, `the naive store let ${naive.first} of 50 duplicates run`);
  t.same(await concurrentIdempotentBegins(new MemoryStore({ now: clock.now }), 50), { first: 1, running: 49, other: 0 }, 'MemoryStore lets one run');
});
