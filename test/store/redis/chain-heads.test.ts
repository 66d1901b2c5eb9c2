// The ledger chain's link hashed by the gateway (src/store/redis/chain-heads.ts): the commit script
// takes the gateway's hash of the entry before only when that entry is exactly the one the gateway
// appended; every other case (another replica appended since, concurrent commits, a failover that
// lost the entry, a forgotten head) is hashed in Lua. Either way the chain verifies.
import { createHash, randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import t, { type Test } from 'tap';
import { createLogger } from '../../../src/observability/logger.js';
import { ChainHeads } from '../../../src/store/redis/chain-heads.js';
import { KeySpace } from '../../../src/store/keys.js';
import { RedisStore } from '../../../src/store/redis.js';
import { startRedis } from '../../helpers/redis-server.js';
import { allEntries, verified } from '../ledger-conformance.js';

const DAY = 86_400_000;
const server = await startRedis();
t.teardown(() => server.stop());
const direct = new Redis(server.url);
t.teardown(() => direct.disconnect());

t.test('ChainHeads: nothing known gives empty arguments; a remembered entry gives its text and SHA-256', async (t) => {
  const heads = new ChainHeads();
  t.same(heads.args('h1'), ['', '']);
  heads.remember('h1', '{"seq":1}', undefined);
  t.same(heads.args('h1'), ['{"seq":1}', createHash('sha256').update('{"seq":1}').digest('hex')]);
  heads.remember('h1', '{"seq":2}', 'gateway');
  heads.remember('h2', '{"seq":7}', 'script');
  t.equal(heads.args('h1')[0], '{"seq":2}', 'the newer entry replaces the older');
  t.same(heads.links(), { gateway: 1, script: 1 }, 'a first entry (no link) is not counted');
});

t.test('ChainHeads: bounded, the least recently appended handle is forgotten first', async (t) => {
  const heads = new ChainHeads(2);
  heads.remember('a', 'A', undefined);
  heads.remember('b', 'B', undefined);
  heads.remember('a', 'A2', undefined);
  heads.remember('c', 'C', undefined);
  t.equal(heads.size, 2);
  t.same(heads.args('b'), ['', ''], 'b was appended least recently');
  t.equal(heads.args('a')[0], 'A2');
  t.equal(heads.args('c')[0], 'C');
});

interface Fixture {
  store: RedisStore;
  keys: KeySpace;
  prefix: string;
  clock: { at: number };
}

async function open(t: Test, prefix = `tbch${randomBytes(4).toString('hex')}:`, clock = { at: Date.now() }): Promise<Fixture> {
  const store = await RedisStore.connect({ type: 'redis', redis: { url: server.url, keyPrefix: prefix } }, { logger: createLogger('silent'), now: () => clock.at });
  t.teardown(() => store.close());
  return { store, keys: new KeySpace(prefix), prefix, clock };
}

async function funded(store: RedisStore, handleHash: string, credits: number): Promise<void> {
  await store.createHandle({ handleHash, fingerprint: 'tb_s_chai..n001', principal: null, ttlMs: DAY });
  await store.grantCredits(handleHash, 'sku', credits, 'test funds');
}

let reservations = 0;
async function spend(store: RedisStore, handleHash: string, reservationId = `r${++reservations}`): Promise<string> {
  const decision = await store.reserve({ handleHash, principal: null, sku: 'sku', cost: 1, reservationId, reservationDeadline: Date.now() + 60_000, ttlMs: DAY, bucket: null });
  if (decision.kind !== 'reserved') throw new Error(`not reserved: ${decision.kind}`);
  if ((await store.commit(handleHash, reservationId, 'tool')) === null) throw new Error('not committed');
  return reservationId;
}

t.test('one replica spending in turn: every link after the first spend is the gateway\'s, and the chain verifies', async (t) => {
  const { store } = await open(t);
  await funded(store, 'seq1', 40);
  for (let i = 0; i < 30; i++) await spend(store, 'seq1');
  // The first spend follows the grant's entry, which the grant script appended: hashed in Lua.
  t.same(store.ledgerLinks(), { gateway: 29, script: 1 });
  const report = await verified(store);
  t.same(report.mismatches, []);
  t.equal(report.entries, 31);
});

t.test('two replicas spending on one handle in turn: each finds the other\'s entry last, so Lua hashes every link; the chain verifies', async (t) => {
  const a = await open(t);
  const b = await open(t, a.prefix, a.clock);
  await funded(a.store, 'two1', 40);
  for (let i = 0; i < 10; i++) {
    await spend(a.store, 'two1');
    await spend(b.store, 'two1');
  }
  t.same(a.store.ledgerLinks(), { gateway: 0, script: 10 });
  t.same(b.store.ledgerLinks(), { gateway: 0, script: 10 });
  t.same((await verified(a.store)).mismatches, []);
});

t.test('concurrent commits on one handle from one replica: whichever link is made where, the chain verifies', async (t) => {
  const { store } = await open(t);
  await funded(store, 'conc1', 100);
  await spend(store, 'conc1');
  for (let round = 0; round < 3; round++) await Promise.all(Array.from({ length: 25 }, () => spend(store, 'conc1')));
  const links = store.ledgerLinks();
  t.equal((links.gateway ?? 0) + (links.script ?? 0), 76, 'every spend made one link');
  const report = await verified(store);
  t.same(report.mismatches, []);
  t.equal(report.entries, 77);
  t.equal((await store.getHandle('conc1'))?.balances.sku, 24);
});

t.test('a failover lost the entry this replica remembers and another replica wrote one with the same id: Lua hashes the link, the chain verifies', async (t) => {
  const a = await open(t);
  const b = await open(t, a.prefix, a.clock);
  await funded(a.store, 'lost1', 10);
  await spend(a.store, 'lost1');
  await spend(a.store, 'lost1');
  const k = a.keys.handle('lost1');
  // What a replica that missed the next commit holds: the handle, its reservations and ledger as they are now.
  await a.store.reserve({ handleHash: 'lost1', principal: null, sku: 'sku', cost: 1, reservationId: 'lostA', reservationDeadline: Date.now() + 60_000, ttlMs: DAY, bucket: null });
  const snapshot = await Promise.all([k.handle, k.reservations, k.ledger].map(async (key) => [key, await direct.dumpBuffer(key), await direct.pttl(key)] as const));
  await a.store.commit('lost1', 'lostA', 'tool');
  const lost = (await allEntries(a.store, { kind: 'handle', handleHash: 'lost1' })).at(-1);
  for (const [key, dump, ttl] of snapshot) await direct.restore(key, ttl, dump, 'REPLACE');

  await spend(b.store, 'lost1', 'lostB'); // the same clock: the same at and seq as the lost entry
  const written = (await allEntries(a.store, { kind: 'handle', handleHash: 'lost1' })).at(-1);
  t.equal(`${written?.at}-${written?.seq}`, `${lost?.at}-${lost?.seq}`, 'the other replica\'s entry took the lost entry\'s id');
  t.not(written?.ref, lost?.ref);

  const before = a.store.ledgerLinks();
  await spend(a.store, 'lost1');
  t.same(a.store.ledgerLinks(), { gateway: before.gateway, script: (before.script ?? 0) + 1 }, 'the remembered head was not used');
  t.same((await verified(a.store)).mismatches, []);
});

t.test('a head the gateway forgot (bounded memory) or never had (a restart) costs a Lua hash, not a wrong link', async (t) => {
  const first = await open(t);
  await funded(first.store, 'restart1', 10);
  await spend(first.store, 'restart1');
  await spend(first.store, 'restart1');
  await first.store.close();
  const second = await open(t, first.prefix, first.clock);
  await spend(second.store, 'restart1');
  await spend(second.store, 'restart1');
  t.same(second.store.ledgerLinks(), { gateway: 1, script: 1 });
  t.same((await verified(second.store)).mismatches, []);
});
