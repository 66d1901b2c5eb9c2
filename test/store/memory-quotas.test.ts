// MemoryQuotas (store/memory/quotas.ts): the conformance suite runs it through MemoryStore
// (memory.test.ts); this file checks what only the memory store promises: it forgets counters after
// their window's grace and hold parts nobody concluded, so memory stays bounded.
import t from 'tap';
import { MemoryQuotas } from '../../src/store/memory/quotas.js';
import { QUOTA_GRACE_MS } from '../../src/store/quota-policy.js';
import { quotaWindowStart } from '../../src/store/store.js';
import { ManualClock } from './conformance.js';
import { draw, quotaRequest } from './quota-conformance.js';

const MINUTE = 60_000;

// The hold ends a minute after the call (its deadline) plus the grace; the counter at its window's end
// plus the grace. Which is forgotten first depends on where in its window the call falls, so each order
// is set up on purpose (a wall-clock start made this flip in the last minute of every 10-minute window).
t.test('counters and unconcluded holds are forgotten after their window and grace', async (t) => {
  const windowMs = 10 * MINUTE;
  const clock = new ManualClock();
  clock.at = quotaWindowStart(clock.at, windowMs); // the call opens its window: the hold ends first
  const quotas = new MemoryQuotas(clock.now);
  const cap = draw(clock.now(), { windowMs });
  await quotas.reserveQuotas(quotaRequest(clock.now(), [cap], { attempt: 'a' }));
  t.same(quotas.sizes(), { counters: 1, holds: 1, operations: 1 });
  clock.advance(cap.windowStart + windowMs + QUOTA_GRACE_MS - clock.now() - 1);
  t.equal((await quotas.quotaUsage([cap]))[0]?.calls, 1, 'kept until the grace ends');
  clock.advance(1);
  t.equal((await quotas.quotaUsage([cap]))[0]?.calls, 0);
  quotas.sweep(clock.now());
  t.same(quotas.sizes(), { counters: 0, holds: 0, operations: 0 });
});

t.test('a hold made in the last minute of its window outlives the counter by its own deadline, then is forgotten', async (t) => {
  const windowMs = 10 * MINUTE;
  const clock = new ManualClock();
  clock.at = quotaWindowStart(clock.at, windowMs) + windowMs - 30_000;
  const quotas = new MemoryQuotas(clock.now);
  const cap = draw(clock.now(), { windowMs });
  const request = quotaRequest(clock.now(), [cap], { attempt: 'a' });
  await quotas.reserveQuotas(request);
  clock.advance(cap.windowStart + windowMs + QUOTA_GRACE_MS - clock.now());
  quotas.sweep(clock.now());
  t.same(quotas.sizes(), { counters: 0, holds: 1, operations: 0 }, 'the counter is gone at its window\'s end plus the grace; the hold is not yet');
  clock.advance(request.deadline + QUOTA_GRACE_MS - clock.now());
  quotas.sweep(clock.now());
  t.same(quotas.sizes(), { counters: 0, holds: 0, operations: 0 }, 'the hold is forgotten at its deadline plus the grace');
});

t.test('a draw that is not a whole non-negative count is refused before anything moves', async (t) => {
  const clock = new ManualClock();
  const quotas = new MemoryQuotas(clock.now);
  const cap = draw(clock.now(), { maxCalls: 3 });
  await t.rejects(quotas.reserveQuotas(quotaRequest(clock.now(), [cap, { ...cap, calls: -1 }])), { code: 'TB_ERR_INTERNAL' });
  await t.rejects(quotas.reserveQuotas(quotaRequest(clock.now(), [{ ...cap, credits: 0.5 }])), { code: 'TB_ERR_INTERNAL' });
  t.equal((await quotas.quotaUsage([cap]))[0]?.calls, 0);
});
