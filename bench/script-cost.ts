// Redis CPU per money script (INFO commandstats deltas around N sequential calls of one kind), on a
// real redis-server: where the paid path's Redis time goes, script by script (bench/RESULTS.md).
// Usage: node --import tsx bench/script-cost.ts [N]
import { Redis } from 'ioredis';
import { createLogger } from '../src/observability/logger.js';
import { RedisStore } from '../src/store/redis.js';
import { startRedis } from '../test/helpers/redis-server.js';

const N = Number(process.argv[2] ?? 2000);
const redis = await startRedis();
const admin = new Redis(redis.url);
const store = await RedisStore.connect({ type: 'redis', redis: { url: redis.url, keyPrefix: 'cost:' } }, { logger: createLogger('silent') });

async function evalUsec(): Promise<{ calls: number; usec: number }> {
  const text = await admin.info('commandstats');
  const line = /cmdstat_evalsha:calls=(\d+),usec=(\d+)/.exec(text);
  return line ? { calls: Number(line[1]), usec: Number(line[2]) } : { calls: 0, usec: 0 };
}

async function measure(name: string, work: (i: number) => Promise<unknown>): Promise<void> {
  const before = await evalUsec();
  for (let i = 0; i < N; i++) await work(i);
  const after = await evalUsec();
  const calls = after.calls - before.calls;
  process.stdout.write(`${name.padEnd(44)} ${(calls / N).toFixed(2)} scripts/op  ${((after.usec - before.usec) / N).toFixed(1)} µs of Redis script time per op\n`);
}

const handleHash = 'h'.repeat(32);
await store.createHandle({ handleHash, fingerprint: 'tb_s_cost..test', principal: null, ttlMs: 86_400_000 });
await store.grantCredits(handleHash, 'sku', 10 * N);
const request = (id: string) => ({ handleHash, principal: null, sku: 'sku', cost: 1, reservationId: id, reservationDeadline: Date.now() + 60_000, ttlMs: 86_400_000, bucket: null });
// One call at a time, as one caller makes them: a reservation is concluded before the next is taken
// (the commit script's work grows with the reservations a handle holds open).
await measure('reserve + release (no ledger entry)', async (i) => {
  await store.reserve(request(`a${i}`));
  await store.release(handleHash, `a${i}`);
});
/** One paid call's two scripts, no budget. */
async function spend(id: string): Promise<void> {
  await store.reserve(request(id));
  await store.commit(handleHash, id, 'tool');
}
await measure('reserve + commit (spend entry, hash chain)', (i) => spend(`b${i}`));
process.stdout.write(`  spend entries' chain links so far, by who hashed the entry before: ${JSON.stringify(store.ledgerLinks())}\n`);
// The budget folded into the credit's own scripts (standalone and Sentinel): what a budget adds to
// each paid call's Redis time, against "reserve + commit" above.
const budget = { name: 'budget:daily', subject: `h:${handleHash}`, windowMs: 86_400_000, windowStart: 0, calls: 1, credits: 1, maxCalls: 1_000_000_000, maxCredits: 1_000_000_000 };
await measure('reserve + commit with a budget in them', async (i) => {
  await store.reserve({ ...request(`d${i}`), quotas: { holdId: `d${i}`, draws: [budget], deadline: Date.now() + 60_000 } });
  await store.commit(handleHash, `d${i}`, 'tool', undefined, { holdId: `d${i}`, counters: [budget] });
});
await measure('reserve + commit (again, after the budget case)', (i) => spend(`e${i}`));
const counter = { name: 'budget:b', subject: 'p:alice', windowMs: 86_400_000, windowStart: 0, calls: 1, credits: 1, maxCalls: null, maxCredits: null };
await measure('reserveQuotas + concludeQuotas (a budget)', async (i) => {
  await store.reserveQuotas({ holdId: `q${i}`, draws: [counter], deadline: Date.now() + 60_000 });
  await store.concludeQuotas(`q${i}`, [counter], 'commit');
});
await store.close();
admin.disconnect();
await redis.stop();
