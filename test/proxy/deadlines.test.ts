// The priced-call deadline queue: one timer for every call in flight, deadlines exact whatever the
// order they were added in. Time is a test clock: each test moves it and sees exactly what falls due.
import t from 'tap';
import { DeadlineQueue } from '../../src/proxy/deadlines.js';
import { TestClock } from '../helpers/clock.js';

t.test('an entry expires once, at its delay and not before', async (t) => {
  const clock = new TestClock();
  const queue = new DeadlineQueue(clock);
  let fired = 0;
  queue.add(30, () => void (fired += 1));
  await clock.advance(29);
  t.equal(fired, 0, 'not yet due');
  await clock.advance(1);
  t.equal(fired, 1);
  await clock.advance(1_000);
  t.equal(fired, 1, 'once');
  t.equal(queue.size, 0);
  t.equal(clock.pending, 0, 'no timer left armed');
});

t.test('a cancelled entry never expires', async (t) => {
  const clock = new TestClock();
  const queue = new DeadlineQueue(clock);
  let fired = false;
  const cancel = queue.add(20, () => void (fired = true));
  cancel();
  t.equal(queue.size, 0);
  t.equal(clock.pending, 0, 'its timer is disarmed');
  await clock.advance(50);
  t.notOk(fired);
});

t.test('an earlier deadline added after a later one still expires first, on time', async (t) => {
  const clock = new TestClock();
  const queue = new DeadlineQueue(clock);
  const order: string[] = [];
  queue.add(200, () => order.push('late'));
  queue.add(20, () => order.push('early'));
  await clock.advance(20);
  t.same(order, ['early'], 'the early one was not held behind the late one');
  t.equal(queue.size, 1);
  await clock.advance(179);
  t.same(order, ['early'], 'the late one is still pending');
  await clock.advance(1);
  t.same(order, ['early', 'late']);
});

t.test('cancelling the head leaves the entries behind it armed', async (t) => {
  const clock = new TestClock();
  const queue = new DeadlineQueue(clock);
  const fired: string[] = [];
  const cancelFirst = queue.add(10, () => fired.push('first'));
  queue.add(30, () => fired.push('second'));
  queue.add(30, () => fired.push('third'));
  cancelFirst();
  await clock.advance(30);
  t.same(fired, ['second', 'third']);
});

t.test('entries due together all expire on the same tick', async (t) => {
  const clock = new TestClock();
  const queue = new DeadlineQueue(clock);
  const fired: number[] = [];
  for (let i = 0; i < 5; i++) queue.add(5, () => fired.push(i));
  await clock.advance(5);
  t.same(fired, [0, 1, 2, 3, 4]);
  t.equal(queue.size, 0);
});

t.test('a closed queue fires nothing and arms nothing', async (t) => {
  const clock = new TestClock();
  const queue = new DeadlineQueue(clock);
  let fired = 0;
  queue.add(10, () => void (fired += 1));
  queue.close();
  t.equal(clock.pending, 0, 'the timer is disarmed at close');
  queue.add(10, () => void (fired += 1));
  t.equal(clock.pending, 0, 'a deadline added after close is never armed');
  await clock.advance(100);
  t.equal(fired, 0);
});

t.test('each queue keeps its own deadlines: closing one leaves another armed', async (t) => {
  const clock = new TestClock();
  const first = new DeadlineQueue(clock);
  const second = new DeadlineQueue(clock);
  const fired: string[] = [];
  first.add(10, () => fired.push('first'));
  second.add(10, () => fired.push('second'));
  first.close();
  await clock.advance(10);
  t.same(fired, ['second']);
});

t.test('the system clock fires a real deadline (Node timers under the default clock)', async (t) => {
  const queue = new DeadlineQueue();
  // The queue's timer is unref'd (a deadline never keeps a process alive): this one keeps the test alive.
  const alive = setInterval(() => undefined, 1_000);
  await new Promise<void>((resolve) => queue.add(5, resolve));
  clearInterval(alive);
  t.equal(queue.size, 0);
});
