// RedisStore against a real 3-master Redis Cluster: the shared conformance suite again, with every
// per-handle script in one slot and the global indexes written by companion commands.
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { createLogger } from '../../src/observability/logger.js';
import { RedisStore } from '../../src/store/redis.js';
import { startRedisCluster } from '../helpers/redis-server.js';
import { crossInstanceConformance, storeConformance } from './conformance.js';

const cluster = await startRedisCluster();
t.teardown(() => cluster.stop());
const logger = createLogger('silent');

storeConformance(t, 'RedisStore (cluster)', ({ now }) =>
  RedisStore.connect({ type: 'redis', redis: { url: undefined, cluster: cluster.seeds, keyPrefix: `tbtest:${randomBytes(6).toString('hex')}:` } }, { logger, now }),
);

// Two gateways on one Cluster: two RedisStore instances (two cluster clients) on one prefix.
crossInstanceConformance(t, 'RedisStore (cluster, two instances)', async ({ now }) => {
  const keyPrefix = `tbtest:${randomBytes(6).toString('hex')}:`;
  return Promise.all([0, 1].map(() => RedisStore.connect({ type: 'redis', redis: { url: undefined, cluster: cluster.seeds, keyPrefix } }, { logger, now })));
});
