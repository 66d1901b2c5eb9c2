// Sessions bound to principals (SPEC §20): the per-replica cache in front of the store. A binding never
// changes, so a replica reads it once and then answers from memory; a cached answer is read again after
// a while (sliding the store's TTL); the cache is bounded; a session without a binding is never cached.
import t from 'tap';
import { sessionHandedOut, sessionHash, SessionBindings } from '../../src/auth/session-bindings.js';
import { MemoryStore } from '../../src/store/memory.js';

class CountingStore extends MemoryStore {
  lookups = 0;
  override async sessionPrincipal(hash: string, ttlMs: number): Promise<string | null> {
    this.lookups++;
    return super.sessionPrincipal(hash, ttlMs);
  }
}

function setUp(options: { cacheSize?: number; cacheMaxAgeMs?: number } = {}) {
  const clock = { at: 1_000_000 };
  const store = new CountingStore({ now: () => clock.at });
  const bindings = new SessionBindings({ store, now: () => clock.at }, options);
  return { clock, store, bindings };
}

t.test('the first binding wins; the owner is what every later look-up says', async (t) => {
  const { bindings, store } = setUp();
  t.equal(await bindings.bind('s-1', 'sub:alice'), 'sub:alice');
  t.equal(await bindings.bind('s-1', 'sub:bob'), 'sub:alice', 'a second principal cannot take it');
  t.equal(await bindings.ownerOf('s-1'), 'sub:alice');
  t.equal(await new SessionBindings({ store, now: () => 1_000_000 }).ownerOf('s-1'), 'sub:alice', 'another replica reads it from the store');
  t.equal(await bindings.ownerOf('s-2'), null);
});

t.test('the store holds a hash of the session id, never the id', async (t) => {
  const { bindings, store } = setUp();
  await bindings.bind('secret-session-id', 'sub:alice');
  t.equal(await store.sessionPrincipal(sessionHash('secret-session-id'), 1_000), 'sub:alice');
  t.equal(await store.sessionPrincipal('secret-session-id', 1_000), null);
  t.not(sessionHash('secret-session-id'), 'secret-session-id');
});

t.test('a known owner is answered from memory: no store round trip per request', async (t) => {
  const { bindings, store, clock } = setUp();
  await bindings.bind('s-1', 'sub:alice');
  const other = new SessionBindings({ store, now: () => clock.at });
  for (let i = 0; i < 100; i++) {
    t.equal(await bindings.ownerOf('s-1'), 'sub:alice');
    t.equal(await other.ownerOf('s-1'), 'sub:alice');
  }
  t.equal(store.lookups, 1, 'the binding replica never asked; the other replica asked once');
});

t.test('a cached owner is read again after cacheMaxAge, which keeps the binding alive in the store', async (t) => {
  const { bindings, store, clock } = setUp({ cacheMaxAgeMs: 60_000 });
  await bindings.bind('s-1', 'sub:alice');
  clock.at += 59_000;
  await bindings.ownerOf('s-1');
  t.equal(store.lookups, 0);
  clock.at += 2_000;
  await bindings.ownerOf('s-1');
  t.equal(store.lookups, 1, 'read again');
});

t.test('an unknown session is asked about every time (never cached as nobody\'s)', async (t) => {
  const { bindings, store } = setUp();
  t.equal(await bindings.ownerOf('nobody'), null);
  t.equal(await bindings.ownerOf('nobody'), null);
  t.equal(store.lookups, 2);
  await bindings.bind('nobody', 'sub:carol');
  t.equal(await bindings.ownerOf('nobody'), 'sub:carol', 'bound later, known at once');
});

t.test('the cache is bounded: the least recently used session is forgotten first', async (t) => {
  const { bindings, store } = setUp({ cacheSize: 3 });
  for (const id of ['a', 'b', 'c']) await bindings.bind(id, `sub:${id}`);
  await bindings.ownerOf('a'); // a is now the most recently used
  await bindings.bind('d', 'sub:d'); // evicts b
  const before = store.lookups;
  t.equal(await bindings.ownerOf('a'), 'sub:a');
  t.equal(await bindings.ownerOf('c'), 'sub:c');
  t.equal(await bindings.ownerOf('d'), 'sub:d');
  t.equal(store.lookups, before, 'a, c and d from memory');
  t.equal(await bindings.ownerOf('b'), 'sub:b');
  t.equal(store.lookups, before + 1, 'b was forgotten and read from the store');
});

t.test('a store that fails makes the look-up reject (the caller refuses the request)', async (t) => {
  const store = new MemoryStore();
  store.sessionPrincipal = async () => {
    throw new Error('store down');
  };
  await t.rejects(new SessionBindings({ store, now: Date.now }).ownerOf('s'), /store down/);
});

t.test('sessionHandedOut: only a session id the request did not carry needs binding', async (t) => {
  t.equal(sessionHandedOut(undefined, 'new'), 'new', 'the initialize reply');
  t.equal(sessionHandedOut('s-1', 's-1'), undefined, 'the same session echoed');
  t.equal(sessionHandedOut('s-1', 's-2'), 's-2', 'an upstream that switches sessions');
  t.equal(sessionHandedOut('s-1', undefined), undefined);
  t.equal(sessionHandedOut(undefined, ['a', 'b']), 'a, b', 'duplicate headers, as a fetch client joins them');
});
