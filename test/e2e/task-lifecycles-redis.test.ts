// SPEC §24 + §6.5 on a real Redis: 120 randomised task lifecycles (test/helpers/task-lifecycles.ts)
// against a stateless JSON upstream. Mid-batch the gateway is replaced by a fresh one on the same Redis
// (a restart: nothing of the old process survives but the store) and the old one closes; the tasks it
// created are read through the new one. Delivered ⇔ charged exactly once, for every lifecycle.
import t from 'tap';
import { wallClock } from '../helpers/clock.js';
import { connectStore } from '../helpers/gateway-process.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { startRedis } from '../helpers/redis-server.js';
import { lifecycleConfig, runLifecycles, sessionNames } from '../helpers/task-lifecycles.js';
import { startTaskUpstream } from '../helpers/task-upstream.js';

t.test('120 task lifecycles on a real Redis, each batch finished by a fresh gateway on the same store', async (t) => {
  const upstream = await startTaskUpstream();
  t.teardown(() => upstream.close());
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  let wall = Date.now();
  const clock = wallClock(() => wall);
  const input = lifecycleConfig(upstream.url, { store: { type: 'redis', redis: { url: redis.url, keyPrefix: 'lifecycles:' } } });
  const gateways: TestGateway[] = [await startTestGateway(t, input, { clock })];
  const current = (): TestGateway => gateways[gateways.length - 1] as TestGateway;
  await runLifecycles(t, {
    sessions: sessionNames('lifecycle'),
    url: () => current().url,
    store: await connectStore(t, { url: redis.url }, 'lifecycles:'),
    hashSecret: current().config.handles.hashSecret,
    advance: (ms) => void (wall += ms),
    rebuild: async () => {
      // A restart: a new gateway on the same Redis takes the traffic; the old one drains its requests and closes.
      const previous = current();
      gateways.push(await startTestGateway(t, input, { clock }));
      await previous.close();
    },
    reconcile: async () => {
      // The reconciler runs on one gateway at a time (a lease in Redis): the closed one's lease lapses first.
      for (let pass = 0; pass < 100; pass++) {
        const report = await current().reconciler.tick();
        if (report.leader && report.released === 0) return;
        if (!report.leader) await new Promise((resolve) => setTimeout(resolve, 100));
      }
      throw new Error('the reconciler never ran');
    },
  }, upstream, 120, 31);
});
