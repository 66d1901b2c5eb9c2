// SPEC §6.5/§8: "The reservation and its index entry for the reconciler are written by the same
// script; no failure path may leave a reservation outside that index." Checked on real servers:
// an index write that cannot happen reserves nothing, and in Cluster a node crash in the middle of a
// reserve (the moment a two-command design would need its compensating release) leaves the
// reservation where the reconciler's stale sweep finds it.
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import t, { type Test } from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import type { RedisStoreConfig } from '../../src/store/redis.js';
import { createLogger } from '../../src/observability/logger.js';
import { KeySpace } from '../../src/store/keys.js';
import { RedisStore } from '../../src/store/redis.js';
import type { SpendRequest } from '../../src/store/store.js';
import { cli, startRedis, startRedisCluster } from '../helpers/redis-server.js';

const HOUR = 3_600_000;
const logger = createLogger('silent');

const spend = (handleHash: string, reservationId: string): SpendRequest => ({
  handleHash,
  principal: null,
  sku: 'research',
  cost: 1,
  reservationId,
  reservationDeadline: Date.now() + 25_000,
  ttlMs: HOUR,
  bucket: null,
});

/** Owner port of every slot, from CLUSTER SLOTS. */
async function slotOwners(port: number): Promise<(slot: number) => number> {
  const connection = new Redis(port, '127.0.0.1');
  const reply = (await connection.call('CLUSTER', 'SLOTS')) as [number, number, [string, number, ...unknown[]]][];
  connection.disconnect();
  const ranges = reply.map(([start, end, [, owner]]) => ({ start, end, port: owner }));
  return (slot) => {
    const range = ranges.find((r) => slot >= r.start && slot <= r.end);
    if (!range) throw new Error(`no owner for slot ${slot}`);
    return range.port;
  };
}

const keySlot = (port: number, key: string): number => Number(cli(port, 'cluster', 'keyslot', key).trim());

async function indexWriteImpossible(t: Test, storeConfig: RedisStoreConfig, keys: KeySpace, clustered: boolean, raw: (key: string) => Redis): Promise<void> {
  const store = await RedisStore.connect(storeConfig, { logger });
  t.teardown(() => store.close());
  const handleHash = randomBytes(8).toString('hex');
  await store.createHandle({ handleHash, fingerprint: 'tb_s_idx0..0000', principal: null, ttlMs: HOUR });
  await store.grantCredits(handleHash, 'research', 5);
  const index = keys.reservationIndexOf(handleHash, clustered);
  await raw(index).set(index, 'not a sorted set', 'PX', 60_000);
  await t.rejects(store.reserve(spend(handleHash, 'r-1')), { code: 'TB_ERR_STORE_UNAVAILABLE' }, 'the reserve fails');
  const k = keys.handle(handleHash);
  t.equal(await raw(k.reservations).hlen(k.reservations), 0, 'no reservation was written');
  t.equal((await store.getHandle(handleHash))?.balances.research, 5, 'no credit moved');
}

t.test('standalone: when the index write fails, nothing is reserved', async (t) => {
  const server = await startRedis();
  t.teardown(() => server.stop());
  const prefix = `tbidx${randomBytes(3).toString('hex')}:`;
  const raw = new Redis(server.port, '127.0.0.1');
  t.teardown(() => raw.disconnect());
  await indexWriteImpossible(t, { type: 'redis', redis: { url: server.url, keyPrefix: prefix } }, new KeySpace(prefix), false, () => raw);
});

t.test('cluster: when the index write fails, nothing is reserved', async (t) => {
  const cluster = await startRedisCluster();
  t.teardown(() => cluster.stop());
  const prefix = `tbidx${randomBytes(3).toString('hex')}:`;
  const owner = await slotOwners(cluster.ports[0] as number);
  const connections = new Map(cluster.ports.map((port) => [port, new Redis(port, '127.0.0.1')]));
  t.teardown(() => connections.forEach((c) => c.disconnect()));
  const raw = (key: string): Redis => connections.get(owner(keySlot(cluster.ports[0] as number, key))) as Redis;
  await indexWriteImpossible(t, { type: 'redis', redis: { url: undefined, cluster: cluster.seeds, keyPrefix: prefix } }, new KeySpace(prefix), true, raw);
});

t.test('cluster: a node crash in the middle of a reserve leaves no reservation outside the stale sweep', async (t) => {
  const cluster = await startRedisCluster({ persist: true });
  t.teardown(() => cluster.stop());
  const seed = cluster.ports[0] as number;
  const prefix = `tbidx${randomBytes(3).toString('hex')}:`;
  const keys = new KeySpace(prefix);
  const owner = await slotOwners(seed);
  // The handle lives on one master; the node of the old global index ({reservations}) is another.
  const otherPort = owner(keySlot(seed, keys.reservationIndex));
  let handleHash: string;
  do handleHash = randomBytes(8).toString('hex');
  while (owner(keySlot(seed, keys.handle(handleHash).handle)) === otherPort);
  const handlePort = owner(keySlot(seed, keys.handle(handleHash).handle));
  const nodeOf = (port: number) => cluster.nodes.find((n) => n.port === port) as (typeof cluster.nodes)[number];
  const storeConfig: RedisStoreConfig = { type: 'redis', redis: { url: undefined, cluster: cluster.seeds, keyPrefix: prefix } };

  const store = await RedisStore.connect(storeConfig, { logger });
  await store.createHandle({ handleHash, fingerprint: 'tb_s_idx1..1111', principal: null, ttlMs: HOUR });
  await store.grantCredits(handleHash, 'research', 5);

  // The other node hangs; the reserve runs on the handle's node; the moment its reservation exists,
  // the handle's node crashes (its append-only file keeps what the script wrote).
  const watcher = new Redis(handlePort, '127.0.0.1');
  nodeOf(otherPort).kill('SIGSTOP');
  const outcome = store.reserve(spend(handleHash, 'r-crash')).then(
    (decision) => decision.kind,
    (error: { code?: string }) => error.code ?? 'error',
  );
  const k = keys.handle(handleHash);
  const started = Date.now();
  while ((await watcher.hlen(k.reservations)) === 0) {
    if (Date.now() - started > 5_000) throw new Error('the reserve never reached the handle node');
    await sleep(2);
  }
  nodeOf(handlePort).kill('SIGKILL');
  watcher.disconnect();
  t.comment(`reserve during the crash: ${await outcome}`);
  await store.close();

  nodeOf(otherPort).kill('SIGCONT');
  await nodeOf(handlePort).restart();
  await cluster.waitHealthy();

  const after = await RedisStore.connect(storeConfig, { logger });
  t.teardown(() => after.close());
  t.equal((await after.getHandle(handleHash))?.balances.research, 4, 'the reservation survived the crash (it holds one credit)');
  // Its shard may not be in the sweep's directory (that write went to a hung node): the rotating
  // walk over every slot reaches it within 16 passes.
  let released = 0;
  for (let pass = 0; pass < 17 && released === 0; pass++) released += await after.releaseStaleReservations(Date.now() + HOUR, 100);
  t.equal(released, 1, 'the stale sweep finds it');
  t.equal((await after.getHandle(handleHash))?.balances.research, 5, 'and gives the credit back');
});
