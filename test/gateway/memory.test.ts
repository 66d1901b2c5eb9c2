// The process's §6.5 memory (SPEC §21): one registry and one deadline queue for every gateway a reload
// builds; closing it disarms the pending deadlines.
import t from 'tap';
import { createRequestMemory } from '../../src/gateway/memory.js';
import { MemoryStore } from '../../src/store/memory.js';
import { TestClock } from '../helpers/clock.js';

t.test('the deadlines outlive nothing but the memory itself: close disarms what is pending', async (t) => {
  const clock = new TestClock();
  const memory = createRequestMemory(new MemoryStore({ now: clock.now }), clock);
  let fired = 0;
  memory.deadlines.add(1_000, () => fired++);
  memory.deadlines.add(5_000, () => fired++);
  await clock.advance(1_000);
  t.equal(fired, 1, 'a due deadline fires');
  memory.close();
  await clock.advance(10_000);
  t.equal(fired, 1, 'after close nothing fires');
});

t.test('its registry answers for every gateway built with it', async (t) => {
  const clock = new TestClock();
  const memory = createRequestMemory(new MemoryStore({ now: clock.now }), clock);
  await memory.registry.register('s', 3, { state: 'in_flight', handleHash: 'h', reservationId: 'r', tool: 't', sku: 'research', cost: 1, charge: 'success', deadline: clock.now() + 10_000, remaining: null, fingerprint: null, startedAt: clock.now() });
  t.equal(memory.registry.reusesPricedId('s', 3), true);
});
