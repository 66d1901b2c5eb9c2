// Issue 31's targets, evaluated against one bench run (a pure function: test/bench/targets.test.ts).
// Throughput ratios are against the bare proxy of the same run (SPEC §12), or, for a feature's cost,
// against the same path without it; "not measured" when the run left out a scenario (`--only`, no
// `--soak`), never "met".

export interface MeasuredRow {
  name: string;
  reqPerSec: number;
  cpuUsPerReq: number;
  latencyMs: { p50: number; p99: number };
  non2xx?: number;
  errors?: number;
}

export interface SoakFigures {
  minutes: number;
  rssGrowthPct: number;
  non2xx: number;
  errors: number;
  /** Seconds whose p99 exceeded SOAK_SPIKE_FACTOR × the median of the per-second p99s. */
  spikeSeconds: number;
  medianSecondP99Ms: number;
  worstSecondP99Ms: number;
}

export interface TargetInput {
  maxRate: MeasuredRow[];
  /** The fixed-rate rows (half the bare proxy's max rate). */
  fixedRate: MeasuredRow[] | null;
  soak: SoakFigures | null;
}

export type TargetStatus = 'met' | 'missed' | 'not measured';

export interface TargetResult {
  /** Stable id (the profile hints and RESULTS.md refer to it). */
  id: string;
  target: string;
  measured: string;
  status: TargetStatus;
  /** The scenario whose profile to read when missed. */
  scenario: string;
}

/** The thresholds (issue 31). */
export const TARGETS = {
  freeReqPerSec: 0.97,
  paidMemoryReqPerSec: 0.9,
  paidRedisReqPerSec: 0.85,
  paidOauthReqPerSec: 0.8,
  /** Paid Redis with a budget configured ÷ the same without (req/s), and its CPU µs/req at most 10 % more (issue 29). */
  budgetReqPerSec: 0.95,
  budgetCpu: 1.1,
  /** Tracing on (every request sampled, OTLP to a local sink) ÷ off, paid memory path. */
  tracingReqPerSec: 0.85,
  addedP50Ms: 0.3,
  addedP99Ms: 1.5,
  soakSpikeFactor: 3,
  soakRssGrowthPct: 5,
  soakMinMinutes: 10,
  /**
   * A soak whose median second has a p99 above this did not serve its rate: calls queued behind each other
   * for the whole run (the rate was above what the machine gave it), so every second is slow and the
   * spike rule, relative to that median, would find none. Such a run is missed, never met.
   */
  soakServedMedianP99Ms: 1_000,
} as const;

/**
 * The production-shaped scenario (1,000 funded handles, each at most 2 calls/s) cannot be driven to a
 * max rate: its rate is capped by its shape (1,000 × 2/s). Its capacity is read from the server's CPU
 * per request instead: one pinned core serves at most 1e6 / (CPU µs per request) requests a second.
 */
export const PRODUCTION_SCENARIO = 'gateway-production';

const round = (value: number, places = 3): number => Math.round(value * 10 ** places) / 10 ** places;

