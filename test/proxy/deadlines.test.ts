// The priced-call deadline queue: one timer for every call in flight, deadlines exact whatever the
// order they were added in.
import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { DeadlineQueue } from '../../src/proxy/deadlines.js';

t.test('an entry expires once, after its delay', async (t) => {
  const queue = new DeadlineQueue();
  const started = performance.now();
  let fired = 0;
  let firedAfter = 0;
  queue.add(30, () => {
    fired += 1;
    firedAfter = performance.now() - started;
  });
  await sleep(80);
  t.equal(fired, 1);
  t.ok(firedAfter >= 29, `fired after ${firedAfter.toFixed(1)} ms`);
  t.equal(queue.size, 0);
});

t.test('a cancelled entry never expires', async (t) => {
  const queue = new DeadlineQueue();
  let fired = false;
  const cancel = queue.add(20, () => void (fired = true));
  cancel();
  t.equal(queue.size, 0);
  await sleep(50);
  t.notOk(fired);
});

t.test('an earlier deadline added after a later one still expires first, on time', async (t) => {
  const queue = new DeadlineQueue();
  const order: string[] = [];
  queue.add(200, () => order.push('late'));
  const started = performance.now();
  let earlyAfter = 0;
  queue.add(20, () => {
    order.push('early');
    earlyAfter = performance.now() - started;
  });
  await sleep(60);
  t.same(order, ['early'], 'the late one is still pending');
  t.ok(earlyAfter < 150, `the early one was not held behind the late one (${earlyAfter.toFixed(1)} ms)`);
  t.equal(queue.size, 1);
  await sleep(200);
  t.same(order, ['early', 'late']);
});

t.test('cancelling the head leaves the entries behind it armed', async (t) => {
  const queue = new DeadlineQueue();
  const fired: string[] = [];
  const cancelFirst = queue.add(10, () => fired.push('first'));
  queue.add(30, () => fired.push('second'));
  queue.add(30, () => fired.push('third'));
  cancelFirst();
  await sleep(80);
  t.same(fired, ['second', 'third']);
});

t.test('entries due together all expire on the same tick', async (t) => {
  let now = 0;
  const queue = new DeadlineQueue(() => now);
  const fired: number[] = [];
  for (let i = 0; i < 5; i++) queue.add(5, () => fired.push(i));
  now = 10; // the timer finds every entry due when it fires
  await sleep(30);
  t.same(fired, [0, 1, 2, 3, 4]);
  t.equal(queue.size, 0);
});
