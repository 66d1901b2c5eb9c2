// Operator endpoints (SPEC §4, §10): liveness, readiness (store ping ≤ 500 ms, upstream probe), metrics.
import type { FastifyInstance } from 'fastify';
import { withBudget } from '../io/budget.js';
import type { Metrics } from '../observability/metrics.js';
import type { UpstreamTarget } from '../proxy/upstream-target.js';
import type { Store } from '../store/store.js';

const STORE_PING_TIMEOUT_MS = 500;

export function registerOpsRoutes(app: FastifyInstance, deps: { store: Store; upstream: UpstreamTarget; servers?: Record<string, UpstreamTarget>; metrics: Metrics; metricsConfig: { enabled: boolean; path: string } }): void {
  app.get('/healthz', async () => ({ ok: true }));

  app.get('/readyz', async (_request, reply) => {
    const names = Object.keys(deps.servers ?? {});
    const [store, upstream, ...probes] = await Promise.all([pingStore(deps.store), deps.upstream.probe(), ...names.map((name) => (deps.servers as Record<string, UpstreamTarget>)[name]!.probe())]);
    // SPEC §18: every endpoint's upstream counts; `servers` lists those of the `servers` entries by key.
    const servers = Object.fromEntries(names.map((name, index) => [name, probes[index] as { ok: boolean; detail: string }]));
    const ok = store.ok && upstream.ok && Object.values(servers).every((probe) => probe.ok);
    const body = names.length > 0 ? { ok, store, upstream, servers } : { ok, store, upstream };
    return reply.code(body.ok ? 200 : 503).send(body);
  });

  if (deps.metricsConfig.enabled) {
    app.get(deps.metricsConfig.path, async (_request, reply) => {
      const text = await deps.metrics.registry.metrics();
      return reply.type(deps.metrics.registry.contentType).send(text);
    });
  }
}

async function pingStore(store: Store): Promise<{ ok: boolean; detail: string }> {
  try {
    await withBudget(store.ping(), STORE_PING_TIMEOUT_MS, 'timeout');
    return { ok: true, detail: `${store.kind} store answered` };
  } catch {
    return { ok: false, detail: `${store.kind} store did not answer within ${STORE_PING_TIMEOUT_MS} ms` };
  }
}
