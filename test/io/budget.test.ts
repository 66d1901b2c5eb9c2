// io/budget.ts: the work's result within the budget, the budget's error past it.
import t from 'tap';
import { withBudget } from '../../src/io/budget.js';

t.test('work that settles within the budget passes its result or its error through', async (t) => {
  t.equal(await withBudget(Promise.resolve(7), 1_000, 'late'), 7);
  await t.rejects(withBudget(Promise.reject(new Error('own failure')), 1_000, 'late'), { message: 'own failure' });
});

t.test('work that does not settle within the budget is refused with the message', async (t) => {
  const never = new Promise<number>(() => undefined);
  await t.rejects(withBudget(never, 10, 'no answer within 10 ms'), { message: 'no answer within 10 ms' });
});

t.test('a late failure of the work after the budget ran out is not an unhandled rejection', async (t) => {
  const unhandled: unknown[] = [];
  const listen = (reason: unknown): void => void unhandled.push(reason);
  process.on('unhandledRejection', listen);
  t.teardown(() => void process.off('unhandledRejection', listen));
  let fail: (error: Error) => void = () => undefined;
  const work = new Promise<number>((_, reject) => (fail = reject));
  await t.rejects(withBudget(work, 5, 'late'), { message: 'late' });
  fail(new Error('too late'));
  // Node reports an unhandled rejection once the microtasks after it have run: a turn or two later.
  for (let i = 0; i < 3; i++) await new Promise((resolve) => setImmediate(resolve));
  t.same(unhandled.map(String), [], 'no unhandled rejection');
});
