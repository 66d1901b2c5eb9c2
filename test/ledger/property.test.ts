// Property (SPEC §17), run on each store: memory, Redis, Redis Cluster. What the property says, the
// command generator and the oracle model are in property-model.ts; the negative controls that show it
// can fail are in property-controls.test.ts.
import { randomBytes } from 'node:crypto';
import t, { type Test } from 'tap';
import { createLogger } from '../../src/observability/logger.js';
import { MemoryStore } from '../../src/store/memory.js';
import { RedisStore } from '../../src/store/redis.js';
import { startRedis, startRedisCluster } from '../helpers/redis-server.js';
import { outcomes, propertyHolds, stats, type MakeStore } from './property-model.js';

async function checkProperty(t: Test, name: string, makeStore: MakeStore, numRuns: number, endWithExpiry: boolean): Promise<void> {
  stats.waits = 0;
  const started = performance.now();
  const { runs, entries } = await propertyHolds(makeStore, numRuns, endWithExpiry);
  t.comment(`${name}: ${runs} runs, ${entries} entries verified (${(entries / Math.max(1, runs)).toFixed(1)} per run), ${Math.round(performance.now() - started)} ms`);
  t.comment(`${name}: authorisations ${JSON.stringify(outcomes)}, ${stats.waits} timer waits skipped`);
  for (const key of Object.keys(outcomes)) delete outcomes[key];
  t.equal(runs, numRuns);
}

t.test('memory: any interleaving leaves a ledger that verifies and spends exactly the charged calls', async (t) => {
  await checkProperty(t, 'memory', async (clock) => new MemoryStore({ now: () => clock.at }), 100, true);
});

t.test('Redis standalone: the same property', async (t) => {
  const server = await startRedis();
  t.teardown(() => server.stop());
  const logger = createLogger('silent');
  await checkProperty(t, 'redis', (clock) => RedisStore.connect({ type: 'redis', redis: { url: server.url, keyPrefix: `tbprop${randomBytes(4).toString('hex')}:` } }, { logger, now: () => clock.at }), 30, true);
});

t.test('Redis Cluster: the same property (handles are ended whenever the expiry walk reaches them, or not at all)', async (t) => {
  const cluster = await startRedisCluster();
  t.teardown(() => cluster.stop());
  const logger = createLogger('silent');
  await checkProperty(t, 'cluster', (clock) => RedisStore.connect({ type: 'redis', redis: { url: undefined, cluster: cluster.seeds, keyPrefix: `tbprop${randomBytes(4).toString('hex')}:` } }, { logger, now: () => clock.at }), 15, false);
});
