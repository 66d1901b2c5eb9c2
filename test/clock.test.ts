// src/clock.ts and the test clock the suite drives time with (test/helpers/clock.ts).
import t from 'tap';
import { sleep, systemClock } from '../src/clock.js';
import { TestClock, skippingClock, waitFor } from './helpers/clock.js';

t.test('the system clock reads the wall clock and a monotonic clock that moves forward', async (t) => {
  const wall = systemClock.now();
  t.ok(Math.abs(wall - Date.now()) < 1_000, 'now() is epoch milliseconds');
  const before = systemClock.monotonic();
  await sleep(systemClock, 5);
  t.ok(systemClock.monotonic() > before, 'monotonic time moved across a real timer');
});

t.test('a cleared system timer never fires', async (t) => {
  let fired = false;
  const timer = systemClock.setTimeout(() => void (fired = true), 1);
  systemClock.clearTimeout(timer);
  await new Promise((resolve) => setTimeout(resolve, 20));
  t.notOk(fired);
});

t.test('the test clock stands still until advanced', async (t) => {
  const clock = new TestClock(1_000_000);
  t.equal(clock.now(), 1_000_000);
  t.equal(clock.monotonic(), 0);
  await clock.advance(250);
  t.equal(clock.now(), 1_000_250, 'wall time moved by the same amount');
  t.equal(clock.monotonic(), 250);
});

t.test('advance fires due timers in due order, each at its own time, and no others', async (t) => {
  const clock = new TestClock();
  const seen: [string, number][] = [];
  clock.setTimeout(() => seen.push(['b', clock.monotonic()]), 20);
  clock.setTimeout(() => seen.push(['a', clock.monotonic()]), 10);
  clock.setTimeout(() => seen.push(['c', clock.monotonic()]), 20);
  clock.setTimeout(() => seen.push(['late', clock.monotonic()]), 31);
  await clock.advance(30);
  t.same(seen, [['a', 10], ['b', 20], ['c', 20]], 'ties in the order they were set');
  t.equal(clock.pending, 1);
});

t.test('a timer armed by a firing timer fires within the same advance when it falls due', async (t) => {
  const clock = new TestClock();
  const seen: number[] = [];
  clock.setTimeout(() => clock.setTimeout(() => seen.push(clock.monotonic()), 5), 10);
  await clock.advance(15);
  t.same(seen, [15]);
});

t.test('sleep on the test clock resolves when the clock passes it, and the code after it runs', async (t) => {
  const clock = new TestClock();
  let woke = false;
  void sleep(clock, 100).then(() => (woke = true));
  await clock.advance(99);
  t.notOk(woke);
  await clock.advance(1);
  t.ok(woke);
});

t.test('setWall moves the wall clock alone (an NTP step): monotonic time and timers stay', async (t) => {
  const clock = new TestClock(0);
  let fired = false;
  clock.setTimeout(() => void (fired = true), 10);
  clock.setWall(5_000);
  t.equal(clock.now(), 5_000);
  t.equal(clock.monotonic(), 0);
  t.notOk(fired);
});

t.test('waitFor resolves once the condition holds and names what it waited for on timeout', async (t) => {
  let ready = false;
  setTimeout(() => (ready = true), 5);
  await waitFor(() => ready, 'ready');
  t.ok(ready);
  await t.rejects(waitFor(() => false, 'the impossible', { timeoutMs: 20 }), /timed out after 20 ms waiting for the impossible/);
});

t.test('the skipping clock fires timers in due order without real waiting; wall time is the test\'s', async (t) => {
  let wall = 1_000;
  const clock = skippingClock(() => wall);
  const seen: [string, number][] = [];
  clock.setTimeout(() => seen.push(['b', clock.monotonic()]), 2_000);
  clock.setTimeout(() => seen.push(['a', clock.monotonic()]), 1_000);
  const cleared = clock.setTimeout(() => seen.push(['cleared', clock.monotonic()]), 1_500);
  clock.clearTimeout(cleared);
  const started = performance.now();
  await sleep(clock, 3_000);
  t.ok(performance.now() - started < 1_000, 'three seconds of timers took no real wait');
  t.same(seen, [['a', 1_000], ['b', 2_000]], 'due order, each at its own time; the cleared one never fired');
  t.equal(clock.monotonic(), 3_000);
  t.equal(clock.fired, 3);
  t.equal(clock.now(), 1_000, 'wall time stood still');
  wall = 5_000;
  t.equal(clock.now(), 5_000, 'and moves when the test moves it');
});

t.test('the skipping clock lets work already under way run before a timer fires', async (t) => {
  const clock = skippingClock(() => 0);
  const seen: string[] = [];
  const timer = sleep(clock, 10).then(() => seen.push('timer'));
  void Promise.resolve().then(() => seen.push('microtask'));
  await timer;
  t.same(seen, ['microtask', 'timer']);
});
