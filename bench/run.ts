// `npm run bench` (SPEC §12, issues 9 and 31). One run, one machine, one origin: direct vs a bare
// parse-and-forward proxy vs the gateway (free call, paid call on the memory store, on Redis, on Redis
// with a budget configured, and with OAuth, on memory with OpenTelemetry tracing on, and the
// production-shaped run: 1,000 funded handles at ≤ 2 calls/s each), each server its own child process, driven by
// autocannon on loopback at max rate and by an evenly paced load (paced.ts) at a fixed rate. Writes the numbers to
// bench/results/<stamp>.json and the table to bench/RESULTS.md (between the bench:latest markers).
//
// Flags:
//   --duration S     seconds per throughput/latency scenario (default 10; fractions allowed)
//   --warmup S       warm-up seconds before each measured run (default 1; 0 = none)
//   --quick          short run (3 s scenarios, 50 SSE samples)
//   --soak [D]       also run the soak: paid Redis calls at a fixed rate for D (10m, 90s, or minutes; default 10m)
//   --soak-rate R    req/s for the soak (default: 70% of the paid Redis max rate)
//   --soak-baseline  after the soak, the same soak through the bare proxy (echo, same rate and length):
//                    what the spike rule finds in a Node proxy that does none of the gateway's work
//   --production-handles N  funded handles of the production-shaped scenario (default 1000)
//   --connections N  autocannon connections for the max-rate runs (default 32)
//   --sse-samples N  sequential streaming calls per target for time-to-first-event (default 200)
//   --profile        run the bare proxy and the gateways under --cpu-prof; profiles, a self-time summary and
//                    the per-request cost table (profile-cost.ts) land in the out dir and RESULTS.md
//   --only a,b       only these scenarios (names as in the table)
//   --out DIR        where the JSON goes (default bench/results); --no-markdown leaves RESULTS.md alone
//   --no-pin         do not use taskset
// See bench/README.md for what pinning does (and does not do) on a 2-core machine.
// Environment: BENCH_GATEWAY_NODE_ARGS="--max-semi-space-size=32 …": extra node flags for every gateway
// (not the bare proxy), for experiments such as V8 heap tuning; the report's header names them.
import autocannon from 'autocannon';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Pool, request } from 'undici';
import { startRedis, type RedisServer } from '../test/helpers/redis-server.js';
import { startTestIssuer, type TestIssuer } from '../test/helpers/jwks-issuer.js';
import { freePort } from '../test/helpers/gateway.js';
import { busiestWindow, pacedLoad } from './paced.js';
import { costPerRequest, renderCostTable, selfTime, type CpuProfile } from './profile-cost.js';
import { evaluateTargets, parseSoakDuration, PRODUCTION_SCENARIO, renderTargetTable, secondSpikes, TARGETS, type TargetResult } from './targets.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const CLK_TCK = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;

// ---------------------------------------------------------------------------------------------------
// Options

export interface BenchOptions {
  durationS: number;
  warmupS: number;
  connections: number;
  sseSamples: number;
  soakMinutes: number | null;
  soakRate: number | null;
  soakBaseline: boolean;
  /** Handles of the production-shaped scenario (default 1,000; the suite's smoke run uses a few). */
  productionHandles: number;
  profile: boolean;
  only: Set<string> | null;
  outDir: string;
  markdown: boolean;
  pin: boolean;
}

export function parseArgs(argv: string[]): BenchOptions {
  const value = (name: string): string | undefined => {
    const at = argv.indexOf(name);
    const next = at === -1 ? undefined : argv[at + 1];
    return next !== undefined && !next.startsWith('--') ? next : undefined;
  };
  const quick = argv.includes('--quick');
  return {
    durationS: Number(value('--duration') ?? (quick ? 3 : 10)),
    warmupS: Number(value('--warmup') ?? 1),
    connections: Number(value('--connections') ?? 32),
    sseSamples: Number(value('--sse-samples') ?? (quick ? 50 : 200)),
    soakMinutes: argv.includes('--soak') ? parseSoakDuration(value('--soak')) : null,
    soakRate: value('--soak-rate') === undefined ? null : Number(value('--soak-rate')),
    soakBaseline: argv.includes('--soak-baseline'),
    productionHandles: Number(value('--production-handles') ?? 1_000),
    profile: argv.includes('--profile'),
    only: value('--only') ? new Set((value('--only') as string).split(',')) : null,
    outDir: resolve(value('--out') ?? join(ROOT, 'bench/results')),
    markdown: !argv.includes('--no-markdown'),
    pin: !argv.includes('--no-pin'),
  };
}

// ---------------------------------------------------------------------------------------------------
// Processes

export interface Child {
  name: string;
  proc: ChildProcess;
  pid: number;
  logFile: string;
  stop(): Promise<void>;
}

export const LOAD_CORE = '0';
export const SERVER_CORE = '1';
let pinning = false;

/** Pins this process (autocannon runs in it) to the load core; children inherit unless told otherwise. */
export function pinSelf(enabled: boolean): string {
  if (!enabled) return 'off (--no-pin)';
  if (cpus().length < 2) return 'off (fewer than 2 cores)';
  if (spawnSync('taskset', ['-p', '-c', LOAD_CORE, String(process.pid)]).status !== 0) return 'off (taskset unavailable)';
  pinning = true;
  return `taskset: runner+autocannon+origin+redis on core ${LOAD_CORE}, server under test on core ${SERVER_CORE}`;
}

export function launch(name: string, core: string, argv: string[], workDir: string, env: NodeJS.ProcessEnv = {}): Child {
  const logFile = join(workDir, `${name}.log`);
  const fd = openSync(logFile, 'a');
  const [command, ...args] = pinning ? ['taskset', '-c', core, ...argv] : argv;
  // NODE_OPTIONS cleared: a test runner's hooks must not slow the servers down.
  const proc = spawn(command as string, args, { cwd: ROOT, stdio: ['ignore', fd, fd], env: { ...process.env, NODE_OPTIONS: '', ...env } });
  closeSync(fd);
  const child: Child = {
    name,
    proc,
    pid: proc.pid as number, // taskset execs the command: same pid
    logFile,
    async stop() {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      const exited = new Promise<void>((done) => proc.once('exit', () => done()));
      proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
  return child;
}

export async function waitForHttp(url: string, child: Child, init: { method?: string; body?: string; headers?: Record<string, string> } = {}): Promise<void> {
  const deadline = Date.now() + 120_000; // generous: start-up on a loaded 2-core box can take tens of seconds
  while (Date.now() < deadline) {
    if (child.proc.exitCode !== null) throw new Error(`${child.name} exited (${child.proc.exitCode}):\n${tail(child.logFile)}`);
    try {
      const res = await request(url, { method: (init.method ?? 'GET') as 'GET', body: init.body, headers: init.headers });
      await res.body.dump();
      if (res.statusCode < 500) return;
    } catch {
      // not up yet
    }
    await sleep(50);
  }
  throw new Error(`${child.name} did not answer on ${url}:\n${tail(child.logFile)}`);
}

function tail(file: string): string {
  return existsSync(file) ? readFileSync(file, 'utf8').split('\n').slice(-20).join('\n') : '';
}

/** user+system CPU time of a process, in microseconds (from /proc, clock-tick resolution). */
export function cpuMicros(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1e6) / CLK_TCK;
}

export function rssBytes(pid: number): number {
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return match ? Number(match[1]) * 1024 : 0;
}

// ---------------------------------------------------------------------------------------------------
// MCP requests

export const MCP_HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };

export function callBody(tool: string, args: Record<string, unknown>): string {
  return JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: tool, arguments: { text: 'hello from the bench', ...args } } });
}

interface CallResult {
  result?: { isError?: boolean; _meta?: Record<string, { checkoutUrl?: string; retry?: { value?: string }; remaining?: number }> };
}

async function call(url: string, body: string, headers: Record<string, string> = {}): Promise<CallResult> {
  const res = await request(url, { method: 'POST', headers: { ...MCP_HEADERS, ...headers }, body });
  const text = await res.body.text();
  const data = text.startsWith('{') ? text : (/^data: (.*)$/m.exec(text)?.[1] ?? '{}');
  return JSON.parse(data) as CallResult;
}

