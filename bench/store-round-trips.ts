// How many Redis commands a paid call costs, standalone and Cluster, without and with a budget
// counting every call (src/store/README.md, "Round trips of a paid call"). One in-process gateway per target (dev provider, the reconciler stopped so
// only the calls count), a handle funded through the real checkout, then N paid calls one after the
// other; INFO commandstats is reset before and read after on every node.
//   node --import tsx bench/store-round-trips.ts [N]
// Not part of `npm run bench`: it counts commands, it does not time anything.
import { Redis } from 'ioredis';
import { configSchema } from '../src/config/schema.js';
import { createLogger } from '../src/observability/logger.js';
import { runGateway } from '../src/start.js';
import { freePort, fundedHandle, rawToolCall, testConfig } from '../test/helpers/gateway.js';
import { startPaidUpstream } from '../test/helpers/paid-upstream.js';
import { startRedis, startRedisCluster } from '../test/helpers/redis-server.js';

const CALLS = Number(process.argv[2] ?? 200);

async function commandStats(ports: number[]): Promise<Map<string, number>> {
  const totals = new Map<string, number>();
  for (const port of ports) {
    const node = new Redis({ port, host: '127.0.0.1' });
    const text = await node.info('commandstats');
    node.disconnect();
    for (const [, name, calls] of text.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) totals.set(name as string, (totals.get(name as string) ?? 0) + Number(calls));
  }
  return totals;
}

async function resetStats(ports: number[]): Promise<void> {
  for (const port of ports) {
    const node = new Redis({ port, host: '127.0.0.1' });
    await node.config('RESETSTAT');
    node.disconnect();
  }
}

/** A per-handle budget every paid call draws on, caps far above what the run spends (SPEC §23). */
const BUDGET = { budgets: [{ name: 'daily', per: 'handle' as const, tools: ['fetch_readable'], window: '1d', maxCalls: 1_000_000 }] };

async function measure(label: string, redis: { url?: string; cluster?: string[] }, ports: number[], budget = false): Promise<void> {
  const upstream = await startPaidUpstream('stateless-json');
  const input = testConfig(upstream.url, {
    ...(budget ? BUDGET : {}),
    server: { host: '127.0.0.1', port: await freePort() },
    store: { type: 'redis', redis: { ...redis, keyPrefix: 'tbrt:' } },
    skus: { research: { label: 'Research tools', amount: '5.00', currency: 'USDC', credits: CALLS + 10 } },
    logging: { level: 'silent' },
  });
  const running = await runGateway(configSchema.parse(input), { logger: createLogger('silent') });
  await running.reconciler.stop();
  try {
    const handle = await fundedHandle(running);
    // The first paid call settles the charge; count only the calls after it.
    await rawToolCall(running, 'fetch_readable', { url: 'warm', tollboothToken: handle });
    await new Promise((resolve) => setTimeout(resolve, 200)); // background upkeep of the warm-up call
    await resetStats(ports);
    for (let i = 0; i < CALLS; i++) {
      const reply = await rawToolCall(running, 'fetch_readable', { url: `x${i}`, tollboothToken: handle });
      if (!(reply as { result?: { _meta?: Record<string, unknown> } }).result?._meta?.['xyz.tollbooth/receipt']) throw new Error(`call ${i} was not paid: ${JSON.stringify(reply).slice(0, 200)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
    const stats = await commandStats(ports);
    const perCall = [...stats].filter(([name]) => !['info', 'config', 'cluster', 'ping', 'command'].includes(name)).map(([name, calls]) => `${name} ${(calls / CALLS).toFixed(2)}`);
    console.log(`${label}: per paid call (${CALLS} calls): ${perCall.join(', ')}`);
  } finally {
    await running.close();
    await upstream.close();
  }
}

const standalone = await startRedis();
const cluster = await startRedisCluster();
try {
  await measure('standalone', { url: standalone.url }, [standalone.port]);
  await measure('standalone, with a budget', { url: standalone.url }, [standalone.port], true);
  await measure('cluster', { cluster: cluster.seeds }, cluster.ports);
  await measure('cluster, with a budget', { cluster: cluster.seeds }, cluster.ports, true);
} finally {
  await standalone.stop();
  await cluster.stop();
}
