// The priced-request registry on the request path (SPEC §6.5): the store holds what other replicas
// read (keyed by a hash of the upstream session, never the session id itself, and the id with its
// type); the in-process log answers "does this request reuse a paid call's id?" without a round trip.
import t from 'tap';
import { PricedRequests } from '../../src/proxy/priced-requests.js';
import { MemoryStore } from '../../src/store/memory.js';
import type { PricedRequestRecord } from '../../src/store/store.js';

const record = (): PricedRequestRecord => ({ state: 'in_flight', handleHash: 'h', reservationId: 'r', tool: 'fetch_readable', sku: 'research', cost: 1, charge: 'success', deadline: Date.now() + 20_000, remaining: null, fingerprint: null, startedAt: Date.now() });

t.test('a registered request reuses its id in its session only, while in flight or released; committed frees it', async (t) => {
  const registry = new PricedRequests({ store: new MemoryStore(), now: Date.now });
  t.equal(registry.reusesPricedId('s1', 5), false, 'nothing registered yet');
  await registry.register('s1', 5, record());
  t.equal(registry.reusesPricedId('s1', 5), true, 'in flight');
  t.equal(registry.reusesPricedId('s1', '5'), false, '"5" is another id');
  t.equal(registry.reusesPricedId('s2', 5), false, 'another session');
  registry.noteConcluded('s1', 5, 'released');
  t.equal(registry.reusesPricedId('s1', 5), true, 'released: its late result must not be routed to a reuse');
  await registry.register('s1', 6, record());
  registry.noteConcluded('s1', 6, 'committed');
  t.equal(registry.reusesPricedId('s1', 6), false, 'committed: its result was paid for');
});

t.test('the store sees a hash of the session, never the session id, and the id serialised with its type', async (t) => {
  const store = new MemoryStore();
  const registry = new PricedRequests({ store, now: Date.now });
  await registry.register('secret-session-id', 'abc', record());
  const key = registry.key('secret-session-id', 'abc');
  t.not(key.session, 'secret-session-id');
  t.notMatch(key.session, /secret/);
  t.equal(key.requestId, '"abc"');
  t.match(await registry.lookup('secret-session-id', 'abc'), { key, record: { state: 'in_flight' } });
  t.equal(await registry.lookup('secret-session-id', 'other'), null);
});

t.test('the in-process log is bounded per session: the oldest ids are forgotten first (the store still knows them)', async (t) => {
  const store = new MemoryStore();
  const registry = new PricedRequests({ store, now: Date.now });
  for (let id = 0; id < 1_001; id++) await registry.register('s', id, record());
  t.equal(registry.reusesPricedId('s', 0), false, 'the oldest fell out of the local log');
  t.equal(registry.reusesPricedId('s', 1_000), true);
  t.ok(await registry.lookup('s', 0), 'the store keeps it');
});

t.test('reusedId: another process on the same store (a replica, or a registry built before a reload) refuses the same ids', async (t) => {
  const store = new MemoryStore();
  const first = new PricedRequests({ store, now: Date.now });
  const other = new PricedRequests({ store, now: Date.now });
  await first.register('s', 7, record());
  t.equal(await other.reusedId('s', [1, 7], true), 7, 'in flight at the other: refused here');
  t.equal(await other.reusedId('s', [7], false), undefined, 'not asked of the store when the endpoint prices nothing');
  t.equal(await other.reusedId('s', ['7', 8], true), undefined, 'other ids pass');
  await store.concludePricedRequest(first.key('s', 7), 'released', null);
  t.equal(await other.reusedId('s', [7], true), 7, 'released: refused');
  await first.register('s', 9, record());
  await store.concludePricedRequest(first.key('s', 9), 'committed', 2);
  t.equal(await other.reusedId('s', [9], true), undefined, 'committed: its result was paid for');
});

t.test('reusedId: a store that cannot answer leaves the in-process answer (free requests keep working)', async (t) => {
  const store = new MemoryStore();
  const registry = new PricedRequests({ store, now: Date.now });
  await registry.register('s', 1, record());
  store.getPricedRequest = () => Promise.reject(new Error('store down'));
  t.equal(await registry.reusedId('s', [1], true), 1, 'what this process forwarded is still refused');
  t.equal(await registry.reusedId('s', [2], true), undefined, 'anything else passes');
});