/** challenge → dev pay → retry: a handle holding the SKU's whole pack (bound to the bearer's principal, if any). */
export async function fundHandle(gatewayUrl: string, auth: Record<string, string>): Promise<string> {
  const challenge = await call(gatewayUrl, callBody('echo_paid', {}), auth);
  const meta = challenge.result?._meta?.['xyz.tollbooth/challenge'];
  if (!meta?.checkoutUrl || !meta.retry?.value) throw new Error(`expected a challenge, got ${JSON.stringify(challenge)}`);
  const paid = await request(`${meta.checkoutUrl}/pay`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: '' });
  await paid.body.dump();
  if (paid.statusCode !== 303) throw new Error(`dev pay answered ${paid.statusCode}`);
  const handle = meta.retry.value;
  const first = await call(gatewayUrl, callBody('echo_paid', { tollboothToken: handle }), auth);
  if (first.result?._meta?.['xyz.tollbooth/receipt'] === undefined) throw new Error(`funded call has no receipt: ${JSON.stringify(first)}`);
  return handle;
}

export async function authorisedCalls(gatewayOrigin: string): Promise<number> {
  const res = await request(`${gatewayOrigin}/metrics`);
  const text = await res.body.text();
  let sum = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith('tollbooth_paid_calls_total{') && line.includes('outcome="authorised"')) sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

/** What the gateway's /metrics says of its process: heap used, the event loop's longest delay since the last scrape (prom-client resets it), GC seconds by kind so far. */
async function processFacts(gatewayOrigin: string): Promise<{ heap: number; loopMaxMs: number; gcSeconds: Record<string, number> }> {
  const res = await request(`${gatewayOrigin}/metrics`);
  const text = await res.body.text();
  const value = (line: string): number => Number(line.slice(line.lastIndexOf(' ') + 1));
  const facts = { heap: 0, loopMaxMs: 0, gcSeconds: {} as Record<string, number> };
  for (const line of text.split('\n')) {
    if (line.startsWith('nodejs_heap_size_used_bytes ')) facts.heap = value(line);
    else if (line.startsWith('nodejs_eventloop_lag_max_seconds ')) facts.loopMaxMs = value(line) * 1000;
    else if (line.startsWith('nodejs_gc_duration_seconds_sum{')) facts.gcSeconds[/kind="([^"]+)"/.exec(line)?.[1] ?? '?'] = value(line);
  }
  return facts;
}

// ---------------------------------------------------------------------------------------------------
// Load

export interface LoadResult {
  requests: number;
  reqPerSec: number;
  non2xx: number;
  errors: number;
  latencyMs: { p50: number; p90: number; p99: number; p999: number; max: number; mean: number };
  /** [seconds since start, latency ms] of every 2xx response (only kept when asked for) */
  samples?: Float64Array;
  /** Paced runs: the most requests sent within any 50 ms, beside the even share (rate × 50 ms). */
  evenness?: { windowMs: number; evenShare: number; busiest: number };
}

function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number;
}

function summarise(latencies: Float64Array): LoadResult['latencyMs'] {
  const sorted = Float64Array.from(latencies).sort();
  let total = 0;
  for (const v of sorted) total += v;
  const round = (v: number): number => Math.round(v * 1000) / 1000;
  return {
    p50: round(percentile(sorted, 50)),
    p90: round(percentile(sorted, 90)),
    p99: round(percentile(sorted, 99)),
    p999: round(percentile(sorted, 99.9)),
    max: round(sorted[sorted.length - 1] ?? Number.NaN),
    mean: round(total / sorted.length),
  };
}

/**
 * autocannon records whole milliseconds in its histogram; sub-millisecond targets need the exact
 * per-response times, which its `response` event carries (hrtime-based, in ms).
 */
export async function load(url: string, body: string, headers: Record<string, string>, options: { durationS: number; connections: number; rate?: number; keepTimes?: boolean; bodyFor?: (index: number) => string }): Promise<LoadResult> {
  // A fixed rate is paced evenly (bench/paced.ts says why autocannon's overallRate is not used for it).
  if (options.rate) return pacedLoadResult(url, body, headers, { ...options, rate: options.rate });
  if (options.bodyFor) throw new Error('requests that differ are sent paced only (give a rate)');
  let latencies = new Float64Array(1 << 16);
  let times = options.keepTimes ? new Float64Array(1 << 16) : null;
  let count = 0;
  const started = performance.now();
  const instance = autocannon({
    url,
    method: 'POST',
    headers: { ...MCP_HEADERS, ...headers },
    body,
    connections: options.connections,
    duration: options.durationS,
    ...(options.rate ? { overallRate: options.rate } : {}),
  });
  instance.on('response', (_client: unknown, statusCode: number, _bytes: number, responseTime: number) => {
    if (statusCode < 200 || statusCode >= 300) return;
    if (count === latencies.length) {
      const grown = new Float64Array(latencies.length * 2);
      grown.set(latencies);
      latencies = grown;
      if (times) {
        const grownTimes = new Float64Array(times.length * 2);
        grownTimes.set(times);
        times = grownTimes;
      }
    }
    latencies[count] = responseTime;
    if (times) times[count] = (performance.now() - started) / 1000;
    count += 1;
  });
  const result = await new Promise<autocannon.Result>((done, fail) => {
    instance.once('done', done);
    instance.once('error', fail);
  });
  const kept = latencies.subarray(0, count);
  const out: LoadResult = {
    requests: result.requests.total,
    reqPerSec: Math.round(result.requests.total / (result.duration || options.durationS)),
    non2xx: result.non2xx,
    errors: result.errors + result.timeouts,
    latencyMs: summarise(kept),
  };
  if (times) {
    const pairs = new Float64Array(count * 2);
    for (let i = 0; i < count; i++) {
      pairs[i * 2] = times[i] as number;
      pairs[i * 2 + 1] = kept[i] as number;
    }
    out.samples = pairs;
  }
  return out;
}

async function pacedLoadResult(url: string, body: string, headers: Record<string, string>, options: { durationS: number; connections: number; rate: number; keepTimes?: boolean; bodyFor?: (index: number) => string }): Promise<LoadResult> {
  const paced = await pacedLoad(url, { rate: options.rate, durationS: options.durationS, connections: options.connections, headers: { ...MCP_HEADERS, ...headers }, body, ...(options.bodyFor ? { bodyFor: options.bodyFor } : {}) });
  const out: LoadResult = {
    requests: paced.requests,
    reqPerSec: Math.round(paced.requests / paced.elapsedS),
    non2xx: paced.non2xx,
    errors: paced.errors,
    latencyMs: summarise(paced.latencies),
    evenness: { windowMs: 50, evenShare: (options.rate * 50) / 1000, busiest: busiestWindow(paced.sentMs, 50) },
  };
  // The generator's evenness is timing, so it is checked here and not in the suite (issue 33): a burst
  // generator would put a second's share into the first few ms; an even one stays near rate × 50 ms.
  process.stderr.write(`[bench] paced ${options.rate}/s: at most ${out.evenness?.busiest} requests left within any 50 ms (even share ${out.evenness?.evenShare})\n`);
  if (options.keepTimes) {
    const pairs = new Float64Array(paced.ok * 2);
    for (let i = 0; i < paced.ok; i++) {
      pairs[i * 2] = paced.times[i] as number;
      pairs[i * 2 + 1] = paced.latencies[i] as number;
    }
    out.samples = pairs;
  }
  return out;
}

