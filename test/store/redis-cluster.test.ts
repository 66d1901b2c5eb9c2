// RedisStore against a real 3-master Redis Cluster: the shared conformance suite again, with every
// per-handle script in one slot and the global indexes written by companion commands.
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { createLogger } from '../../src/observability/logger.js';
import { RedisStore } from '../../src/store/redis.js';
import { startRedisCluster } from '../helpers/redis-server.js';
import { storeConformance } from './conformance.js';

const cluster = await startRedisCluster();
t.teardown(() => cluster.stop());
const logger = createLogger('silent');

storeConformance(t, 'RedisStore (cluster)', ({ now }) =>
  RedisStore.connect({ type: 'redis', redis: { url: undefined, cluster: cluster.seeds, keyPrefix: `tbtest:${randomBytes(6).toString('hex')}:` } }, { logger, now }),
);
