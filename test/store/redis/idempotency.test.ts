// The Redis side of idempotent results, looked at in Redis itself: one hash per slot under its own hash
// tag, the marker's TTL then the result's, nothing left by an abandoned call.
import { Redis } from 'ioredis';
import t from 'tap';
import { createLogger } from '../../../src/observability/logger.js';
import { RedisStore } from '../../../src/store/redis.js';
import { startRedis } from '../../helpers/redis-server.js';

const server = await startRedis();
t.teardown(() => server.stop());

t.test('one hash-tagged key per slot: scope and owner while running, the result once kept, gone when abandoned', async (t) => {
  const store = await RedisStore.connect({ type: 'redis', redis: { url: server.url, keyPrefix: 'tbidem:' } }, { logger: createLogger('silent') });
  t.teardown(() => store.close());
  const redis = new Redis(server.port, '127.0.0.1');
  t.teardown(() => redis.disconnect());
  const slot = 'ab'.repeat(32);
  const key = `tbidem:{idem:${slot}}`;
  await store.beginIdempotent(slot, { scope: 'scope-1', owner: 'owner-1', runningTtlMs: 30_000 });
  t.same(await redis.hgetall(key), { s: 'scope-1', o: 'owner-1' });
  const runningTtl = await redis.pttl(key);
  t.ok(runningTtl > 25_000 && runningTtl <= 30_000, `the marker lives runningTtlMs (${runningTtl} ms)`);
  await store.finishIdempotent(slot, 'owner-1', '{"content":[]}', 3_600_000);
  t.equal(await redis.hget(key, 'r'), '{"content":[]}');
  t.ok((await redis.pttl(key)) > 3_500_000, 'then the result lives ttlMs');
  const other = 'cd'.repeat(32);
  await store.beginIdempotent(other, { scope: 'scope-1', owner: 'owner-2', runningTtlMs: 30_000 });
  await store.abandonIdempotent(other, 'owner-2');
  t.equal(await redis.exists(`tbidem:{idem:${other}}`), 0, 'an abandoned call leaves no key');
  t.same((await redis.keys('tbidem:*')).sort(), [key]);
});
