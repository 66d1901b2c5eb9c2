// `ledger export` of 100,000 entries in constant memory (SPEC §17): 2,000 handles × 50 entries in a
// real Redis, exported in time order while the live heap is sampled (a full GC before each sample, so
// garbage does not count). The bound is checked against what holding the entries takes, measured
// the same way. The same export as a real `tollbooth ledger export` process, its peak RSS read from
// /proc. Verify over the same 2,000 handles is timed too.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { readFileSync } from 'node:fs';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import t, { type Test } from 'tap';
import { exportLedger } from '../../src/ledger/export.js';
import { verifyLedger } from '../../src/ledger/verify.js';
import { createLogger } from '../../src/observability/logger.js';
import { KeySpace } from '../../src/store/keys.js';
import { SCRIPTS } from '../../src/store/lua/index.js';
import { RedisStore } from '../../src/store/redis.js';
import { LEDGER_RETENTION_MS } from '../../src/store/policy.js';
import { assertBuilt, childEnv, CLI, ROOT, writeConfig } from '../helpers/gateway-process.js';
import { startRedis } from '../helpers/redis-server.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const HANDLES = 2_000;
const PER_HANDLE = 50;
const ENTRIES = HANDLES * PER_HANDLE;
const MB = 1024 * 1024;

// 100,000 entries written, exported twice and verified, with a full GC every 250 ms: ~40 s on a quiet
// 2-core machine, several times that when the suite's other files load both cores. Writing them costs
// more since each append hashes the entry before it in Lua (about 150 µs of Redis CPU each, ~15 s).
t.setTimeout(600_000);

const redis = await startRedis();
t.teardown(() => redis.stop());
const keyPrefix = `tbexport${randomBytes(3).toString('hex')}:`;
const store = await RedisStore.connect({ type: 'redis', redis: { url: redis.url, keyPrefix } }, { logger: createLogger('silent') });
t.teardown(() => store.close());

// 100,000 adjust entries written by the store's own scripts (create-handle, grant-credits), sent on a
// connection of their own without the store's 500 ms command timeout: on a saturated machine a
// timed-out grant that ran anyway would make the count uncertain.
const populateStarted = performance.now();
const hashes = Array.from({ length: HANDLES }, (_, i) => `${i.toString(16).padStart(8, '0')}${randomBytes(8).toString('hex')}`);
const writer = new Redis(redis.url);
writer.defineCommand('tbCreateHandle', { lua: SCRIPTS.tbCreateHandle });
writer.defineCommand('tbGrantCredits', { lua: SCRIPTS.tbGrantCredits });
type Script = (numKeys: number, ...args: (string | number)[]) => Promise<unknown>;
const run = (name: 'tbCreateHandle' | 'tbGrantCredits', keys: string[], args: (string | number)[]): Promise<unknown> => (writer as unknown as Record<string, Script>)[name]!.call(writer, keys.length, ...keys, ...args);
const space = new KeySpace(keyPrefix);
const keysOf = (handleHash: string): string[] => {
  const k = space.handle(handleHash);
  return [k.handle, k.reservations, k.ledger, space.handleExpiry];
};
for (let i = 0; i < HANDLES; i += 200) {
  await Promise.all(hashes.slice(i, i + 200).map((handleHash, j) => run('tbCreateHandle', keysOf(handleHash), [`tb_s_${String(i + j).padStart(4, '0')}..test`, '0', '', 24 * 3_600_000, Date.now(), handleHash])));
}
for (let round = 0; round < PER_HANDLE; round++) {
  // The grant script runs under the store's operation record (its first key and argument: the attempt).
  await Promise.all(hashes.map((handleHash) => {
    const attempt = `export-${round}-${handleHash}`;
    return run('tbGrantCredits', [space.operation(handleHash, 'g', attempt), ...keysOf(handleHash)], [attempt, 'research', 1, Date.now(), `round ${round}`, LEDGER_RETENTION_MS, handleHash]);
  }));
}
writer.disconnect();
const populateMs = Math.round(performance.now() - populateStarted);

/** Runs `work` while sampling the live heap (after a full GC) every 250 ms; the peak growth over the baseline. */
async function liveHeapGrowth<T>(work: () => Promise<T>): Promise<{ result: T; growth: number }> {
  gc();
  const baseline = process.memoryUsage().heapUsed;
  let peak = baseline;
  const sampler = setInterval(() => {
    gc();
    peak = Math.max(peak, process.memoryUsage().heapUsed);
  }, 250);
  try {
    const result = await work();
    gc();
    peak = Math.max(peak, process.memoryUsage().heapUsed);
    return { result, growth: peak - baseline };
  } finally {
    clearInterval(sampler);
  }
}

