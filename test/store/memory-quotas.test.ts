// MemoryQuotas (store/memory/quotas.ts): the conformance suite runs it through MemoryStore
// (memory.test.ts); this file checks what only the memory store promises: it forgets counters after
// their window's grace and hold parts nobody concluded, so memory stays bounded.
import t from 'tap';
import { MemoryQuotas } from '../../src/store/memory/quotas.js';
import { QUOTA_GRACE_MS } from '../../src/store/quota-policy.js';
import { ManualClock } from './conformance.js';
import { draw, quotaRequest } from './quota-conformance.js';

const MINUTE = 60_000;

t.test('counters and unconcluded holds are forgotten after their window and grace', async (t) => {
  const clock = new ManualClock();
  const quotas = new MemoryQuotas(clock.now);
  const windowMs = 10 * MINUTE;
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

t.test('a draw that is not a whole non-negative count is refused before anything moves', async (t) => {
  const clock = new ManualClock();
  const quotas = new MemoryQuotas(clock.now);
  const cap = draw(clock.now(), { maxCalls: 3 });
  await t.rejects(quotas.reserveQuotas(quotaRequest(clock.now(), [cap, { ...cap, calls: -1 }])), { code: 'TB_ERR_INTERNAL' });
  await t.rejects(quotas.reserveQuotas(quotaRequest(clock.now(), [{ ...cap, credits: 0.5 }])), { code: 'TB_ERR_INTERNAL' });
  t.equal((await quotas.quotaUsage([cap]))[0]?.calls, 0);
});