/** Sequential streaming calls: time from sending the request to the first SSE `data:` byte. */
async function timeToFirstEvent(url: string, tool: string, headers: Record<string, string>, samples: number): Promise<{ p50: number; p90: number; p99: number }> {
  const pool = new Pool(new URL(url).origin, { connections: 1 });
  const body = callBody(tool, headers.__token ? { tollboothToken: headers.__token } : {});
  const sendHeaders = { ...MCP_HEADERS, ...headers };
  delete (sendHeaders as Record<string, string>).__token;
  const path = new URL(url).pathname;
  const measured = new Float64Array(samples);
  for (let i = -10; i < samples; i++) {
    const t0 = performance.now();
    const res = await pool.request({ method: 'POST', path, headers: sendHeaders, body });
    let first = 0;
    for await (const chunk of res.body) {
      if (first === 0 && (chunk as Buffer).includes('data:')) first = performance.now() - t0;
    }
    if (first === 0) throw new Error(`no SSE event from ${url} for ${tool} (HTTP ${res.statusCode})`);
    if (i >= 0) measured[i] = first; // the first ten warm the connection and the JIT
  }
  await pool.close();
  const s = summarise(measured);
  return { p50: s.p50, p90: s.p90, p99: s.p99 };
}

// ---------------------------------------------------------------------------------------------------
// Scenarios

type Target = 'origin' | 'bare' | 'gw-memory' | 'gw-traced' | 'gw-redis' | 'gw-budget' | 'gw-oauth' | 'gw-production';

interface Scenario {
  name: string;
  target: Target;
  tool: string;
  paid: boolean;
}

/**
 * The production-shaped scenario (issue 31): this many funded handles, called round-robin, so each
 * sees the offered rate / HANDLES; offered at most PRODUCTION_MAX_RATE, 90 % of what the default
 * per-handle limit (2/s) allows, so jitter never turns a call into a rate_limited refusal.
 */
const PRODUCTION_HANDLES = 1_000;
const PRODUCTION_MAX_RATE = 1_800;

const SCENARIOS: Scenario[] = [
  { name: 'direct', target: 'origin', tool: 'echo', paid: false },
  { name: 'bare-proxy', target: 'bare', tool: 'echo', paid: false },
  { name: 'gateway-free', target: 'gw-memory', tool: 'echo', paid: false },
  { name: 'gateway-paid-memory', target: 'gw-memory', tool: 'echo_paid', paid: true },
  // The same with tracing on (every request sampled, spans exported to a local OTLP sink): the cost of tracing, next to the row without it.
  { name: 'gateway-paid-traced', target: 'gw-traced', tool: 'echo_paid', paid: true },
  { name: 'gateway-paid-redis', target: 'gw-redis', tool: 'echo_paid', paid: true },
  // The same with a budget configured that every call draws on (SPEC §23): the cost of budgets, next to the row without.
  { name: 'gateway-paid-budget', target: 'gw-budget', tool: 'echo_paid', paid: true },
  { name: 'gateway-paid-oauth', target: 'gw-oauth', tool: 'echo_paid', paid: true },
  // Many handles at a realistic per-handle rate, default limits (PRODUCTION_HANDLES): paced, never at "max rate".
  { name: PRODUCTION_SCENARIO, target: 'gw-production', tool: 'echo_paid', paid: true },
];

interface ScenarioResult extends LoadResult {
  name: string;
  server: string;
  cpuUsPerReq: number;
  originCpuUsPerReq: number;
  redisCpuUsPerReq?: number;
  rssMB: number;
  authorised?: number;
  /** The measured run's [from, to) in CLOCK_MONOTONIC µs: its slice of the server's profile. */
  windowUs: { fromUs: number; toUs: number };
}

interface Environment {
  workDir: string;
  origin: Child;
  originUrl: string;
  redis: RedisServer;
  redisPid: number;
  issuer: TestIssuer;
  otlpSink: OtlpSink;
  options: BenchOptions;
}

interface ServerUnderTest {
  name: string;
  child: Child;
  url: string;
  origin: string;
  headers: Record<string, string>;
  token: string | null;
  /** The production-shaped scenario's funded handles (its calls go round-robin over them). */
  tokens?: string[];
}

/** A gateway's variations on the bench config. */
export interface GatewayVariant {
  /** A budget every paid call draws on, caps far above what the run spends (SPEC §23). */
  budget?: boolean;
  /** The shipped limits (per-handle 2/s, burst 10, …) instead of the bench's unlimited ones. */
  defaultLimits?: boolean;
}

export function gatewayConfig(port: number, originUrl: string, store: 'memory' | 'redis', redisUrl: string, issuer: TestIssuer | null, otlpEndpoint = '', variant: GatewayVariant = {}): Record<string, unknown> {
  const publicUrl = `http://127.0.0.1:${port}/mcp`;
  const budgets = variant.budget ? { budgets: [{ name: 'bench-daily', per: 'handle', tools: ['echo_paid'], window: '1d', maxCalls: 1_000_000_000, maxCredits: 1_000_000_000 }] } : {};
  const limits = variant.defaultLimits ? {} : { limits: { perHandle: { ratePerSecond: 1_000_000, burst: 1_000_000 }, challengesPerClient: { ratePerSecond: 1_000, burst: 1_000 }, newChargesPerSecond: 1_000 } };
  return {
    ...budgets,
    ...limits,
    server: { host: '127.0.0.1', port, publicUrl },
    upstream: { url: originUrl, callDeadline: '20s' },
    store: store === 'memory' ? { type: 'memory' } : { type: 'redis', redis: { url: redisUrl, keyPrefix: 'bench:' } },
    payments: { provider: 'dev' },
    skus: { bench: { label: 'Bench credits', amount: '5.00', currency: 'USDC', credits: 100_000_000 } },
    tools: { echo_paid: { sku: 'bench', cost: 1 }, stream_paid: { sku: 'bench', cost: 1 } },
    handles: { hashSecret: 'bench-hash-secret' },
    auth: issuer ? { mode: 'oauth', issuer: issuer.issuer, jwksUrl: issuer.jwksUrl, audience: publicUrl, authorizationServers: [issuer.issuer] } : { mode: 'none' },
    logging: { level: 'info' },
    tracing: { otlpEndpoint, sampleRatio: 1 },
  };
}

/** BENCH_GATEWAY_NODE_ARGS, split on spaces (see the header). */
const GATEWAY_NODE_ARGS = (process.env.BENCH_GATEWAY_NODE_ARGS ?? '').split(' ').filter((arg) => arg !== '');

function profileArgsOf(env: Environment, target: Target): string[] {
  if (!env.options.profile) return [];
  const dir = join(env.options.outDir, 'profiles');
  // Under tsx (the bare proxy) a loader thread is profiled too, and a fixed name would let it overwrite
  // the main thread's profile: that server gets a directory of its own, one file per thread.
  if (target === 'bare') return ['--cpu-prof', '--cpu-prof-dir', join(dir, `${target}-${Date.now()}`)];
  return ['--cpu-prof', '--cpu-prof-dir', dir, '--cpu-prof-name', `${target}-${Date.now()}.cpuprofile`];
}

async function startTarget(env: Environment, target: Target): Promise<ServerUnderTest> {
  const port = await freePort();
  if (target === 'origin') return { name: 'origin', child: env.origin, url: env.originUrl, origin: new URL(env.originUrl).origin, headers: {}, token: null };
  if (target === 'bare') {
    // Profiled too: what the gateway costs above the bare proxy is read by comparing the two profiles.
    const child = launch('bare-proxy', SERVER_CORE, [process.execPath, ...profileArgsOf(env, 'bare'), '--import', 'tsx', 'bench/bare-proxy.ts', '--upstream', env.originUrl, '--port', String(port)], env.workDir);
    const url = `http://127.0.0.1:${port}/mcp`;
    await waitForHttp(url, child, { method: 'POST', body: callBody('echo', {}), headers: MCP_HEADERS });
    return { name: 'bare-proxy', child, url, origin: `http://127.0.0.1:${port}`, headers: {}, token: null };
  }
  const store = target === 'gw-memory' || target === 'gw-traced' ? 'memory' : 'redis';
  const issuer = target === 'gw-oauth' ? env.issuer : null;
  const configFile = join(env.workDir, `${target}.yaml`);
  const variant: GatewayVariant = { budget: target === 'gw-budget', defaultLimits: target === 'gw-production' };
  // JSON is YAML: the config loader reads it as it is.
  writeFileSync(configFile, JSON.stringify(gatewayConfig(port, env.originUrl, store, env.redis.url, issuer, target === 'gw-traced' ? env.otlpSink.url : '', variant), null, 2));
  const child = launch(target, SERVER_CORE, [process.execPath, ...profileArgsOf(env, target), ...GATEWAY_NODE_ARGS, 'dist/cli.js', 'start', '--config', configFile], env.workDir);
  const origin = `http://127.0.0.1:${port}`;
  await waitForHttp(`${origin}/healthz`, child);
  const headers: Record<string, string> = {};
  if (issuer) headers.authorization = `Bearer ${await issuer.mint({ sub: 'bench-user', aud: `${origin}/mcp`, expSeconds: 6 * 3600 })}`;
  // The production-shaped gateway's handles are funded through gw-redis (same Redis, key prefix and hash
  // secret): with the shipped limits, one client could not open a thousand checkout links quickly.
  if (target === 'gw-production') return { name: target, child, url: `${origin}/mcp`, origin, headers, token: null, tokens: [] };
  const token = await fundHandle(`${origin}/mcp`, headers);
  return { name: target, child, url: `${origin}/mcp`, origin, headers, token };
}

