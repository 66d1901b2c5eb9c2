// What `store.redis.durability: replicated` costs a paid call (docs/reliability.md, "The cost of
// WAIT"): one in-process gateway on a real primary with one replica, a funded handle, then N paid
// calls one after the other, timed from the client (HTTP request to reply), alternately with
// durability none and replicated (several rounds, so a load swing on the machine hits both modes).
//   node --import tsx bench/wait-cost.ts [N] [rounds]
// Not part of `npm run bench`; the numbers are only comparable within one run.
import { configSchema } from '../src/config/schema.js';
import { createLogger } from '../src/observability/logger.js';
import { runGateway } from '../src/start.js';
import { freePort, fundedHandle, rawToolCall, testConfig } from '../test/helpers/gateway.js';
import { startPaidUpstream } from '../test/helpers/paid-upstream.js';
import { startRedis } from '../test/helpers/redis-server.js';

const CALLS = Number(process.argv[2] ?? 500);
const ROUNDS = Number(process.argv[3] ?? 3);

async function timeCalls(durability: 'none' | 'replicated', url: string, into: number[]): Promise<void> {
  const upstream = await startPaidUpstream('stateless-json');
  const input = testConfig(upstream.url, {
    server: { host: '127.0.0.1', port: await freePort() },
    store: { type: 'redis', redis: { url, keyPrefix: `tbwait${durability}:`, durability, waitReplicas: 1, waitTimeout: '100ms' } },
    skus: { research: { label: 'Research tools', amount: '5.00', currency: 'USDC', credits: CALLS + 10 } },
    logging: { level: 'silent' },
  });
  const running = await runGateway(configSchema.parse(input), { logger: createLogger('silent') });
  await running.reconciler.stop();
  try {
    const handle = await fundedHandle(running);
    await rawToolCall(running, 'fetch_readable', { url: 'warm', tollboothToken: handle });
    for (let i = 0; i < CALLS; i++) {
      const started = performance.now();
      const reply = await rawToolCall(running, 'fetch_readable', { url: `x${i}`, tollboothToken: handle });
      into.push(performance.now() - started);
      if (!(reply as { result?: { _meta?: Record<string, unknown> } }).result?._meta?.['xyz.tollbooth/receipt']) throw new Error(`call ${i} was not paid`);
    }
  } finally {
    await running.close();
    await upstream.close();
  }
}

const quantile = (sorted: number[], q: number): number => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;

const primary = await startRedis();
const replica = await startRedis({ replicaOf: primary.port });
try {
  const samples = { none: [] as number[], replicated: [] as number[] };
  for (let round = 0; round < ROUNDS; round++) {
    await timeCalls('none', primary.url, samples.none);
    await timeCalls('replicated', primary.url, samples.replicated);
  }
  for (const [mode, values] of Object.entries(samples)) {
    const sorted = [...values].sort((a, b) => a - b);
    console.log(`${mode}: ${sorted.length} paid calls, p50 ${quantile(sorted, 0.5).toFixed(2)} ms, p99 ${quantile(sorted, 0.99).toFixed(2)} ms`);
  }
} finally {
  await replica.stop();
  await primary.stop();
}
