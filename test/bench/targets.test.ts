// bench/targets.ts: issue 14's targets evaluated against a run's figures (a pure function; no timing here).
import t from 'tap';
import { evaluateTargets, parseSoakDuration, renderTargetTable, TARGETS, type MeasuredRow, type TargetInput } from '../../bench/targets.js';

const row = (name: string, reqPerSec: number, cpuUsPerReq: number, p50 = 1, p99 = 2): MeasuredRow => ({ name, reqPerSec, cpuUsPerReq, latencyMs: { p50, p99 } });

/** Every target met exactly at its threshold. */
function atThreshold(): TargetInput {
  return {
    maxRate: [
      row('direct', 12_000, 50),
      row('bare-proxy', 10_000, 100),
      row('gateway-free', 9_700, 115),
      row('gateway-paid-memory', 9_000, 130),
      row('gateway-paid-redis', 8_500, 150),
      row('gateway-paid-oauth', 8_000, 160),
    ],
    fixedRate: [row('bare-proxy', 0, 0, 1, 3), row('gateway-free', 0, 0, 1.3, 4.5), row('gateway-paid-memory', 0, 0, 1.1, 3.1), row('gateway-paid-redis', 0, 0, 1.3, 4.5), row('gateway-paid-oauth', 0, 0, 1.2, 4)],
    soak: { minutes: 10, rssGrowthPct: 5, non2xx: 0, errors: 0 },
  };
}

const status = (input: TargetInput): Record<string, string> => Object.fromEntries(evaluateTargets(input).map((r) => [r.id, r.status]));

t.test('every target at exactly its threshold is met', async (t) => {
  const all = status(atThreshold());
  t.same(Object.keys(all).length, 10);
  t.ok(Object.values(all).every((s) => s === 'met'), JSON.stringify(all));
});

t.test('just past each threshold the target is missed, and only that one', async (t) => {
  const cases: [string, (input: TargetInput) => void][] = [
    ['free-throughput', (i) => void ((i.maxRate[2] as MeasuredRow).reqPerSec = 9_699)],
    ['free-cpu', (i) => void ((i.maxRate[2] as MeasuredRow).cpuUsPerReq = 115.2)],
    ['paid-memory-throughput', (i) => void ((i.maxRate[3] as MeasuredRow).reqPerSec = 8_999)],
    ['paid-redis-throughput', (i) => void ((i.maxRate[4] as MeasuredRow).reqPerSec = 8_499)],
    ['paid-oauth-throughput', (i) => void ((i.maxRate[5] as MeasuredRow).reqPerSec = 7_999)],
    ['added-latency-gateway-paid-redis', (i) => void ((i.fixedRate as MeasuredRow[])[3]!.latencyMs.p50 = 1.31)],
    ['added-latency-gateway-free', (i) => void ((i.fixedRate as MeasuredRow[])[1]!.latencyMs.p99 = 4.51)],
    ['soak', (i) => void ((i.soak as NonNullable<TargetInput['soak']>).rssGrowthPct = 5.1)],
    ['soak', (i) => void ((i.soak as NonNullable<TargetInput['soak']>).errors = 1)],
  ];
  for (const [id, spoil] of cases) {
    const input = atThreshold();
    spoil(input);
    const result = status(input);
    t.equal(result[id], 'missed', id);
    t.same(Object.entries(result).filter(([, s]) => s === 'missed').map(([k]) => k), [id], `${id}: nothing else missed`);
  }
});

t.test('added latency is measured over the bare proxy, not over direct', async (t) => {
  const input = atThreshold();
  input.fixedRate!.push(row('direct', 0, 0, 0.1, 0.2)); // the gateway rows are 1+ ms over direct
  t.equal(status(input)['added-latency-gateway-paid-redis'], 'met');
});

t.test('a scenario left out of the run is "not measured", never met', async (t) => {
  const input = atThreshold();
  input.maxRate = input.maxRate.filter((r) => r.name !== 'gateway-paid-oauth');
  input.fixedRate = null;
  input.soak = null;
  const result = status(input);
  t.equal(result['paid-oauth-throughput'], 'not measured');
  t.equal(result['added-latency-gateway-free'], 'not measured');
  t.equal(result.soak, 'not measured');
  t.equal(result['free-throughput'], 'met');
});

t.test('without the bare proxy no ratio can be met', async (t) => {
  const input = atThreshold();
  input.maxRate = input.maxRate.filter((r) => r.name !== 'bare-proxy');
  const result = status(input);
  for (const id of ['free-throughput', 'free-cpu', 'paid-memory-throughput', 'paid-redis-throughput', 'paid-oauth-throughput']) t.equal(result[id], 'not measured', id);
});

t.test('a soak shorter than 10 minutes does not count', async (t) => {
  const input = atThreshold();
  input.soak = { minutes: 3, rssGrowthPct: 0, non2xx: 0, errors: 0 };
  const [soak] = evaluateTargets(input).filter((r) => r.id === 'soak');
  t.equal(soak?.status, 'not measured');
  t.match(soak?.measured, /only 3 min/);
});

t.test('--soak takes 10m, 90s, 1h or bare minutes', async (t) => {
  t.equal(parseSoakDuration('10m'), 10);
  t.equal(parseSoakDuration('90s'), 1.5);
  t.equal(parseSoakDuration('1h'), 60);
  t.equal(parseSoakDuration('0.05'), 0.05);
  t.equal(parseSoakDuration(undefined), TARGETS.soakMinMinutes);
  t.throws(() => parseSoakDuration('ten'), /expected a duration/);
});

t.test('the table marks missed targets in bold', async (t) => {
  const input = atThreshold();
  (input.maxRate[4] as MeasuredRow).reqPerSec = 2_000;
  const table = renderTargetTable(evaluateTargets(input)).join('\n');
  t.match(table, /paid call, Redis store ≥ 0\.85× the bare proxy's req\/s \| 0\.2× \(2000 vs 10000 req\/s\) \| \*\*missed\*\*/);
});
