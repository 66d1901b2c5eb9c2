// RedisCore's WAIT discipline (SPEC §21) on a real primary and replica: a WAIT counts only the writes of
// the connection it is sent on, so an acknowledgement is trusted only from the socket the write went
// through, and concurrent writes share WAIT rounds instead of queueing one whole timeout each.
import { Redis } from 'ioredis';
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { createLogger } from '../../../src/observability/logger.js';
import { KeySpace } from '../../../src/store/keys.js';
import { openRedisClient } from '../../../src/store/redis-connection.js';
import { RedisCore } from '../../../src/store/redis/core.js';
import { waitFor } from '../../helpers/clock.js';
import { startRedis } from '../../helpers/redis-server.js';

const primary = await startRedis();
t.teardown(() => primary.stop());
const replica = await startRedis({ replicaOf: primary.port });
t.teardown(() => replica.stop());

async function core(): Promise<RedisCore> {
  const logger = createLogger('silent');
  const client = await openRedisClient({ url: primary.url, keyPrefix: 'tbcore:' }, logger);
  t.teardown(() => client.disconnect());
  return new RedisCore(client, new KeySpace(`tbcore${randomBytes(3).toString('hex')}:`), false, Date.now, logger, 60_000, { replicas: 1, timeoutMs: 400 });
}

t.test('a write acknowledged on its own socket is replicated', async (t) => {
  const redis = await core();
  const key = redis.keys.handle('h1').handle;
  const mark = await redis.mark(key);
  await redis.client.hset(key, 'x', '1');
  t.equal(await redis.replicated(mark), true);
});

t.test('after a reconnect between the write and its WAIT, the fresh socket\'s WAIT acknowledges nothing', async (t) => {
  const redis = await core();
  const client = redis.client as Redis;
  const key = redis.keys.handle('h2').handle;
  const mark = await redis.mark(key);
  await client.hset(key, 'x', '1');
  const before = client.stream;
  // What Sentinel does to a demoted primary's clients: they reconnect (to the new primary, in production).
  const admin = new Redis(primary.port, '127.0.0.1');
  t.teardown(() => admin.disconnect());
  await admin.client('KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
  await waitFor(async () => client.status === 'ready' && client.stream !== before, 'the store client reconnected');
  t.equal(Number(await client.call('WAIT', 1, 100)), 1, 'WAIT on the new socket answers at once with the replica (it wrote nothing)');
  t.equal(await redis.replicated(mark), false, 'so it does not count for the write made on the old one');
});