export function evaluateTargets(input: TargetInput): TargetResult[] {
  const row = (rows: MeasuredRow[] | null, name: string): MeasuredRow | undefined => rows?.find((r) => r.name === name);
  const bare = row(input.maxRate, 'bare-proxy');
  const results: TargetResult[] = [];

  const ratioTarget = (id: string, scenario: string, baseline: string, label: string, min: number): void => {
    const base = row(input.maxRate, baseline);
    const gateway = row(input.maxRate, scenario);
    const target = `${label} ≥ ${min}× ${baseline === 'bare-proxy' ? "the bare proxy's" : `${baseline}'s`} req/s`;
    if (!base || !gateway || base.reqPerSec <= 0) {
      results.push({ id, target, measured: '–', status: 'not measured', scenario });
      return;
    }
    const ratio = gateway.reqPerSec / base.reqPerSec; // compared unrounded: 0.9699 is not 0.97
    results.push({ id, target, measured: `${round(ratio)}× (${gateway.reqPerSec} vs ${base.reqPerSec} req/s)`, status: ratio >= min ? 'met' : 'missed', scenario });
  };

  ratioTarget('free-throughput', 'gateway-free', 'bare-proxy', 'free call', TARGETS.freeReqPerSec);
  ratioTarget('paid-memory-throughput', 'gateway-paid-memory', 'bare-proxy', 'paid call, memory store', TARGETS.paidMemoryReqPerSec);
  ratioTarget('paid-redis-throughput', 'gateway-paid-redis', 'bare-proxy', 'paid call, Redis store', TARGETS.paidRedisReqPerSec);
  ratioTarget('paid-oauth-throughput', 'gateway-paid-oauth', 'bare-proxy', 'paid call, OAuth (cached token), Redis', TARGETS.paidOauthReqPerSec);
  ratioTarget('budget-throughput', 'gateway-paid-budget', 'gateway-paid-redis', 'paid Redis call with a budget configured', TARGETS.budgetReqPerSec);
  const withBudget = row(input.maxRate, 'gateway-paid-budget');
  const withoutBudget = row(input.maxRate, 'gateway-paid-redis');
  const budgetCpuTarget = `paid Redis call with a budget: CPU µs/req ≤ ${TARGETS.budgetCpu}× the same call without`;
  if (withBudget && withoutBudget && withoutBudget.cpuUsPerReq > 0) {
    const ratio = withBudget.cpuUsPerReq / withoutBudget.cpuUsPerReq;
    results.push({ id: 'budget-cpu', target: budgetCpuTarget, measured: `${round(ratio)}× (${withBudget.cpuUsPerReq} vs ${withoutBudget.cpuUsPerReq} µs/req)`, status: ratio <= TARGETS.budgetCpu ? 'met' : 'missed', scenario: 'gateway-paid-budget' });
  } else {
    results.push({ id: 'budget-cpu', target: budgetCpuTarget, measured: '–', status: 'not measured', scenario: 'gateway-paid-budget' });
  }
  ratioTarget('tracing-throughput', 'gateway-paid-traced', 'gateway-paid-memory', 'tracing on (sampleRatio 1.0, OTLP to a local sink)', TARGETS.tracingReqPerSec);

  // The production-shaped scenario: capacity from CPU per request (see PRODUCTION_SCENARIO), against the paid Redis target.
  const production = row(input.maxRate, PRODUCTION_SCENARIO);
  const productionTarget = `production-shaped (1,000 handles at ≤ 2/s, Redis, default limits): capacity ≥ ${TARGETS.paidRedisReqPerSec}× the bare proxy's (1e6 / CPU µs per request, one pinned core)`;
  if (bare && production && production.cpuUsPerReq > 0 && bare.cpuUsPerReq > 0) {
    const ratio = bare.cpuUsPerReq / production.cpuUsPerReq;
    results.push({ id: 'production-capacity', target: productionTarget, measured: `${round(ratio)}× (${production.cpuUsPerReq} vs ${bare.cpuUsPerReq} µs/req; ${production.reqPerSec} req/s offered)`, status: ratio >= TARGETS.paidRedisReqPerSec ? 'met' : 'missed', scenario: PRODUCTION_SCENARIO });
  } else {
    results.push({ id: 'production-capacity', target: productionTarget, measured: '–', status: 'not measured', scenario: PRODUCTION_SCENARIO });
  }

  // Added latency over the bare proxy at the same fixed rate (half the bare proxy's max), for each gateway path.
  const fixedBare = row(input.fixedRate, 'bare-proxy');
  for (const [scenario, label] of [
    ['gateway-free', 'free'],
    ['gateway-paid-memory', 'paid memory'],
    ['gateway-paid-redis', 'paid Redis'],
    ['gateway-paid-oauth', 'paid OAuth'],
    ['gateway-paid-budget', 'paid Redis with a budget'],
    [PRODUCTION_SCENARIO, 'production-shaped'],
  ] as const) {
    const gateway = row(input.fixedRate, scenario);
    const target = `${label}: added p50 ≤ ${TARGETS.addedP50Ms} ms, p99 ≤ ${TARGETS.addedP99Ms} ms over the bare proxy at half the bare proxy's max rate`;
    if (!fixedBare || !gateway) {
      results.push({ id: `added-latency-${scenario}`, target, measured: '–', status: 'not measured', scenario });
      continue;
    }
    // Rounded to the microsecond before comparing: latencies are differences of floats.
    const p50 = round(gateway.latencyMs.p50 - fixedBare.latencyMs.p50);
    const p99 = round(gateway.latencyMs.p99 - fixedBare.latencyMs.p99);
    const failures = (gateway.non2xx ?? 0) + (gateway.errors ?? 0);
    const failed = failures > 0 ? `, ${failures} failed` : '';
    results.push({ id: `added-latency-${scenario}`, target, measured: `${p50 >= 0 ? '+' : ''}${p50} ms p50, ${p99 >= 0 ? '+' : ''}${p99} ms p99${failed}`, status: p50 <= TARGETS.addedP50Ms && p99 <= TARGETS.addedP99Ms && failures === 0 ? 'met' : 'missed', scenario });
  }

  const soakTarget = `${TARGETS.soakMinMinutes}-min paced soak at 70 % of the paid Redis max: no second whose p99 exceeds ${TARGETS.soakSpikeFactor}× the median second's p99; RSS growth ≤ ${TARGETS.soakRssGrowthPct} % after warm-up; zero errors`;
  const soak = input.soak;
  if (!soak || soak.minutes < TARGETS.soakMinMinutes) {
    const short = soak ? ` (only ${soak.minutes} min run: ${soak.spikeSeconds} spike seconds, RSS ${soak.rssGrowthPct} %, ${soak.non2xx + soak.errors} errors)` : '';
    results.push({ id: 'soak', target: soakTarget, measured: `–${short}`, status: 'not measured', scenario: 'gateway-paid-redis' });
  } else {
    const failures = soak.non2xx + soak.errors;
    const measured = `${soak.spikeSeconds} spike seconds (median second p99 ${soak.medianSecondP99Ms} ms, worst ${soak.worstSecondP99Ms} ms), RSS ${soak.rssGrowthPct} %, ${failures} errors`;
    const served = soak.medianSecondP99Ms <= TARGETS.soakServedMedianP99Ms;
    const met = served && soak.spikeSeconds === 0 && soak.rssGrowthPct <= TARGETS.soakRssGrowthPct && failures === 0;
    results.push({ id: 'soak', target: soakTarget, measured: served ? measured : `${measured}; the rate was not served (calls queued all run)`, status: met ? 'met' : 'missed', scenario: 'gateway-paid-redis' });
  }
  return results;
}

