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

// §23: a budget's counters live in other slots than the handle, so Cluster holds them beside the
// credit (the paywall's cross-slot order) and never lets budget parts into a credit script.
t.test('Cluster holds budgets beside the credit: quotasWithCredits is false and a credit call with budget parts is refused, moving nothing', async (t) => {
  const store = await RedisStore.connect({ type: 'redis', redis: { url: undefined, cluster: cluster.seeds, keyPrefix: `tbtest:${randomBytes(6).toString('hex')}:` } }, { logger, now: Date.now });
  t.teardown(() => store.close());
  t.equal(store.quotasWithCredits, false);
  const handleHash = `h_${randomBytes(9).toString('hex')}`;
  await store.createHandle({ handleHash, fingerprint: 'tb_s_abcd..wxyz', principal: null, ttlMs: 3_600_000 });
  await store.grantCredits(handleHash, 'research', 3);
  const now = Date.now();
  const draw = { name: 'budget:daily', subject: `h:${handleHash}`, windowMs: 86_400_000, windowStart: now - (now % 86_400_000), calls: 1, credits: 1, maxCalls: 5, maxCredits: null };
  const request = { handleHash, principal: null, sku: 'research', cost: 1, reservationId: 'r1', reservationDeadline: now + 60_000, ttlMs: 3_600_000, bucket: null };
  await t.rejects(store.reserve({ ...request, quotas: { holdId: 'r1', draws: [draw], deadline: now + 60_000 } }), { code: 'TB_ERR_INTERNAL' });
  t.same((await store.getHandle(handleHash))?.balances, { research: 3 }, 'no credit moved');
  t.same((await store.quotaUsage([draw]))[0], { name: draw.name, subject: draw.subject, windowMs: draw.windowMs, windowStart: draw.windowStart, calls: 0, credits: 0 });
  t.match(await store.reserve(request), { kind: 'reserved', remaining: 2 });
  await t.rejects(store.commit(handleHash, 'r1', '', undefined, { holdId: 'r1', counters: [draw] }), { code: 'TB_ERR_INTERNAL' });
  t.equal(await store.commit(handleHash, 'r1'), 2, 'the refused commit left the reservation to be committed');
});
