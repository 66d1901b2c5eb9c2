// SPEC §24 + §6.5: 1,000 randomised task lifecycles (test/helpers/task-lifecycles.ts) on the memory store,
// against an upstream with sessions and SSE replies; the gateway is reloaded (rebuilt on the same store,
// SIGHUP's path) while each batch's tasks are held. Delivered ⇔ charged exactly once, for every lifecycle.
import t from 'tap';
import { wallClock } from '../helpers/clock.js';
import { startTestGateway } from '../helpers/gateway.js';
import { configFile, lifecycleConfig, openSessions, runLifecycles } from '../helpers/task-lifecycles.js';
import { startTaskUpstream } from '../helpers/task-upstream.js';

t.test('1,000 task lifecycles on the memory store, the gateway reloaded mid-task each batch', async (t) => {
  const upstream = await startTaskUpstream({ resumable: true });
  t.teardown(() => upstream.close());
  let wall = Date.now();
  const input = lifecycleConfig(upstream.url);
  const gateway = await startTestGateway(t, input, { clock: wallClock(() => wall), configPath: configFile(t, input) });
  await runLifecycles(t, {
    sessions: await openSessions(gateway.url),
    url: () => gateway.url,
    store: gateway.store,
    hashSecret: gateway.config.handles.hashSecret,
    advance: (ms) => void (wall += ms),
    rebuild: async () => {
      if ((await gateway.reload()) !== 'success') throw new Error('the reload failed');
    },
    reconcile: async () => {
      while ((await gateway.reconciler.tick()).released > 0);
    },
  }, upstream, 1_000, 30);
});