t.test(`export of ${ENTRIES} entries: time order, every entry, live heap far below holding them`, async (t) => {
  let lines = 0;
  let lastAt = '';
  let ordered = true;
  const started = performance.now();
  const exported = await liveHeapGrowth(() =>
    exportLedger(store, { format: 'jsonl' }, async (chunk) => {
      for (const line of chunk.split('\n')) {
        if (line === '' || line.startsWith('{"trailer":')) continue;
        lines++;
        const at = line.slice(7, 31); // {"at":"2026-…Z" — ISO strings sort as times
        if (at < lastAt) ordered = false;
        lastAt = at;
      }
    }),
  );
  const exportMs = Math.round(performance.now() - started);

  // What holding them would take: the same records, parsed, kept in an array.
  const held = await liveHeapGrowth(async () => {
    const records: unknown[] = [];
    await exportLedger(store, { format: 'jsonl' }, async (chunk) => {
      for (const line of chunk.split('\n')) if (line !== '' && !line.startsWith('{"trailer":')) records.push(JSON.parse(line));
    });
    gc();
    return records.length;
  });

  t.comment(`populate ${populateMs} ms; export ${exportMs} ms (${exported.result.runs} runs on disk); live heap growth ${(exported.growth / MB).toFixed(1)} MB streaming vs ${(held.growth / MB).toFixed(1)} MB holding ${held.result} records`);
  t.equal(lines, ENTRIES, 'every entry once');
  t.equal(exported.result.entries, ENTRIES);
  t.ok(ordered, 'in time order');
  t.ok(exported.result.runs >= 20, 'the external sort spilled runs to disk');
  t.ok(exported.growth < held.growth / 2, `streaming grows the live heap by under half of what holding the entries takes (${(exported.growth / MB).toFixed(1)} MB < ${(held.growth / 2 / MB).toFixed(1)} MB)`);
  t.ok(exported.growth < 12 * MB, `and under 12 MB in absolute terms: one sort run of 5,000 plus a page (${(exported.growth / MB).toFixed(1)} MB)`);
});

t.test(`verify of ${HANDLES} handles × ${PER_HANDLE} entries: agrees, live heap flat`, async (t) => {
  const started = performance.now();
  const verified = await liveHeapGrowth(() => verifyLedger(store, () => undefined));
  const verifyMs = Math.round(performance.now() - started);
  t.comment(`verify ${verifyMs} ms for ${HANDLES} handles / ${ENTRIES} entries (${Math.round((verifyMs * 1000) / HANDLES)} µs per handle); live heap growth ${(verified.growth / MB).toFixed(1)} MB`);
  t.match(verified.result, { accounts: HANDLES, entries: ENTRIES, mismatches: 0 });
  t.ok(verified.growth < 8 * MB, `under 8 MB (${(verified.growth / MB).toFixed(1)} MB)`);
});

/** `tollbooth ledger export` as a real process: rows written and peak RSS (polled from /proc). */
async function exportProcess(t: Test, configPath: string, extra: string[]): Promise<{ code: number | null; rows: number; peakMb: number; stderr: string; ms: number }> {
  const started = performance.now();
  const child = spawn(process.execPath, [CLI, 'ledger', 'export', '--format', 'csv', ...extra, '--config', configPath], { cwd: ROOT, env: childEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
  t.teardown(() => void child.kill('SIGKILL'));
  let peakKb = 0;
  const poll = setInterval(() => {
    try {
      const rss = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'));
      if (rss) peakKb = Math.max(peakKb, Number(rss[1]));
    } catch {
      // the process is gone
    }
  }, 10);
  let rows = 0;
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => {
    for (const byte of chunk) if (byte === 10) rows++;
  });
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  clearInterval(poll);
  return { code, rows, peakMb: Math.round(peakKb / 1024), stderr, ms: Math.round(performance.now() - started) };
}

t.test('the same export by `tollbooth ledger export` (a real process): every row, peak RSS reported', async (t) => {
  assertBuilt();
  const configPath = writeConfig(t, { upstream: { url: 'http://127.0.0.1:1/mcp' }, store: { type: 'redis', redis: { url: redis.url, keyPrefix } }, logging: { level: 'warn' } });
  // The same process with nothing to write (a window in the future): its start-up and scan cost.
  const empty = await exportProcess(t, configPath, ['--since', String(Date.now() + 86_400_000)]);
  const full = await exportProcess(t, configPath, []);
  t.comment(`tollbooth ledger export --format csv: ${full.rows - 2} rows in ${full.ms} ms, peak RSS ${full.peakMb} MB (an empty window: ${empty.peakMb} MB)`);
  t.equal(empty.code, 0, empty.stderr);
  t.equal(empty.rows, 2, 'the header and the trailer alone');
  t.equal(full.code, 0, full.stderr);
  t.equal(full.rows, ENTRIES + 2, 'a header, every entry and the trailer');
  // RSS follows V8's lazy heap sizing, not what is live (the live heap is checked above): a sanity bound.
  t.ok(full.peakMb < empty.peakMb + 128, `peak RSS within 128 MB of the empty export (${full.peakMb} MB vs ${empty.peakMb} MB)`);
});
