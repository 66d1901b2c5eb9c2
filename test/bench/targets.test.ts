// bench/targets.ts: issue 31's targets evaluated against a run's figures (a pure function; no timing here).
import t from 'tap';
import { evaluateTargets, parseSoakDuration, PRODUCTION_SCENARIO, renderTargetTable, secondSpikes, TARGETS, type MeasuredRow, type TargetInput } from '../../bench/targets.js';

const row = (name: string, reqPerSec: number, cpuUsPerReq: number, p50 = 1, p99 = 2): MeasuredRow => ({ name, reqPerSec, cpuUsPerReq, latencyMs: { p50, p99 } });

/** Every target met exactly at its threshold. */
function atThreshold(): TargetInput {
  return {
    maxRate: [
      row('direct', 12_000, 50),
      row('bare-proxy', 10_000, 100),
      row('gateway-free', 9_700, 115),
      row('gateway-paid-memory', 9_000, 130),
      row('gateway-paid-traced', 7_650, 160),
      row('gateway-paid-redis', 8_500, 150),
      row('gateway-paid-budget', 8_075, 165),
      row('gateway-paid-oauth', 8_000, 160),
      row(PRODUCTION_SCENARIO, 1_800, 100 / 0.85),
    ],
    fixedRate: [
      row('bare-proxy', 0, 0, 1, 3),
      row('gateway-free', 0, 0, 1.3, 4.5),
      row('gateway-paid-memory', 0, 0, 1.1, 3.1),
      row('gateway-paid-redis', 0, 0, 1.3, 4.5),
      row('gateway-paid-budget', 0, 0, 1.3, 4.5),
      row('gateway-paid-oauth', 0, 0, 1.2, 4),
      row(PRODUCTION_SCENARIO, 0, 0, 1.3, 4.5),
    ],
    soak: { minutes: 10, rssGrowthPct: 5, non2xx: 0, errors: 0, spikeSeconds: 0, medianSecondP99Ms: 2, worstSecondP99Ms: 6 },
  };
}

const IDS = [
  'free-throughput',
  'paid-memory-throughput',
  'paid-redis-throughput',
  'paid-oauth-throughput',
  'budget-throughput',
  'budget-cpu',
  'tracing-throughput',
  'production-capacity',
  'added-latency-gateway-free',
  'added-latency-gateway-paid-memory',
  'added-latency-gateway-paid-redis',
  'added-latency-gateway-paid-oauth',
  'added-latency-gateway-paid-budget',
  `added-latency-${PRODUCTION_SCENARIO}`,
  'soak',
];

const status = (input: TargetInput): Record<string, string> => Object.fromEntries(evaluateTargets(input).map((r) => [r.id, r.status]));
const find = (input: TargetInput, name: string): MeasuredRow => input.maxRate.find((r) => r.name === name) as MeasuredRow;
const fixed = (input: TargetInput, name: string): MeasuredRow => (input.fixedRate as MeasuredRow[]).find((r) => r.name === name) as MeasuredRow;

t.test('every issue-31 target is evaluated, and at exactly its threshold each is met', async (t) => {
  const all = status(atThreshold());
  t.same(Object.keys(all), IDS);
  t.ok(Object.values(all).every((s) => s === 'met'), JSON.stringify(all));
});

