// RedisStore against a real standalone redis-server: the shared conformance suite, each test in
// its own key prefix so the global indexes (due, live, all charges) start empty; then the same
// server reached through a real Sentinel.
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import t from 'tap';
import { createLogger } from '../../src/observability/logger.js';
import { RedisStore } from '../../src/store/redis.js';
import { startRedis, startRedisSentinel } from '../helpers/redis-server.js';
import { crossInstanceConformance, storeConformance } from './conformance.js';

const server = await startRedis();
t.teardown(() => server.stop());
const logger = createLogger('silent');

storeConformance(t, 'RedisStore (standalone)', ({ now }) =>
  RedisStore.connect({ type: 'redis', redis: { url: server.url, keyPrefix: `tbtest:${randomBytes(6).toString('hex')}:` } }, { logger, now }),
);

// Two gateways on one Redis: two RedisStore instances (two connections, two script caches) on one prefix.
crossInstanceConformance(t, 'RedisStore (standalone, two instances)', async ({ now }) => {
  const keyPrefix = `tbtest:${randomBytes(6).toString('hex')}:`;
  return Promise.all([0, 1].map(() => RedisStore.connect({ type: 'redis', redis: { url: server.url, keyPrefix } }, { logger, now })));
});

t.test('a Sentinel URL finds the master and the store works through it', async (t) => {
  const sentinel = await startRedisSentinel(server.port);
  t.teardown(() => sentinel.stop());
  const store = await RedisStore.connect({ type: 'redis', redis: { url: sentinel.url, keyPrefix: 'tbsentinel:' } }, { logger });
  t.teardown(() => store.close());
  await store.createHandle({ handleHash: 'h1', fingerprint: 'tb_s_aaaa..1111', principal: null, ttlMs: 3_600_000 });
  t.equal(await store.grantCredits('h1', 'research', 2), 2);
  const master = new Redis(server.port, '127.0.0.1');
  t.teardown(() => master.disconnect());
  t.equal(await master.hget('tbsentinel:{h:h1}', 'b:research'), '2', 'written on the master');
});