/** `count` funded handles, opened `concurrency` at a time through one gateway. */
export async function fundHandles(gatewayUrl: string, count: number, concurrency = 8): Promise<string[]> {
  const handles: string[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < count) {
        next += 1;
        handles.push(await fundHandle(gatewayUrl, {}));
      }
    }),
  );
  return handles;
}

async function runScenario(env: Environment, sut: ServerUnderTest, scenario: Scenario, options: { rate?: number; durationS: number; connections: number }): Promise<ScenarioResult> {
  const body = callBody(scenario.tool, scenario.paid ? { tollboothToken: sut.token } : {});
  // The production-shaped scenario is always paced (never faster than its handles' limit) and goes round-robin over its handles.
  const tokens = sut.tokens;
  const shaped = tokens
    ? { rate: Math.min(options.rate ?? PRODUCTION_MAX_RATE, PRODUCTION_MAX_RATE, (tokens.length * PRODUCTION_MAX_RATE) / PRODUCTION_HANDLES), bodyFor: (i: number) => callBody(scenario.tool, { tollboothToken: tokens[i % tokens.length] }) }
    : options.rate
      ? { rate: options.rate }
      : {};
  // Warm-up: JIT, connection pools, Redis script cache.
  if (env.options.warmupS > 0) await load(sut.url, body, sut.headers, { durationS: env.options.warmupS, connections: options.connections, ...shaped });
  const before = { cpu: cpuMicros(sut.child.pid), origin: cpuMicros(env.origin.pid), redis: cpuMicros(env.redisPid), authorised: scenario.paid ? await authorisedCalls(sut.origin) : 0 };
  const fromUs = monotonicMicros();
  const result = await load(sut.url, body, sut.headers, { durationS: options.durationS, connections: options.connections, ...shaped });
  const toUs = monotonicMicros();
  const perReq = (micros: number): number => Math.round((micros / Math.max(1, result.requests)) * 10) / 10;
  const out: ScenarioResult = {
    name: scenario.name,
    server: sut.name,
    ...result,
    cpuUsPerReq: perReq(cpuMicros(sut.child.pid) - before.cpu),
    originCpuUsPerReq: perReq(cpuMicros(env.origin.pid) - before.origin),
    rssMB: Math.round(rssBytes(sut.child.pid) / 1024 / 102.4) / 10,
    windowUs: { fromUs, toUs },
  };
  if (sut.name === 'gw-redis' || sut.name === 'gw-budget' || sut.name === 'gw-oauth' || sut.name === 'gw-production') out.redisCpuUsPerReq = perReq(cpuMicros(env.redisPid) - before.redis);
  if (scenario.paid) out.authorised = (await authorisedCalls(sut.origin)) - before.authorised;
  if (sut.name === 'origin') out.originCpuUsPerReq = out.cpuUsPerReq;
  return out;
}

// ---------------------------------------------------------------------------------------------------
// The run

export interface BenchReport {
  startedAt: string;
  command: string;
  machine: { cpu: string; cores: number; memoryGB: number; kernel: string; node: string; loadAverageBefore: number[]; loadAverageAfter?: number[] };
  pinning: string;
  options: Omit<BenchOptions, 'only'> & { only: string[] | null };
  maxRate: ScenarioResult[];
  fixedRate: { rate: number; results: ScenarioResult[] } | null;
  ratios: Record<string, number>;
  addedLatencyMs: Record<string, { p50: number; p99: number; p999: number }>;
  /**
   * Not a target: each gateway and the bare proxy paced at half that gateway's own max rate. The
   * target's rate (half the bare proxy's max) is above every paid path's capacity on this machine, so
   * there its added latency is queueing; here it is the gateway's own work per call.
   */
  withinCapacity: { name: string; rate: number; bare: LoadResult['latencyMs']; gateway: LoadResult['latencyMs']; addedMs: { p50: number; p99: number; p999: number }; failures: number }[];
  sse: { samples: number; results: Record<string, { p50: number; p90: number; p99: number }>; deltaP50Ms: Record<string, number> } | null;
  soak: SoakReport | null;
  /** With --soak-baseline: the same soak through the bare proxy (not a target: the floor a Node proxy on this machine shows). */
  soakBaseline: SoakReport | null;
  /** What the OTLP sink received from the traced gateway (spans exported, not dropped). */
  tracing: { exportRequests: number; spans: number; bytes: number } | null;
  profiles: string[];
  /** With --profile: self µs per request by group in each max-rate run (bench/profile-cost.ts). */
  costs: Record<string, Record<string, number>>;
  /** Issue 31's targets against this run (bench/targets.ts). */
  targets: TargetResult[];
  /** For each missed target: the top self-time lines of its gateway's profile, or how to get them. */
  profileHints: Record<string, string[]>;
}

interface SoakReport {
  minutes: number;
  rate: number;
  windows: { minute: number; requests: number; p50: number; p99: number; rssMB: number; heapUsedMB: number }[];
  rssGrowthPct: number;
  heapGrowthPct: number;
  p99DriftMs: number;
  non2xx: number;
  errors: number;
  /** Seconds whose p99 exceeded TARGETS.soakSpikeFactor × the median second's p99 (issue 31). */
  spikeSeconds: number;
  medianSecondP99Ms: number;
  worstSecondP99Ms: number;
  /** The spike seconds (at most 30), each with every process's CPU in that second (% of one core, from /proc) and its pauses. */
  spikes: { second: number; p99Ms: number; cpuPct: Record<string, number>; pauses: SecondPauses | null }[];
  /** Seconds whose longest pause (the gateway's or the generator's event loop) was at least SOAK_PAUSE_MS, and how many of them were spikes. */
  pausedSeconds: { all: number; spikes: number; byGatewayGc: number };
  /** Each process's CPU over the whole soak, % of one core: which one saturates. */
  cpuPct: Record<string, number>;
}

/** The soak runs at this share of the paid Redis max rate (issue 31: 70 % of capacity). */
const SOAK_SHARE = 0.7;
/** A pause this long in a second counts as one (the median second's p99 is ≈ 10 ms here). */
const SOAK_PAUSE_MS = 20;

/** One soak second's stalls: each event loop's longest delay, and the gateway's GC time by kind (ms). */
interface SecondPauses {
  gatewayLoopMaxMs: number;
  generatorLoopMaxMs: number;
  gatewayGcMs: Record<string, number>;
}

