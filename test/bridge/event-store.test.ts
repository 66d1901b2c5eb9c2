// The bounded event store behind Last-Event-ID (SPEC §5.5).
import t from 'tap';
import { BoundedEventStore, knownSizes } from '../../src/bridge/event-store.js';

const message = (n: number) => ({ jsonrpc: '2.0' as const, method: 'notifications/message', params: { n } });

async function replay(store: BoundedEventStore, after: string) {
  const sent: [string, unknown][] = [];
  const stream = await store.replayEventsAfter(after, { send: async (id, m) => void sent.push([id, (m as { params?: { n?: number } }).params?.n]) });
  return { stream, sent };
}

t.test('replays what came after an event, on that stream only, skipping priming events', async (t) => {
  const store = new BoundedEventStore({ maxEvents: 100, maxBytes: 1e6 });
  const first = await store.storeEvent('s1', {} as never);
  const a = await store.storeEvent('s1', message(1));
  await store.storeEvent('s2', message(99));
  const b = await store.storeEvent('s1', message(2));
  t.strictSame(await replay(store, first), { stream: 's1', sent: [[a, 1], [b, 2]] });
  t.strictSame(await replay(store, a), { stream: 's1', sent: [[b, 2]] });
  t.equal(await store.getStreamIdForEventId(b), 's1');
  t.equal(await store.getStreamIdForEventId('garbage'), undefined);
});

t.test('bounded by count: the oldest go', async (t) => {
  const dropped: number[] = [];
  const store = new BoundedEventStore({ maxEvents: 3, maxBytes: 1e6 }, (count) => void dropped.push(count));
  const ids = [];
  for (let i = 1; i <= 5; i++) ids.push(await store.storeEvent('s', message(i)));
  t.equal(store.size.events, 3);
  t.strictSame(dropped, [1, 1]);
  t.ok(store.lostAfter(ids[0]!), 'a resume from the first event has a gap');
  t.notOk(store.lostAfter(ids[1]!), 'from the second it has not');
  t.strictSame((await replay(store, ids[0]!)).sent.map(([, n]) => n), [3, 4, 5], 'what is left is replayed');
});

t.test('bounded by bytes, and the newest is always kept', async (t) => {
  const store = new BoundedEventStore({ maxEvents: 100, maxBytes: 1000 });
  const big = message(1);
  knownSizes.set(big, 5000);
  await store.storeEvent('s', message(0));
  await store.storeEvent('s', big);
  t.strictSame(store.size, { events: 1, bytes: 5000 }, 'one event over the budget stays alone');
  await store.storeEvent('s', message(2));
  t.equal(store.size.events, 1, 'and goes once a newer one comes');
  t.ok(store.size.bytes < 1000);
});
