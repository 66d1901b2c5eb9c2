// Budgets and allowances on Redis (store/redis/quotas.ts; SPEC §23): what the conformance suite
// cannot show with one store. Caps hold across replicas (two RedisStore instances on one Redis,
// standalone and Cluster); a request over two subjects is all or nothing under contention; a
// reserve whose reply was lost (real TCP proxy cut after the script ran) draws once; and a
// crash between the subjects of one request leaves a hold the stale sweep gives back.
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { createLogger } from '../../src/observability/logger.js';
import { RedisStore, type RedisStoreConfig } from '../../src/store/redis.js';
import { quotaWindowStart, type QuotaDraw, type Store } from '../../src/store/store.js';
import { startCuttableProxy } from '../helpers/cuttable-proxy.js';
import { startRedis, startRedisCluster } from '../helpers/redis-server.js';
import { sweepQuotas } from './quota-conformance.js';

const logger = createLogger('silent');
const DAY = 86_400_000;

const server = await startRedis();
t.teardown(() => server.stop());

const prefix = (): string => `tbq${randomBytes(4).toString('hex')}:`;
const standalone = (keyPrefix: string): RedisStoreConfig => ({ type: 'redis', redis: { url: server.url, keyPrefix } });

async function connect(config: RedisStoreConfig): Promise<RedisStore> {
  const store = await RedisStore.connect(config, { logger });
  t.teardown(() => store.close());
  return store;
}

function draw(subject: string, overrides: Partial<QuotaDraw> = {}): QuotaDraw {
  const now = Date.now();
  return { name: 'budget:daily', subject, windowMs: DAY, windowStart: quotaWindowStart(now, DAY), calls: 1, credits: 1, maxCalls: 50, maxCredits: null, ...overrides };
}

/** `calls` concurrent reserves spread over the stores, each its own call (hold id); how many were held. */
async function concurrentHolds(stores: Store[], draws: QuotaDraw[], calls = 200): Promise<number> {
  const decisions = await Promise.all(
    Array.from({ length: calls }, (_, i) => (stores[i % stores.length] as Store).reserveQuotas({ holdId: `c${i}-${randomBytes(4).toString('hex')}`, draws, deadline: Date.now() + 60_000 })),
  );
  return decisions.filter((decision) => decision.kind === 'held').length;
}

/** A naive cap check (read the use, then draw without a cap): what the scripts exist to prevent. */
async function naiveHolds(stores: Store[], cap: QuotaDraw, calls = 200): Promise<number> {
  const held = await Promise.all(
    Array.from({ length: calls }, async (_, i) => {
      const store = stores[i % stores.length] as Store;
      const [usage] = await store.quotaUsage([cap]);
      if ((usage?.calls ?? 0) >= (cap.maxCalls ?? Infinity)) return false;
      return (await store.reserveQuotas({ holdId: `n${i}`, draws: [{ ...cap, maxCalls: null }], deadline: Date.now() + 60_000 })).kind === 'held';
    }),
  );
  return held.filter(Boolean).length;
}

for (const mode of ['standalone', 'cluster'] as const) {
  t.test(`${mode}: 200 concurrent calls from two replicas against maxCalls 50 hold exactly 50`, async (t) => {
    let config: RedisStoreConfig;
    if (mode === 'cluster') {
      const cluster = await startRedisCluster();
      t.teardown(() => cluster.stop());
      config = { type: 'redis', redis: { url: undefined, cluster: cluster.seeds, keyPrefix: prefix() } };
    } else {
      config = standalone(prefix());
    }
    const stores = [await connect(config), await connect(config)];
    const cap = draw(`p:${randomBytes(4).toString('hex')}`);
    t.equal(await concurrentHolds(stores, [cap]), 50);
    t.same((await stores[0]!.quotaUsage([cap])).map((u) => [u.calls, u.credits]), [[50, 50]]);

    // Two subjects (in Cluster, two slots): the allowance refuses after 30, and every budget draw of a refused call is given back.
    const budget = draw(`p:a${randomBytes(4).toString('hex')}`);
    const allowance = draw(`p:z${randomBytes(4).toString('hex')}`, { name: 'allowance:trial', credits: 0, maxCalls: 30 });
    t.equal(await concurrentHolds(stores, [budget, allowance]), 30);
    t.same((await stores[1]!.quotaUsage([budget, allowance])).map((u) => u.calls), [30, 30], 'all or nothing under contention');
  });
}

t.test('negative control: a read-then-draw cap check lets more than 50 through', async (t) => {
  const config = standalone(prefix());
  const stores = [await connect(config), await connect(config)];
  const held = await naiveHolds(stores, draw(`p:${randomBytes(4).toString('hex')}`));
  t.ok(held > 50, `${held} held`);
});

t.test('a reserve whose reply was lost draws once and answers held', async (t) => {
  const proxy = await startCuttableProxy(server.port);
  t.teardown(() => proxy.close());
  const store = await connect({ type: 'redis', redis: { url: proxy.url, keyPrefix: prefix() } });
  const cap = draw(`p:${randomBytes(4).toString('hex')}`, { maxCalls: 2 });
  // Every script is loaded first, so the reply swallowed is the script's own, not a NOSCRIPT.
  await store.reserveQuotas({ holdId: 'warm', draws: [cap], deadline: Date.now() + 60_000 });
  await store.concludeQuotas('warm', [cap], 'release');
  const before = proxy.swallowed;
  proxy.cutNextReply();
  t.same(await store.reserveQuotas({ holdId: 'q1', draws: [cap], deadline: Date.now() + 60_000 }), { kind: 'held' });
  t.equal(proxy.swallowed, before + 1, 'the first reply was lost');
  t.same((await store.quotaUsage([cap])).map((u) => u.calls), [1], 'drawn once');

  proxy.cutNextReply();
  await store.concludeQuotas('q1', [cap], 'release');
  t.equal(proxy.swallowed, before + 2);
  t.same((await store.quotaUsage([cap])).map((u) => u.calls), [0], 'given back once');
});

t.test('a crash between the subjects of one request leaves a hold the stale sweep gives back after its deadline', async (t) => {
  const store = await connect(standalone(prefix()));
  const first = draw(`p:a${randomBytes(4).toString('hex')}`, { maxCalls: 1 });
  const second = draw(`p:z${randomBytes(4).toString('hex')}`);
  const deadline = Date.now() + 1_000;
  // What a gateway that died after the first subject's script leaves: that subject's part alone.
  t.same(await store.reserveQuotas({ holdId: 'crashed', draws: [first], deadline }), { kind: 'held' });
  t.match(await store.reserveQuotas({ holdId: 'other', draws: [first, second], deadline: Date.now() + 60_000 }), { kind: 'exceeded', subject: first.subject }, 'the cap is held meanwhile');
  t.equal(await store.releaseStaleQuotas(deadline, 100), 0, 'not at the deadline itself');
  t.equal(await sweepQuotas(store, deadline + 1, 1), 1);
  t.same((await store.quotaUsage([first, second])).map((u) => u.calls), [0, 0]);
  t.same(await store.reserveQuotas({ holdId: 'later', draws: [first, second], deadline: Date.now() + 60_000 }), { kind: 'held' });
});
