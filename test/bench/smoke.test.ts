// A few seconds of the benchmark harness (bench/run.ts) with tiny durations: it must start every
// server, fund the paid handles, drive every scenario and write a results JSON. The numbers are not
// asserted (timing belongs to `npm run bench`, never to a test), only that each scenario really ran.
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';

// gateway-paid-budget runs once the gateway accepts `budgets` (SPEC §23); until then the run leaves it out and says so.
const SCENARIOS = ['direct', 'bare-proxy', 'gateway-free', 'gateway-paid-memory', 'gateway-paid-traced', 'gateway-paid-redis', 'gateway-paid-budget', 'gateway-paid-oauth', 'gateway-production'];

t.test('a short bench run writes a results JSON covering every scenario', async (t) => {
  t.setTimeout(180_000); // ~15 s on an idle 2-core machine; process start-up dominates under load
  const out = mkdtempSync(join(tmpdir(), 'tb-bench-smoke-'));
  t.teardown(() => rmSync(out, { recursive: true, force: true }));
  const args = ['--import', 'tsx', 'bench/run.ts', '--duration', '0.4', '--warmup', '0', '--connections', '4', '--sse-samples', '5', '--soak', '0.05', '--soak-rate', '50', '--soak-baseline', '--production-handles', '4', '--no-pin', '--no-markdown', '--out', out];
  const child = spawn(process.execPath, args, { cwd: join(import.meta.dirname, '../..'), env: { ...process.env, NODE_OPTIONS: '' }, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  t.equal(code, 0, stderr);

  const files = readdirSync(out).filter((f) => f.endsWith('.json'));
  t.equal(files.length, 1, 'one results file');
  const report = JSON.parse(readFileSync(join(out, files[0] as string), 'utf8')) as {
    maxRate: { name: string; requests: number; non2xx: number; authorised?: number }[];
    fixedRate: { results: { name: string; requests: number }[] };
    ratios: Record<string, number>;
    addedLatencyMs: Record<string, unknown>;
    sse: { results: Record<string, { p50: number }> };
    soak: { windows: unknown[]; medianSecondP99Ms: number; cpuPct: Record<string, number> };
    soakBaseline: { windows: unknown[]; medianSecondP99Ms: number; cpuPct: Record<string, number> };
    withinCapacity: { name: string; rate: number; addedMs: { p50: number }; failures: number }[];
    tracing: { spans: number; exportRequests: number };
    targets: { id: string; status: string }[];
    profileHints: Record<string, string[]>;
  };
  const ran = SCENARIOS.filter((name) => name !== 'gateway-paid-budget' || !/gateway-paid-budget left out/.test(stderr));
  t.same(report.maxRate.map((r) => r.name), ran);
  t.same(report.fixedRate.results.map((r) => r.name), ran);
  for (const row of report.maxRate) {
    t.ok(row.requests > 0, `${row.name} served requests`);
    t.equal(row.non2xx, 0, `${row.name} had no failures`);
  }
  // The paid rows really spent credits (a challenge is a 200 too): authorised ≈ requests.
  for (const row of report.maxRate.filter((r) => r.name.startsWith('gateway-paid') || r.name === 'gateway-production')) t.ok((row.authorised ?? 0) >= row.requests * 0.9, `${row.name} calls were authorised`);
  t.ok(report.ratios['gateway-paid-redis/bare-proxy'] !== undefined, 'ratios computed');
  t.ok(report.addedLatencyMs['gateway-free'] !== undefined, 'added latency computed');
  t.same(Object.keys(report.sse.results), ['direct', 'gateway-free', 'gateway-paid-memory']);
  t.ok(report.soak.windows.length > 0, 'soak windows reported');
  t.ok(report.soak.medianSecondP99Ms > 0, 'per-second p99s computed');
  t.same(Object.keys(report.soak.cpuPct), ['gateway', 'redis', 'origin', 'generator'], 'per-process CPU over the soak');
  t.same(Object.keys(report.soakBaseline.cpuPct), ['bare-proxy', 'redis', 'origin', 'generator'], 'the baseline soak ran through the bare proxy');
  t.ok(report.soakBaseline.windows.length > 0 && report.soakBaseline.medianSecondP99Ms > 0, 'the baseline soak measured its seconds');
  const gateways = ran.filter((name) => name.startsWith('gateway') && name !== 'gateway-production');
  t.same(report.withinCapacity.map((r) => r.name), gateways, 'each gateway paced within its own capacity, beside the bare proxy');
  for (const r of report.withinCapacity) t.ok(r.rate >= 10 && Number.isFinite(r.addedMs.p50) && r.failures === 0, `${r.name}: a pair at ${r.rate}/s`);
  t.ok(report.tracing.spans > 0 && report.tracing.exportRequests > 0, 'the traced gateway exported spans to the sink');
  t.equal(report.targets.length, 15, 'every issue-31 target evaluated');
  t.ok(report.targets.every((r) => ['met', 'missed', 'not measured'].includes(r.status)), 'each with a status');
  t.equal(report.targets.find((r) => r.id === 'soak')?.status, 'not measured', 'a 3-second soak does not count as the 10-minute one');
  for (const missed of report.targets.filter((r) => r.status === 'missed')) t.ok(report.profileHints[missed.id]?.length, `${missed.id}: a profile hint`);
});