/** Per-second p99s of a run's [second, latency] samples: the median, the worst, and the seconds over factor × median. */
export function secondSpikes(samples: Float64Array, factor: number = TARGETS.soakSpikeFactor): { perSecondP99: Map<number, number>; median: number; worst: number; spikes: number[] } {
  const bySecond = new Map<number, number[]>();
  for (let i = 0; i + 1 < samples.length; i += 2) {
    const second = Math.floor(samples[i] as number);
    let list = bySecond.get(second);
    if (!list) bySecond.set(second, (list = []));
    list.push(samples[i + 1] as number);
  }
  const perSecondP99 = new Map<number, number>();
  for (const [second, list] of bySecond) {
    list.sort((a, b) => a - b);
    perSecondP99.set(second, list[Math.min(list.length - 1, Math.floor(0.99 * list.length))] as number);
  }
  const values = [...perSecondP99.values()].sort((a, b) => a - b);
  const median = values.length === 0 ? 0 : (values[Math.floor(values.length / 2)] as number);
  const worst = values.at(-1) ?? 0;
  const spikes = [...perSecondP99].filter(([, p99]) => p99 > factor * median).map(([second]) => second).sort((a, b) => a - b);
  return { perSecondP99, median, worst, spikes };
}

/** `--soak 10m`, `--soak 90s`, `--soak 0.5` (minutes) → minutes. */
export function parseSoakDuration(text: string | undefined): number {
  if (text === undefined) return TARGETS.soakMinMinutes;
  const match = /^(\d+(?:\.\d+)?)(s|m|h)?$/.exec(text.trim());
  if (!match) throw new Error(`--soak: expected a duration like 10m, 90s or 0.5 (minutes), got ${JSON.stringify(text)}`);
  const value = Number(match[1]);
  return match[2] === 's' ? value / 60 : match[2] === 'h' ? value * 60 : value;
}

export function renderTargetTable(results: TargetResult[]): string[] {
  const lines = ['| target | measured | status |', '| --- | --- | --- |'];
  for (const r of results) lines.push(`| ${r.target} | ${r.measured} | ${r.status === 'met' ? 'met' : r.status === 'missed' ? '**missed**' : 'not measured'} |`);
  return lines;
}
