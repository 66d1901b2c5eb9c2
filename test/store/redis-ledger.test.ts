// What only the Redis store's ledger has to show (SPEC §17, src/store/README.md "Ledger"): handles
// funded before the ledger existed (an upgrade) get an opening entry at their first movement, and the
// grace period that lets the expiry step find them; a handle whose keys vanished before the expiry
// step ran is what verify reports.
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import t, { type Test } from 'tap';
import { createLogger } from '../../src/observability/logger.js';
import { KeySpace } from '../../src/store/keys.js';
import { RedisStore } from '../../src/store/redis.js';
import { HANDLE_GRACE_MS } from '../../src/store/policy.js';
import { startRedis } from '../helpers/redis-server.js';
import { allEntries, expireAll, verified } from './ledger-conformance.js';

const HOUR = 3_600_000;
const server = await startRedis();
t.teardown(() => server.stop());
const direct = new Redis(server.url);
t.teardown(() => direct.disconnect());

async function fresh(t: Test): Promise<{ store: RedisStore; keys: KeySpace; clock: { at: number } }> {
  const prefix = `tbrl${randomBytes(4).toString('hex')}:`;
  const clock = { at: Date.now() };
  const store = await RedisStore.connect({ type: 'redis', redis: { url: server.url, keyPrefix: prefix } }, { logger: createLogger('silent'), now: () => clock.at });
  t.teardown(() => store.close());
  return { store, keys: new KeySpace(prefix), clock };
}

/** A handle as the store wrote it before the ledger: a balance, a TTL of exactly its life, no ledger. */
async function preLedgerHandle(keys: KeySpace, handleHash: string, balance: number, now: number): Promise<void> {
  const key = keys.handle(handleHash).handle;
  await direct.hset(key, 'fp', 'tb_s_olde..r001', 'x', String(now + HOUR), 'b:research', String(balance), 'f:research', '1');
  await direct.pexpire(key, HOUR);
}

t.test('a handle funded before the ledger: verify lists it; its first movement writes an opening entry and it agrees', async (t) => {
  const { store, keys, clock } = await fresh(t);
  await preLedgerHandle(keys, 'old1', 5, clock.at);
  const before = await verified(store);
  t.match(before.mismatches, [{ account: 'tb_s_olde..r001', sku: 'research', expected: 0, found: 5, problem: 'balance', detail: 'no ledger entries vs stored balance 5 + reserved 0' }]);

  await store.grantCredits('old1', 'research', 2, 'top up');
  t.match(await allEntries(store, { kind: 'handle', handleHash: 'old1' }), [
    { seq: 1, kind: 'adjust', credits: 5, balanceAfter: 5, reason: 'opening balance: credits held before the ledger existed', fingerprint: 'tb_s_olde..r001' },
    { seq: 2, kind: 'adjust', credits: 2, balanceAfter: 7, reason: 'top up' },
  ]);
  t.same((await verified(store)).mismatches, []);
  t.ok((await direct.pttl(keys.handle('old1').handle)) > HOUR + HANDLE_GRACE_MS - 60_000, 'the funded handle now lives the grace period past its expiry');
});

t.test('a pre-ledger handle that expires is ended with an opening and an expire entry', async (t) => {
  const { store, keys, clock } = await fresh(t);
  await preLedgerHandle(keys, 'old2', 4, clock.at);
  await store.grantCredits('old2', 'research', 1, 'puts it in the expiry index');
  clock.at += HOUR + 1;
  t.equal(await expireAll(store, clock.at), 1);
  t.same((await allEntries(store, { kind: 'handle', handleHash: 'old2' })).map((entry) => [entry.kind, entry.credits, entry.balanceAfter]), [
    ['adjust', 4, 4],
    ['adjust', 1, 5],
    ['expire', -5, 0],
  ]);
  t.same((await verified(store)).mismatches, []);
});

t.test('negative control: a handle whose keys vanished before the expiry step ran is reported', async (t) => {
  const { store, keys } = await fresh(t);
  await store.createHandle({ handleHash: 'gone', fingerprint: 'tb_s_gone..0001', principal: null, ttlMs: HOUR });
  await store.grantCredits('gone', 'research', 3, 'funded');
  await direct.del(keys.handle('gone').handle); // what a stalled reconciler past the grace period leads to
  t.match((await verified(store)).mismatches, [{ account: 'tb_s_gone..0001', sku: 'research', expected: 3, found: 0, problem: 'balance' }]);
});

t.test('an entry changed inside Redis (balances still adding up) is reported by verify as a broken chain, naming the fingerprint and seq', async (t) => {
  const { store, keys } = await fresh(t);
  await store.createHandle({ handleHash: 'edit1', fingerprint: 'tb_s_edit..ed01', principal: null, ttlMs: HOUR });
  await store.grantCredits('edit1', 'research', 5, 'float');
  for (const [i, tool] of ['search', 'fetch'].entries()) {
    await store.reserve({ handleHash: 'edit1', principal: null, sku: 'research', cost: 1, reservationId: `r${i}`, reservationDeadline: Date.now() + 60_000, ttlMs: HOUR, bucket: null });
    await store.commit('edit1', `r${i}`, tool);
  }
  t.same((await verified(store)).mismatches, [], 'the untouched ledger verifies');

  // Rewrite the stream with the tool of seq 2 changed: what an insider editing Redis would do.
  const ledgerKey = keys.handle('edit1').ledger;
  const items = (await direct.xrange(ledgerKey, '-', '+')) as [string, string[]][];
  await direct.del(ledgerKey);
  for (const [id, flat] of items) {
    const fields = id.endsWith('-2') ? flat.map((value, i) => (flat[i - 1] === 't' ? 'extract_tables' : value)) : flat;
    await direct.xadd(ledgerKey, id, ...fields);
  }
  const { mismatches } = await verified(store);
  t.match(mismatches, [{ account: 'tb_s_edit..ed01', problem: 'chain', detail: /seq 3's prev is not the hash of seq 2/ }]);
  t.equal(mismatches.length, 1, 'balances still agree: only the chain shows the edit');
});
