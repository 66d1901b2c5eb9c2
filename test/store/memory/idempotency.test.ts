// MemoryIdempotency on its own (the behaviour both stores share is in conformance.ts): entries end on
// the injected clock, and the store's sweep drops ended ones, so memory is bounded by what is live.
import t from 'tap';
import { MemoryIdempotency } from '../../../src/store/memory/idempotency.js';

t.test('sweep drops ended markers and results, keeps live ones', async (t) => {
  let now = 1_000_000;
  const slots = new MemoryIdempotency(() => now);
  slots.begin('crashed', { scope: 's', owner: 'a', runningTtlMs: 100 });
  slots.begin('kept', { scope: 's', owner: 'b', runningTtlMs: 100 });
  t.equal(slots.finish('kept', 'b', '{"r":1}', 10_000), true);
  now += 500;
  slots.sweep(now);
  t.same(slots.begin('kept', { scope: 's', owner: 'c', runningTtlMs: 100 }), { kind: 'done', result: '{"r":1}' });
  t.same(slots.begin('crashed', { scope: 'other', owner: 'd', runningTtlMs: 100 }), { kind: 'first' }, 'the crashed marker is gone: even another scope starts afresh');
  now += 20_000;
  slots.sweep(now);
  t.same(slots.begin('kept', { scope: 's', owner: 'e', runningTtlMs: 100 }), { kind: 'first' }, 'a result past its ttl is gone');
});