t.test('just past each threshold the target is missed, and only that one', async (t) => {
  const cases: [string, (input: TargetInput) => void][] = [
    ['free-throughput', (i) => void (find(i, 'gateway-free').reqPerSec = 9_699)],
    ['paid-memory-throughput', (i) => void (find(i, 'gateway-paid-memory').reqPerSec = 8_999)],
    ['paid-redis-throughput', (i) => void (find(i, 'gateway-paid-redis').reqPerSec = 8_499)],
    ['paid-oauth-throughput', (i) => void (find(i, 'gateway-paid-oauth').reqPerSec = 7_999)],
    ['budget-throughput', (i) => void (find(i, 'gateway-paid-budget').reqPerSec = 8_074)],
    ['budget-cpu', (i) => void (find(i, 'gateway-paid-budget').cpuUsPerReq = 165.1)],
    ['tracing-throughput', (i) => void (find(i, 'gateway-paid-traced').reqPerSec = 7_649)],
    ['production-capacity', (i) => void (find(i, PRODUCTION_SCENARIO).cpuUsPerReq = 117.7)],
    ['added-latency-gateway-paid-redis', (i) => void (fixed(i, 'gateway-paid-redis').latencyMs.p50 = 1.31)],
    ['added-latency-gateway-free', (i) => void (fixed(i, 'gateway-free').latencyMs.p99 = 4.51)],
    [`added-latency-${PRODUCTION_SCENARIO}`, (i) => void (fixed(i, PRODUCTION_SCENARIO).non2xx = 1)],
    ['soak', (i) => void ((i.soak as NonNullable<TargetInput['soak']>).rssGrowthPct = 5.1)],
    ['soak', (i) => void ((i.soak as NonNullable<TargetInput['soak']>).errors = 1)],
    ['soak', (i) => void ((i.soak as NonNullable<TargetInput['soak']>).spikeSeconds = 1)],
    // Every second slow alike: no spike against that median, but the rate was not served.
    ['soak', (i) => void ((i.soak as NonNullable<TargetInput['soak']>).medianSecondP99Ms = 1_001)],
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
  input.maxRate = input.maxRate.filter((r) => r.name !== 'gateway-paid-oauth' && r.name !== 'gateway-paid-budget');
  input.fixedRate = null;
  input.soak = null;
  const result = status(input);
  t.equal(result['paid-oauth-throughput'], 'not measured');
  t.equal(result['budget-throughput'], 'not measured');
  t.equal(result['budget-cpu'], 'not measured');
  t.equal(result['added-latency-gateway-free'], 'not measured');
  t.equal(result.soak, 'not measured');
  t.equal(result['free-throughput'], 'met');
});

t.test('the budget and tracing ratios are against the same path without the feature, not the bare proxy', async (t) => {
  const input = atThreshold();
  input.maxRate = input.maxRate.filter((r) => r.name !== 'bare-proxy');
  const result = status(input);
  for (const id of ['free-throughput', 'paid-memory-throughput', 'paid-redis-throughput', 'paid-oauth-throughput', 'production-capacity']) t.equal(result[id], 'not measured', id);
  for (const id of ['budget-throughput', 'budget-cpu', 'tracing-throughput']) t.equal(result[id], 'met', id);
});

t.test('a soak shorter than 10 minutes does not count', async (t) => {
  const input = atThreshold();
  input.soak = { minutes: 3, rssGrowthPct: 0, non2xx: 0, errors: 0, spikeSeconds: 0, medianSecondP99Ms: 1, worstSecondP99Ms: 1 };
  const [soak] = evaluateTargets(input).filter((r) => r.id === 'soak');
  t.equal(soak?.status, 'not measured');
  t.match(soak?.measured, /only 3 min/);
});

t.test('per-second p99s: the median second and the seconds over 3× it', async (t) => {
  // Seconds 0–9: 100 samples each at 1 ms, except second 7, whose slowest 2 % take 10 ms (p99 10 ms > 3 × 1 ms).
  const pairs: number[] = [];
  for (let second = 0; second < 10; second++) {
    for (let i = 0; i < 100; i++) pairs.push(second + i / 100, second === 7 && i >= 98 ? 10 : 1);
  }
  const result = secondSpikes(Float64Array.from(pairs), 3);
  t.equal(result.median, 1);
  t.equal(result.worst, 10);
  t.same(result.spikes, [7]);
  t.equal(result.perSecondP99.size, 10);
  t.same(secondSpikes(Float64Array.from(pairs), 11).spikes, [], 'under the factor nothing is a spike');
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
  find(input, 'gateway-paid-redis').reqPerSec = 2_000;
  const table = renderTargetTable(evaluateTargets(input)).join('\n');
  t.match(table, /paid call, Redis store ≥ 0\.85× the bare proxy's req\/s \| 0\.2× \(2000 vs 10000 req\/s\) \| \*\*missed\*\*/);
});