export async function runBench(options: BenchOptions): Promise<BenchReport> {
  mkdirSync(options.outDir, { recursive: true });
  const pinText = pinSelf(options.pin);
  const workDir = mkdtempSync(join(tmpdir(), 'tb-bench-'));
  const wanted = (name: string): boolean => options.only === null || options.only.has(name);
  const t0 = performance.now();
  const log = (line: string): void => void process.stderr.write(`[bench +${((performance.now() - t0) / 1000).toFixed(1)}s] ${line}\n`);

  const originPort = await freePort();
  const origin = launch('origin', LOAD_CORE, [process.execPath, '--import', 'tsx', 'bench/origin.ts', '--port', String(originPort)], workDir);
  const originUrl = `http://127.0.0.1:${originPort}/mcp`;
  const redis = await startRedis();
  const redisPid = Number(spawnSync('redis-cli', ['-p', String(redis.port), 'info', 'server'], { encoding: 'utf8' }).stdout.match(/process_id:(\d+)/)?.[1]);
  if (pinning) spawnSync('taskset', ['-p', '-c', LOAD_CORE, String(redisPid)]);
  const issuer = await startTestIssuer();
  const otlpSink = await startOtlpSink();
  const env: Environment = { workDir, origin, originUrl, redis, redisPid, issuer, otlpSink, options };
  const report: BenchReport = {
    startedAt: new Date().toISOString(),
    command: `node --import tsx bench/run.ts ${process.argv.slice(2).join(' ')}`.trim(),
    machine: { cpu: cpus()[0]?.model ?? 'unknown', cores: cpus().length, memoryGB: Math.round(totalmem() / 1024 ** 3), kernel: spawnSync('uname', ['-r'], { encoding: 'utf8' }).stdout.trim(), node: process.version, loadAverageBefore: loadavg().map((l) => Math.round(l * 100) / 100) },
    pinning: pinText,
    options: { ...options, only: options.only ? [...options.only] : null },
    maxRate: [],
    fixedRate: null,
    ratios: {},
    addedLatencyMs: {},
    withinCapacity: [],
    sse: null,
    soak: null,
    soakBaseline: null,
    tracing: null,
    profiles: [],
    costs: {},
    targets: [],
    profileHints: {},
  };

  let measuredFromUs: number;
  const live = new Map<Target, ServerUnderTest>();
  // Each server starts once and stays up for the max-rate, fixed-rate and SSE runs. Only one is under
  // load at a time; the idle ones sleep in epoll (their only timer is the reconciler's, once a minute).
  const use = async (target: Target): Promise<ServerUnderTest> => {
    const existing = live.get(target);
    if (existing) return existing;
    const sut = await startTarget(env, target);
    live.set(target, sut);
    return sut;
  };
  // A gateway whose config this build refuses (budgets before they existed) leaves its scenario out, said once.
  const unavailable = new Set<Target>();
  const tryUse = async (target: Target): Promise<ServerUnderTest | null> => {
    if (unavailable.has(target)) return null;
    try {
      return await use(target);
    } catch (error) {
      if (target !== 'gw-budget') throw error;
      unavailable.add(target);
      log(`gateway-paid-budget left out: the gateway did not start with a budget configured (${String(error).split('\n')[0]})`);
      return null;
    }
  };

  try {
    await waitForHttp(originUrl, origin, { method: 'POST', body: callBody('echo', {}), headers: MCP_HEADERS });
    const targets = new Set(SCENARIOS.filter((s) => wanted(s.name)).map((s) => s.target));
    if (wanted('sse')) targets.add('gw-memory');
    if (options.soakMinutes !== null) targets.add('gw-redis');
    if (options.soakMinutes !== null && options.soakBaseline) targets.add('bare');
    if (targets.has('gw-production')) targets.add('gw-redis');
    log(`starting ${[...targets].join(', ')}`);
    await Promise.all([...targets].map(tryUse));
    const production = live.get('gw-production');
    if (production) {
      const funded = Math.min(PRODUCTION_HANDLES, options.productionHandles);
      log(`funding ${funded} handles for ${PRODUCTION_SCENARIO}`);
      production.tokens = await fundHandles((live.get('gw-redis') as ServerUnderTest).url, funded);
    }
    // Profiles are summarised from here on (start-up, module loading and funding left out).
    measuredFromUs = monotonicMicros();
    for (const scenario of SCENARIOS.filter((s) => wanted(s.name))) {
      const sut = await tryUse(scenario.target);
      if (!sut) continue;
      log(`max rate: ${scenario.name}`);
      report.maxRate.push(await runScenario(env, sut, scenario, { durationS: options.durationS, connections: options.connections }));
    }
    const byName = (rows: ScenarioResult[], name: string): ScenarioResult | undefined => rows.find((r) => r.name === name);
    const bare = byName(report.maxRate, 'bare-proxy');
    for (const row of report.maxRate) if (bare && row.name.startsWith('gateway') && row.name !== PRODUCTION_SCENARIO) report.ratios[`${row.name}/bare-proxy`] = Math.round((row.reqPerSec / bare.reqPerSec) * 1000) / 1000;

    // Added latency at half the bare proxy's max rate (issue 31; without a bare row, half the slowest row's).
    const reference = bare ?? [...report.maxRate].sort((a, b) => a.reqPerSec - b.reqPerSec)[0];
    if (reference) {
      const rate = Math.max(10, Math.round(reference.reqPerSec / 2));
      const results: ScenarioResult[] = [];
      for (const scenario of SCENARIOS.filter((s) => wanted(s.name))) {
        const sut = await tryUse(scenario.target);
        if (!sut) continue;
        log(`fixed rate ${rate}/s: ${scenario.name}`);
        results.push(await runScenario(env, sut, scenario, { durationS: options.durationS, connections: 16, rate }));
      }
      report.fixedRate = { rate, results };
      const direct = byName(results, 'direct');
      for (const row of results) {
        if (!direct || row.name === 'direct') continue;
        report.addedLatencyMs[row.name] = addedLatency(row.latencyMs, direct.latencyMs);
      }
    }

    if (bare) {
      const bareScenario = SCENARIOS.find((s) => s.name === 'bare-proxy') as Scenario;
      for (const row of report.maxRate.filter((r) => r.name.startsWith('gateway') && r.name !== PRODUCTION_SCENARIO)) {
        const scenario = SCENARIOS.find((s) => s.name === row.name) as Scenario;
        const sut = await tryUse(scenario.target);
        if (!sut) continue;
        const rate = Math.max(10, Math.round(row.reqPerSec / 2));
        log(`within capacity, ${rate}/s: bare-proxy and ${row.name}`);
        const pair = { durationS: options.durationS, connections: 16, rate };
        const bareRun = await runScenario(env, await use('bare'), bareScenario, pair);
        const gatewayRun = await runScenario(env, sut, scenario, pair);
        report.withinCapacity.push({ name: row.name, rate, bare: bareRun.latencyMs, gateway: gatewayRun.latencyMs, addedMs: addedLatency(gatewayRun.latencyMs, bareRun.latencyMs), failures: gatewayRun.non2xx + gatewayRun.errors });
      }
    }

    if (wanted('sse')) {
      log('time to first event');
      const results: Record<string, { p50: number; p90: number; p99: number }> = {};
      results.direct = await timeToFirstEvent(originUrl, 'stream', {}, options.sseSamples);
      const gw = await use('gw-memory');
      results['gateway-free'] = await timeToFirstEvent(gw.url, 'stream', {}, options.sseSamples);
      results['gateway-paid-memory'] = await timeToFirstEvent(gw.url, 'stream_paid', { __token: gw.token as string }, options.sseSamples);
      const deltaP50Ms: Record<string, number> = {};
      for (const [name, r] of Object.entries(results)) if (name !== 'direct') deltaP50Ms[name] = Math.round((r.p50 - (results.direct as { p50: number }).p50) * 1000) / 1000;
      report.sse = { samples: options.sseSamples, results, deltaP50Ms };
    }

    if (options.soakMinutes !== null) {
      const sut = await use('gw-redis');
      const paidRedis = byName(report.maxRate, 'gateway-paid-redis');
      const rate = options.soakRate ?? Math.max(10, Math.round((paidRedis?.reqPerSec ?? 1000) * SOAK_SHARE));
      log(`soak: ${options.soakMinutes} min at ${rate}/s`);
      report.soak = await soak(env, sut, rate, options.soakMinutes);
      if (options.soakBaseline) {
        log(`soak baseline (the bare proxy): ${options.soakMinutes} min at ${rate}/s`);
        report.soakBaseline = await soak(env, await use('bare'), rate, options.soakMinutes);
      }
    }
  } finally {
    log('stopping');
    await Promise.all([...live.values()].filter((sut) => sut.child !== origin).map((sut) => sut.child.stop()));
    await origin.stop();
    await redis.stop();
    await issuer.close();
    await otlpSink.close();
    rmSync(workDir, { recursive: true, force: true });
  }
  if (live.has('gw-traced')) report.tracing = { exportRequests: otlpSink.requests, spans: otlpSink.spans, bytes: otlpSink.bytes };

  log('done');
  report.machine.loadAverageAfter = loadavg().map((l) => Math.round(l * 100) / 100);
  if (options.profile) {
    report.profiles = summariseProfiles(join(options.outDir, 'profiles'), measuredFromUs);
    report.costs = costsOf(join(options.outDir, 'profiles'), report.maxRate);
  }
  report.targets = evaluateTargets({ maxRate: report.maxRate, fixedRate: report.fixedRate?.results ?? null, soak: report.soak });
  report.profileHints = profileHints(report);
  const stamp = report.startedAt.replace(/[:.]/g, '-');
  writeFileSync(join(options.outDir, `${stamp}.json`), JSON.stringify(report, null, 2));
  if (options.markdown) writeMarkdown(report);
  return report;
}

