// Issue 14's targets, evaluated against one bench run (a pure function: test/bench/targets.test.ts).
// Every ratio is against the bare proxy of the same run (SPEC §12); "not measured" when the run left
// out a scenario (`--only`, no `--soak`), never "met".

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
}

export interface TargetInput {
  maxRate: MeasuredRow[];
  /** The fixed-rate rows (half the paid-Redis max rate). */
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

/** The thresholds (issue 14). */
export const TARGETS = {
  freeReqPerSec: 0.97,
  freeCpu: 1.15,
  paidMemoryReqPerSec: 0.9,
  paidRedisReqPerSec: 0.85,
  paidOauthReqPerSec: 0.8,
  addedP50Ms: 0.3,
  addedP99Ms: 1.5,
  soakRssGrowthPct: 5,
  soakMinMinutes: 10,
} as const;

const round = (value: number, places = 3): number => Math.round(value * 10 ** places) / 10 ** places;

export function evaluateTargets(input: TargetInput): TargetResult[] {
  const row = (rows: MeasuredRow[] | null, name: string): MeasuredRow | undefined => rows?.find((r) => r.name === name);
  const bare = row(input.maxRate, 'bare-proxy');
  const results: TargetResult[] = [];

  const throughput = (id: string, scenario: string, label: string, min: number): void => {
    const gateway = row(input.maxRate, scenario);
    const target = `${label} ≥ ${min}× the bare proxy's req/s`;
    if (!bare || !gateway || bare.reqPerSec <= 0) {
      results.push({ id, target, measured: '–', status: 'not measured', scenario });
      return;
    }
    const ratio = gateway.reqPerSec / bare.reqPerSec; // compared unrounded: 0.9699 is not 0.97
    results.push({ id, target, measured: `${round(ratio)}× (${gateway.reqPerSec} vs ${bare.reqPerSec} req/s)`, status: ratio >= min ? 'met' : 'missed', scenario });
  };

  throughput('free-throughput', 'gateway-free', 'free call', TARGETS.freeReqPerSec);
  const free = row(input.maxRate, 'gateway-free');
  if (bare && free && bare.cpuUsPerReq > 0) {
    const ratio = free.cpuUsPerReq / bare.cpuUsPerReq;
    results.push({ id: 'free-cpu', target: `free call CPU µs/req ≤ ${TARGETS.freeCpu}× the bare proxy's`, measured: `${round(ratio)}× (${free.cpuUsPerReq} vs ${bare.cpuUsPerReq} µs/req)`, status: ratio <= TARGETS.freeCpu ? 'met' : 'missed', scenario: 'gateway-free' });
  } else {
    results.push({ id: 'free-cpu', target: `free call CPU µs/req ≤ ${TARGETS.freeCpu}× the bare proxy's`, measured: '–', status: 'not measured', scenario: 'gateway-free' });
  }
  throughput('paid-memory-throughput', 'gateway-paid-memory', 'paid call, memory store', TARGETS.paidMemoryReqPerSec);
  throughput('paid-redis-throughput', 'gateway-paid-redis', 'paid call, Redis store', TARGETS.paidRedisReqPerSec);
  throughput('paid-oauth-throughput', 'gateway-paid-oauth', 'paid call, OAuth (cached token), Redis', TARGETS.paidOauthReqPerSec);

  // Added latency over the bare proxy at the same fixed rate, for each gateway path.
  const fixedBare = row(input.fixedRate, 'bare-proxy');
  for (const [scenario, label] of [
    ['gateway-free', 'free'],
    ['gateway-paid-memory', 'paid memory'],
    ['gateway-paid-redis', 'paid Redis'],
    ['gateway-paid-oauth', 'paid OAuth'],
  ] as const) {
    const gateway = row(input.fixedRate, scenario);
    const target = `${label}: added p50 ≤ ${TARGETS.addedP50Ms} ms, p99 ≤ ${TARGETS.addedP99Ms} ms over the bare proxy at half the paid-Redis max rate`;
    if (!fixedBare || !gateway) {
      results.push({ id: `added-latency-${scenario}`, target, measured: '–', status: 'not measured', scenario });
      continue;
    }
    // Rounded to the microsecond before comparing: latencies are differences of floats.
    const p50 = round(gateway.latencyMs.p50 - fixedBare.latencyMs.p50);
    const p99 = round(gateway.latencyMs.p99 - fixedBare.latencyMs.p99);
    results.push({ id: `added-latency-${scenario}`, target, measured: `${p50 >= 0 ? '+' : ''}${p50} ms p50, ${p99 >= 0 ? '+' : ''}${p99} ms p99`, status: p50 <= TARGETS.addedP50Ms && p99 <= TARGETS.addedP99Ms ? 'met' : 'missed', scenario });
  }

  const soakTarget = `${TARGETS.soakMinMinutes}-min soak at that rate: RSS growth ≤ ${TARGETS.soakRssGrowthPct} % after warm-up, zero errors`;
  if (!input.soak || input.soak.minutes < TARGETS.soakMinMinutes) {
    const short = input.soak ? ` (only ${input.soak.minutes} min run: RSS ${input.soak.rssGrowthPct} %, ${input.soak.non2xx + input.soak.errors} errors)` : '';
    results.push({ id: 'soak', target: soakTarget, measured: `–${short}`, status: 'not measured', scenario: 'gateway-paid-redis' });
  } else {
    const failures = input.soak.non2xx + input.soak.errors;
    results.push({ id: 'soak', target: soakTarget, measured: `RSS ${input.soak.rssGrowthPct} %, ${failures} errors`, status: input.soak.rssGrowthPct <= TARGETS.soakRssGrowthPct && failures === 0 ? 'met' : 'missed', scenario: 'gateway-paid-redis' });
  }
  return results;
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