interface OtlpSink {
  url: string;
  requests: number;
  spans: number;
  bytes: number;
  close(): Promise<void>;
}

/**
 * Where the traced gateway exports (it runs beside autocannon, so it does as little as it can): answers
 * 200 to every OTLP/JSON post and counts spans by their `"spanId":` keys instead of parsing.
 */
async function startOtlpSink(): Promise<OtlpSink> {
  const sink: OtlpSink = { url: '', requests: 0, spans: 0, bytes: 0, close: async () => undefined };
  const server: Server = createServer((req, res) => {
    sink.requests += 1;
    let tail = '';
    req.on('data', (chunk: Buffer) => {
      sink.bytes += chunk.length;
      const text = tail + chunk.toString('latin1');
      sink.spans += text.split('"spanId":').length - 1;
      tail = text.slice(-9);
      if (tail.includes('"spanId":')) tail = '';
    });
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{}'));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  sink.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  sink.close = () => new Promise<void>((resolve) => server.close(() => resolve()));
  return sink;
}

/** What `row` adds over `reference` at p50, p99 and p99.9 (ms, to the µs). */
function addedLatency(row: LoadResult['latencyMs'], reference: LoadResult['latencyMs']): { p50: number; p99: number; p999: number } {
  const delta = (k: 'p50' | 'p99' | 'p999'): number => Math.round((row[k] - reference[k]) * 1000) / 1000;
  return { p50: delta('p50'), p99: delta('p99'), p999: delta('p999') };
}

async function soak(env: Environment, sut: ServerUnderTest, rate: number, minutes: number): Promise<SoakReport> {
  // The bare proxy forwards free calls only (its own max-rate row's): a token would mean nothing to it.
  const bare = sut.name === 'bare-proxy';
  const body = bare ? callBody('echo', {}) : callBody('echo_paid', { tollboothToken: sut.token });
  const memory: { t: number; rss: number; heap: number }[] = [];
  const started = performance.now();
  // Per-second CPU of every process in the run, to tell which one saturates in a slow second, and the
  // second's pauses: a stall shows as a slow second without a busy process. The gateway's come from its
  // /metrics (one scrape a second: its heap every 10th), the generator's from its own loop monitor.
  const processes: Record<string, number> = { [bare ? 'bare-proxy' : 'gateway']: sut.child.pid, redis: env.redisPid, origin: env.origin.pid, generator: process.pid };
  const cpuBySecond: Record<string, number>[] = [];
  const pausesBySecond: SecondPauses[] = [];
  const generatorLoop = monitorEventLoopDelay({ resolution: 1 });
  generatorLoop.enable();
  let gcBefore: Record<string, number> | null = null;
  let last = Object.fromEntries(Object.entries(processes).map(([name, pid]) => [name, cpuMicros(pid)]));
  const cpuStart = last;
  const cpuSampler = setInterval(() => {
    const now = Object.fromEntries(Object.entries(processes).map(([name, pid]) => [name, cpuMicros(pid)]));
    const second = cpuBySecond.push(Object.fromEntries(Object.keys(processes).map((name) => [name, Math.round(((now[name] as number) - (last[name] as number)) / 1e4)]))) - 1;
    last = now;
    const generatorLoopMaxMs = generatorLoop.max / 1e6;
    generatorLoop.reset();
    // The bare proxy has no /metrics: its seconds carry CPU and RSS only.
    void (bare ? Promise.resolve(null) : processFacts(sut.origin)).then(
      (facts) => {
        if (facts) {
          const gatewayGcMs = Object.fromEntries(Object.entries(facts.gcSeconds).map(([kind, total]) => [kind, Math.round((total - (gcBefore?.[kind] ?? total)) * 1e4) / 10]));
          gcBefore = facts.gcSeconds;
          pausesBySecond[second] = { gatewayLoopMaxMs: Math.round(facts.loopMaxMs * 10) / 10, generatorLoopMaxMs: Math.round(generatorLoopMaxMs * 10) / 10, gatewayGcMs };
        }
        if (second % 10 === 9) memory.push({ t: (performance.now() - started) / 1000, rss: rssBytes(sut.child.pid), heap: facts?.heap ?? 0 });
      },
      () => undefined,
    );
  }, 1_000);
  const durationS = Math.round(minutes * 60);
  const result = await load(sut.url, body, sut.headers, { durationS, connections: 16, rate, keepTimes: true });
  clearInterval(cpuSampler);
  generatorLoop.disable();
  const elapsedS = (performance.now() - started) / 1000;
  const cpuPct = Object.fromEntries(Object.entries(processes).map(([name, pid]) => [name, Math.round((cpuMicros(pid) - (cpuStart[name] as number)) / elapsedS / 1e4)]));
  const samples = result.samples as Float64Array;
  const windows: SoakReport['windows'] = [];
  const windowS = minutes >= 2 ? 60 : Math.max(5, Math.round((minutes * 60) / 4));
  for (let start = 0; start < minutes * 60; start += windowS) {
    const inWindow: number[] = [];
    for (let i = 0; i < samples.length; i += 2) if ((samples[i] as number) >= start && (samples[i] as number) < start + windowS) inWindow.push(samples[i + 1] as number);
    const mem = memory.filter((m) => m.t >= start && m.t < start + windowS).at(-1) ?? memory.at(-1);
    const s = summarise(Float64Array.from(inWindow));
    windows.push({ minute: Math.round((start / 60) * 100) / 100, requests: inWindow.length, p50: s.p50, p99: s.p99, rssMB: Math.round((mem?.rss ?? 0) / 104857.6) / 10, heapUsedMB: Math.round((mem?.heap ?? 0) / 104857.6) / 10 });
  }
  const spikes = secondSpikes(samples, TARGETS.soakSpikeFactor);
  // Growth from the end of the first window (after warm-up) to the end of the run.
  const base = windows[0];
  const lastWindow = windows.at(-1);
  const growth = (a = 0, b = 0): number => (a > 0 ? Math.round(((b - a) / a) * 1000) / 10 : 0);
  const ms = (v: number): number => Math.round(v * 1000) / 1000;
  return {
    minutes,
    rate,
    windows,
    rssGrowthPct: growth(base?.rssMB, lastWindow?.rssMB),
    heapGrowthPct: growth(base?.heapUsedMB, lastWindow?.heapUsedMB),
    p99DriftMs: ms((lastWindow?.p99 ?? 0) - (base?.p99 ?? 0)),
    non2xx: result.non2xx,
    errors: result.errors,
    spikeSeconds: spikes.spikes.length,
    medianSecondP99Ms: ms(spikes.median),
    worstSecondP99Ms: ms(spikes.worst),
    spikes: spikes.spikes.slice(0, 30).map((second) => ({ second, p99Ms: ms(spikes.perSecondP99.get(second) as number), cpuPct: cpuBySecond[second] ?? {}, pauses: pausesBySecond[second] ?? null })),
    pausedSeconds: pausedSeconds(pausesBySecond, new Set(spikes.spikes)),
    cpuPct,
  };
}

function pausedSeconds(bySecond: SecondPauses[], spikes: Set<number>): SoakReport['pausedSeconds'] {
  const longest = (p: SecondPauses): number => Math.max(p.gatewayLoopMaxMs, p.generatorLoopMaxMs);
  const paused = [...bySecond.entries()].filter(([, p]) => p !== undefined && longest(p) >= SOAK_PAUSE_MS);
  return {
    all: paused.length,
    spikes: paused.filter(([second]) => spikes.has(second)).length,
    byGatewayGc: paused.filter(([, p]) => (p.gatewayGcMs.major ?? 0) + (p.gatewayGcMs.minor ?? 0) + (p.gatewayGcMs.incremental ?? 0) >= SOAK_PAUSE_MS).length,
  };
}

/** Self time per function of each .cpuprofile as a share of busy (non-idle) time, top 25: the evidence behind each optimisation. */
function summariseProfiles(dir: string, fromUs = 0): string[] {
  if (!existsSync(dir)) return [];
  const written: string[] = [];
  for (const file of readdirSync(dir).filter((f) => f.endsWith('.cpuprofile'))) {
    const profile = JSON.parse(readFileSync(join(dir, file), 'utf8')) as CpuProfile;
    // V8's sample times and process.hrtime are both CLOCK_MONOTONIC (µs): keep the measured runs only.
    // Should the clocks not line up (no sample after fromUs), the whole profile is used.
    const lastSample = profile.timeDeltas.reduce((at, delta) => at + delta, profile.startTime);
    const from = lastSample >= fromUs ? fromUs : 0;
    // Shares of busy time: the idle event loop is not a cost.
    const { byKey: byFrame, total } = selfTime(profile, { fromUs: from, toUs: Infinity }, (frame) => `${frame.functionName || '(anonymous)'} ${frame.url.replace(/^.*\/(node_modules|dist|src)\//, '$1/')}:${frame.lineNumber + 1}`);
    const lines = [...byFrame.entries()].sort((a, b) => b[1] - a[1]).slice(0, 25).map(([k, v]) => `${((v / total) * 100).toFixed(1).padStart(5)}%  ${k}`);
    const out = join(dir, file.replace(/\.cpuprofile$/, '.top.txt'));
    writeFileSync(out, `${lines.join('\n')}\n`);
    written.push(out);
  }
  return written;
}

const monotonicMicros = (): number => Number(process.hrtime.bigint() / 1000n);

/** Each profiled max-rate run's self µs per request by group, from its server's newest profile. */
function costsOf(dir: string, rows: ScenarioResult[]): Record<string, Record<string, number>> {
  if (!existsSync(dir)) return {};
  const entries = readdirSync(dir).sort();
  const costs: Record<string, Record<string, number>> = {};
  // One server's profile serves several runs (gw-memory: free and paid memory): parsed once.
  const profiles = new Map<string, CpuProfile>();
  const parsed = (file: string): CpuProfile => {
    let profile = profiles.get(file);
    if (!profile) profiles.set(file, (profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile));
    return profile;
  };
  for (const row of rows) {
    const target = SCENARIOS.find((s) => s.name === row.name)?.target;
    const newest = entries.filter((f) => f.startsWith(`${target}-`) && !f.endsWith('.txt')).at(-1);
    if (!newest) continue;
    // A file, or a directory of one profile per thread: the thread busiest in the run is the server's.
    const files = newest.endsWith('.cpuprofile') ? [join(dir, newest)] : readdirSync(join(dir, newest)).filter((f) => f.endsWith('.cpuprofile')).map((f) => join(dir, newest, f));
    const window = { ...row.windowUs, requests: row.requests };
    const cost = files.map((file) => costPerRequest(parsed(file), window)).sort((a, b) => (b.get('total') ?? 0) - (a.get('total') ?? 0))[0];
    if (cost) costs[row.name] = Object.fromEntries([...cost].map(([group, us]) => [group, Math.round(us * 10) / 10]));
  }
  return costs;
}

/** What stands in the way of each missed target: its gateway's top self-time frames (from `--profile`), or the command that gets them. */
function profileHints(report: BenchReport): Record<string, string[]> {
  const hints: Record<string, string[]> = {};
  for (const missed of report.targets.filter((r) => r.status === 'missed')) {
    const target = SCENARIOS.find((s) => s.name === missed.scenario)?.target;
    const summary = target ? report.profiles.filter((file) => file.includes(`/${target}-`)).sort().at(-1) : undefined;
    hints[missed.id] = summary
      ? [`profile ${summary.replace(`${ROOT}/`, '')} (measured runs only, share of busy time), top self time:`, ...readFileSync(summary, 'utf8').split('\n').filter(Boolean).slice(0, 10)]
      : [`no profile in this run: \`npm run bench -- --profile --only bare-proxy,${missed.scenario}\` writes one (see bench/RESULTS.md, "What stands in the way")`];
  }
  return hints;
}

// ---------------------------------------------------------------------------------------------------
// RESULTS.md

const BEGIN = '<!-- bench:latest -->';
const END = '<!-- /bench:latest -->';

export function renderMarkdown(report: BenchReport): string {
  const lines: string[] = [];
  lines.push(`Run ${report.startedAt} — \`${report.command}\``, '');
  lines.push(`Machine: ${report.machine.cpu}, ${report.machine.cores} cores, ${report.machine.memoryGB} GB, Linux ${report.machine.kernel}, Node ${report.machine.node}. Load average (1/5/15 min) before ${report.machine.loadAverageBefore.join(' / ')}, after ${report.machine.loadAverageAfter?.join(' / ') ?? '?'}. Pinning: ${report.pinning}.${GATEWAY_NODE_ARGS.length > 0 ? ` Gateways run with node ${GATEWAY_NODE_ARGS.join(' ')}.` : ''}`, '');
  if (report.targets.length > 0) {
    lines.push('Targets (issue 31, logging at `info` as shipped; bench/targets.ts):', '', ...renderTargetTable(report.targets), '');
    const hinted = Object.entries(report.profileHints);
    if (hinted.length > 0) {
      lines.push('Profile hints for the missed targets:', '');
      for (const [id, hint] of hinted) lines.push(`- \`${id}\`: ${hint[0]}`, ...hint.slice(1).map((l) => `    - \`${l.trim()}\``));
      lines.push('');
    }
  }
  lines.push(`Max rate (${report.options.connections} connections, ${report.options.durationS} s each):`, '');
  lines.push('| scenario | req/s | p50 ms | p99 ms | p99.9 ms | CPU µs/req (server) | CPU µs/req (origin) | CPU µs/req (redis) | RSS MB | non-2xx | authorised |');
  lines.push('| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |');
  for (const r of report.maxRate) {
    lines.push(`| ${r.name} | ${r.reqPerSec} | ${r.latencyMs.p50} | ${r.latencyMs.p99} | ${r.latencyMs.p999} | ${r.cpuUsPerReq} | ${r.originCpuUsPerReq} | ${r.redisCpuUsPerReq ?? '–'} | ${r.rssMB} | ${r.non2xx + r.errors} | ${r.authorised ?? '–'} |`);
  }
  lines.push('');
  if (Object.keys(report.ratios).length > 0) {
    lines.push('Ratios (req/s vs the bare proxy): ' + Object.entries(report.ratios).map(([k, v]) => `${k} = **${v}**`).join(', ') + '.', '');
  }
  const costed = Object.entries(report.costs);
  if (costed.length > 0) {
    lines.push('Where the server CPU goes in each max-rate run (`--profile`: self time of the samples inside the run, by where the code lives, per request; bench/profile-cost.ts). Rows are ordered by how much more a gateway pays than the first column:', '');
    lines.push(...renderCostTable(costed.map(([name, cost]) => ({ name, cost: new Map(Object.entries(cost)) }))), '');
  }
  if (report.fixedRate) {
    lines.push(`Fixed rate ${report.fixedRate.rate} req/s (half the bare proxy's max; ${PRODUCTION_SCENARIO} at most ${PRODUCTION_MAX_RATE}/s, its handles' limit), evenly paced over 16 connections (bench/paced.ts; latency from each request's due time):`, '');
    lines.push('| scenario | p50 ms | p99 ms | p99.9 ms | added p50 ms | added p99 ms | added p99.9 ms | CPU µs/req |');
    lines.push('| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |');
    for (const r of report.fixedRate.results) {
      const added = report.addedLatencyMs[r.name];
      lines.push(`| ${r.name} | ${r.latencyMs.p50} | ${r.latencyMs.p99} | ${r.latencyMs.p999} | ${added?.p50 ?? '–'} | ${added?.p99 ?? '–'} | ${added?.p999 ?? '–'} | ${r.cpuUsPerReq} |`);
    }
    lines.push('');
  }
  if (report.withinCapacity.length > 0) {
    lines.push(
      "Within capacity (not a target): each gateway and the bare proxy paced at half that gateway's own max rate, 16 connections. At the target's rate above, a path whose capacity is below it only queues; here the added latency is the gateway's own work per call:",
      '',
    );
    lines.push('| scenario | rate req/s | bare p50 ms | bare p99 ms | gateway p50 ms | gateway p99 ms | added p50 ms | added p99 ms | failures |', '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |');
    for (const r of report.withinCapacity) lines.push(`| ${r.name} | ${r.rate} | ${r.bare.p50} | ${r.bare.p99} | ${r.gateway.p50} | ${r.gateway.p99} | ${r.addedMs.p50} | ${r.addedMs.p99} | ${r.failures} |`);
    lines.push('');
  }
  if (report.sse) {
    lines.push(`SSE time to first event (${report.sse.samples} sequential streaming calls each):`, '');
    lines.push('| path | p50 ms | p90 ms | p99 ms | Δp50 vs direct ms |', '| --- | ---: | ---: | ---: | ---: |');
    for (const [name, r] of Object.entries(report.sse.results)) lines.push(`| ${name} | ${r.p50} | ${r.p90} | ${r.p99} | ${report.sse.deltaP50Ms[name] ?? '–'} |`);
    lines.push('');
  }
  if (report.tracing) {
    const paid = report.maxRate.find((r) => r.name === 'gateway-paid-memory');
    const traced = report.maxRate.find((r) => r.name === 'gateway-paid-traced');
    const cost = paid && traced ? ` Tracing on vs off (paid, memory store): ${Math.round((traced.reqPerSec / paid.reqPerSec) * 1000) / 1000}× the req/s, ${Math.round((traced.cpuUsPerReq - paid.cpuUsPerReq) * 10) / 10} µs more CPU per request.` : '';
    lines.push(`Tracing: the OTLP sink received ${report.tracing.spans} spans in ${report.tracing.exportRequests} exports (${Math.round(report.tracing.bytes / 1024)} KiB).${cost}`, '');
  }
  if (report.soak) renderSoak(lines, report.soak, 'Soak: paid Redis calls', true);
  if (report.soakBaseline) renderSoak(lines, report.soakBaseline, "Soak baseline (not a target): the bare proxy, free calls, at the soak's rate, under the same rule", false);
  return lines.join('\n');
}

/**
 * A soak's lines: its summary, per-minute windows and spike seconds. A gateway's seconds also carry
 * its heap and stalls (its /metrics); the bare proxy has no /metrics, so its carry CPU and RSS only.
 */
function renderSoak(lines: string[], s: SoakReport, title: string, fromMetrics: boolean): void {
  const heap = fromMetrics ? `, heap growth ${s.heapGrowthPct}%` : '';
  lines.push(`${title} at ${s.rate} req/s for ${s.minutes} min — RSS growth ${s.rssGrowthPct}%${heap}, p99 drift ${s.p99DriftMs} ms, non-2xx+errors ${s.non2xx + s.errors}; per-second p99: median ${s.medianSecondP99Ms} ms, worst ${s.worstSecondP99Ms} ms, ${s.spikeSeconds} seconds over ${TARGETS.soakSpikeFactor}× the median.`, '');
  lines.push(`CPU over the soak (% of one core): ${Object.entries(s.cpuPct).map(([name, pct]) => `${name} ${pct}`).join(', ')}.`, '');
  lines.push(`| minute | requests | p50 ms | p99 ms | RSS MB |${fromMetrics ? ' heap used MB |' : ''}`, `| ---: | ---: | ---: | ---: | ---: |${fromMetrics ? ' ---: |' : ''}`);
  for (const w of s.windows) lines.push(`| ${w.minute} | ${w.requests} | ${w.p50} | ${w.p99} | ${w.rssMB} |${fromMetrics ? ` ${w.heapUsedMB} |` : ''}`);
  lines.push('');
  if (s.spikes.length === 0) return;
  const names = Object.keys(s.cpuPct);
  const cpu = "each process's CPU in that second (% of one core; 100 = a saturated core)";
  if (!fromMetrics) {
    lines.push(`Seconds over ${TARGETS.soakSpikeFactor}× the median p99, with ${cpu}:`, '');
    lines.push(`| second | p99 ms | ${names.join(' | ')} |`, `| ---: | ---: | ${names.map(() => '---:').join(' | ')} |`);
    for (const spike of s.spikes) lines.push(`| ${spike.second} | ${spike.p99Ms} | ${names.map((n) => spike.cpuPct[n] ?? '–').join(' | ')} |`);
    lines.push('');
    return;
  }
  lines.push(
    `Seconds over ${TARGETS.soakSpikeFactor}× the median p99, with ${cpu} and its stalls: the longest event-loop delay of the gateway (its /metrics, scraped each second) and of the generator, and the gateway's GC time in that second by kind. Seconds with a stall of ≥ ${SOAK_PAUSE_MS} ms: ${s.pausedSeconds.all}, of them spikes ${s.pausedSeconds.spikes}; with ≥ ${SOAK_PAUSE_MS} ms of gateway GC: ${s.pausedSeconds.byGatewayGc}.`,
    '',
  );
  lines.push(`| second | p99 ms | ${names.join(' | ')} | gateway loop max ms | generator loop max ms | gateway GC ms (major / minor / incremental) |`, `| ---: | ---: | ${names.map(() => '---:').join(' | ')} | ---: | ---: | ---: |`);
  for (const spike of s.spikes) {
    const p = spike.pauses;
    const gc = p ? ['major', 'minor', 'incremental'].map((kind) => p.gatewayGcMs[kind] ?? 0).join(' / ') : '–';
    lines.push(`| ${spike.second} | ${spike.p99Ms} | ${names.map((n) => spike.cpuPct[n] ?? '–').join(' | ')} | ${p?.gatewayLoopMaxMs ?? '–'} | ${p?.generatorLoopMaxMs ?? '–'} | ${gc} |`);
  }
  lines.push('');
}

function writeMarkdown(report: BenchReport): void {
  const file = join(ROOT, 'bench/RESULTS.md');
  const block = `${BEGIN}\n${renderMarkdown(report)}\n${END}`;
  const current = existsSync(file) ? readFileSync(file, 'utf8') : `# Benchmark results\n\n## Latest run\n\n${BEGIN}\n${END}\n`;
  const start = current.indexOf(BEGIN);
  const end = current.indexOf(END);
  const next = start === -1 || end === -1 ? `${current}\n${block}\n` : `${current.slice(0, start)}${block}${current.slice(end + END.length)}`;
  writeFileSync(file, next);
}

// ---------------------------------------------------------------------------------------------------

const invokedDirectly = process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url);
if (invokedDirectly) {
  const report = await runBench(parseArgs(process.argv.slice(2)));
  process.stdout.write(`${renderMarkdown(report)}\n`);
  process.exit(0);
}
