// Interleaved A/B: two gateway builds (or one build, two configs) side by side under the same load,
// alternately, N rounds. On a shared machine absolute numbers move by 2× between runs; within a
// round both sides see the same neighbours, so "A beat B in k of N rounds" and the medians are the
// evidence for a lever (bench/RESULTS.md, "Optimisation log").
//
//   node --import tsx bench/ab.ts --a <build> --b <build> [--scenario paid-memory] [--rounds 10]
//        [--duration 3] [--warmup 1] [--connections 32] [--rate N] [--a-config JSON] [--b-config JSON] [--no-pin]
//        [--profile DIR] [--handles N]
//
// <build>: `worktree` (this tree's dist/, built by `npm run build`), a directory holding a built
// cli.js, or a git ref (its src/ is compiled into bench/.ab/<sha>/ once, next to node_modules).
// --a-config / --b-config: JSON merged into that side's gateway config, e.g. '{"logging":{"level":"warn"}}'.
// --rate N: each side is loaded evenly paced at N req/s (bench/paced.ts) instead of at its max rate, so
// both do the same number of calls per second and CPU µs/req compares the work per call alone (at max
// rate a side that makes Redis or the origin slower, on the load core, also changes how the gateway
// batches its writes). --profile DIR: each side runs with `--cpu-prof` and writes <A|B>.cpuprofile
// there when it stops (whole run: set the two side by side, both served the same calls when paced).
// --handles N (paid-memory or paid-redis, with --rate): N funded handles per side, called round-robin, so each
// handle sees rate/N calls per second (the production shape: no handle called by two calls at once),
// instead of one hot handle. Redis scenarios also print Redis's CPU per request while each side ran.
// Scenarios: free, paid-memory, paid-redis, paid-oauth. Each side is pinned to core 1 like the bench
// (one runs at a time; the other idles); load, origin and Redis are on core 0.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startRedis, type RedisServer } from '../test/helpers/redis-server.js';
import { startTestIssuer, type TestIssuer } from '../test/helpers/jwks-issuer.js';
import { freePort } from '../test/helpers/gateway.js';
import { callBody, cpuMicros, fundHandle, fundHandles, gatewayConfig, launch, LOAD_CORE, load, MCP_HEADERS, pinSelf, SERVER_CORE, waitForHttp, type Child } from './run.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');

type Scenario = 'free' | 'paid-memory' | 'paid-redis' | 'paid-oauth';

interface Side {
  label: 'A' | 'B';
  build: string;
  cli: string;
  config: Record<string, unknown>;
}

interface RoundResult {
  round: number;
  first: 'A' | 'B';
  A: SideResult;
  B: SideResult;
}

interface SideResult {
  usPerReq: number;
  reqPerSec: number;
  /** Redis CPU per request while this side ran (Redis scenarios). */
  redisUsPerReq?: number;
}

function option(argv: string[], name: string, fallback?: string): string | undefined {
  const at = argv.indexOf(name);
  return at === -1 ? fallback : argv[at + 1];
}

/** A build's cli.js: this tree's dist/, a directory, or a git ref compiled once into bench/.ab/. */
function resolveBuild(build: string): string {
  if (build === 'worktree') return join(ROOT, 'dist/cli.js');
  if (existsSync(join(build, 'cli.js'))) return resolve(build, 'cli.js');
  const sha = spawnSync('git', ['rev-parse', '--verify', `${build}^{commit}`], { cwd: ROOT, encoding: 'utf8' }).stdout.trim();
  if (!sha) throw new Error(`--a/--b: ${build} is neither "worktree", a directory with cli.js, nor a git ref`);
  const dir = join(ROOT, 'bench/.ab', sha.slice(0, 12));
  const cli = join(dir, 'dist/cli.js');
  if (existsSync(cli)) return cli;
  mkdirSync(dir, { recursive: true });
  const archive = spawnSync('sh', ['-c', `git archive ${sha} src tsconfig.json package.json | tar -x -C ${dir}`], { cwd: ROOT, encoding: 'utf8' });
  if (archive.status !== 0) throw new Error(`git archive ${sha}: ${archive.stderr}`);
  const tsc = spawnSync(process.execPath, [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', join(dir, 'tsconfig.json')], { cwd: dir, encoding: 'utf8' });
  if (tsc.status !== 0) throw new Error(`tsc for ${sha}: ${tsc.stdout}${tsc.stderr}`);
  return cli;
}

function merge(base: Record<string, unknown>, patch: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...base };
  for (const [key, value] of Object.entries(patch)) {
    const current = out[key];
    out[key] = value && typeof value === 'object' && !Array.isArray(value) && current && typeof current === 'object' ? merge(current as Record<string, unknown>, value as Record<string, unknown>) : value;
  }
  return out;
}

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
};
const r1 = (v: number): number => Math.round(v * 10) / 10;

async function main(argv: string[]): Promise<void> {
  const scenario = (option(argv, '--scenario', 'paid-memory') as Scenario);
  if (!['free', 'paid-memory', 'paid-redis', 'paid-oauth'].includes(scenario)) throw new Error(`--scenario: free, paid-memory, paid-redis or paid-oauth, not ${scenario}`);
  const rounds = Number(option(argv, '--rounds', '10'));
  const durationS = Number(option(argv, '--duration', '3'));
  const warmupS = Number(option(argv, '--warmup', '1'));
  const connections = Number(option(argv, '--connections', '32'));
  const rate = option(argv, '--rate') === undefined ? undefined : Number(option(argv, '--rate'));
  const handles = Number(option(argv, '--handles', '1'));
  if (handles > 1 && (rate === undefined || scenario === 'free' || scenario === 'paid-oauth')) throw new Error('--handles: paid-memory or paid-redis, paced (--rate)');
  const paced = rate === undefined ? {} : { rate };
  const profileDir = option(argv, '--profile');
  const sides: Side[] = (['A', 'B'] as const).map((label) => {
    const build = option(argv, `--${label.toLowerCase()}`, 'worktree') as string;
    return { label, build, cli: resolveBuild(build), config: JSON.parse(option(argv, `--${label.toLowerCase()}-config`, '{}') as string) as Record<string, unknown> };
  });
  const pinning = pinSelf(!argv.includes('--no-pin'));
  const workDir = mkdtempSync(join(tmpdir(), 'tb-ab-'));
  const log = (line: string): void => void process.stderr.write(`[ab] ${line}\n`);
  log(`${scenario}, ${rounds} rounds of ${durationS} s (+${warmupS} s warm-up), ${connections} connections, ${rate === undefined ? 'max rate' : `paced at ${rate} req/s`}; ${pinning}`);

  const children: Child[] = [];
  let redis: RedisServer | null = null;
  /** Redis runs for both sides but serves one at a time: its CPU during a side's run is that side's. */
  let redisPid: number | null = null;
  let issuer: TestIssuer | null = null;
  try {
    const originPort = await freePort();
    const origin = launch('origin', LOAD_CORE, [process.execPath, '--import', 'tsx', 'bench/origin.ts', '--port', String(originPort)], workDir);
    children.push(origin);
    const originUrl = `http://127.0.0.1:${originPort}/mcp`;
    await waitForHttp(originUrl, origin, { method: 'POST', body: callBody('echo', {}), headers: MCP_HEADERS });
    const store = scenario === 'paid-redis' || scenario === 'paid-oauth' ? 'redis' : 'memory';
    if (store === 'redis') {
      redis = await startRedis();
      const pid = spawnSync('redis-cli', ['-p', String(redis.port), 'info', 'server'], { encoding: 'utf8' }).stdout.match(/process_id:(\d+)/)?.[1];
      redisPid = pid ? Number(pid) : null;
      if (pid && pinning.startsWith('taskset')) spawnSync('taskset', ['-p', '-c', LOAD_CORE, pid]);
    }
    if (scenario === 'paid-oauth') issuer = await startTestIssuer();

    const running = await Promise.all(
      sides.map(async (side, index) => {
        const port = await freePort();
        const config = merge(gatewayConfig(port, originUrl, store, redis?.url ?? '', issuer), { ...side.config, ...(store === 'redis' ? { store: { type: 'redis', redis: { url: redis?.url, keyPrefix: `ab${index}:` } } } : {}) });
        const file = join(workDir, `${side.label}.yaml`);
        writeFileSync(file, JSON.stringify(config, null, 2));
        const profile = profileDir ? ['--cpu-prof', '--cpu-prof-dir', resolve(profileDir), '--cpu-prof-name', `${side.label}.cpuprofile`] : [];
        const child = launch(`gateway-${side.label}`, SERVER_CORE, [process.execPath, ...profile, side.cli, 'start', '--config', file], workDir);
        children.push(child);
        const originOf = `http://127.0.0.1:${port}`;
        await waitForHttp(`${originOf}/healthz`, child);
        const headers: Record<string, string> = {};
        if (issuer) headers.authorization = `Bearer ${await issuer.mint({ sub: 'ab-user', aud: `${originOf}/mcp`, expSeconds: 6 * 3600 })}`;
        const paid = scenario !== 'free';
        const tokens = !paid ? [] : handles > 1 ? await fundHandles(`${originOf}/mcp`, handles) : [await fundHandle(`${originOf}/mcp`, headers)];
        const bodyFor = tokens.length > 1 ? (i: number) => callBody('echo_paid', { tollboothToken: tokens[i % tokens.length] }) : undefined;
        // How this side is loaded: connections, the pacing, and the handles' round-robin.
        const shape = { connections, ...paced, ...(bodyFor ? { bodyFor } : {}) };
        return { side, child, url: `${originOf}/mcp`, headers, body: callBody(paid ? 'echo_paid' : 'echo', tokens[0] ? { tollboothToken: tokens[0] } : {}), shape };
      }),
    );

    // An unrecorded warm-up of each side first: on a loaded 2-core box the JIT needs more than one round's warm-up.
    for (const gateway of running) await load(gateway.url, gateway.body, gateway.headers, { durationS: Math.max(3, warmupS * 3), ...gateway.shape });
    const results: RoundResult[] = [];
    for (let round = 0; round < rounds; round++) {
      const order = round % 2 === 0 ? running : [...running].reverse();
      const partial: Partial<Record<'A' | 'B', SideResult>> = {};
      for (const gateway of order) {
        if (warmupS > 0) await load(gateway.url, gateway.body, gateway.headers, { durationS: warmupS, ...gateway.shape });
        const before = cpuMicros(gateway.child.pid);
        const redisBefore = redisPid === null ? 0 : cpuMicros(redisPid);
        const measured = await load(gateway.url, gateway.body, gateway.headers, { durationS, ...gateway.shape });
        if (measured.non2xx + measured.errors > 0) throw new Error(`${gateway.side.label}: ${measured.non2xx} non-2xx, ${measured.errors} errors`);
        const requests = Math.max(1, measured.requests);
        partial[gateway.side.label] = {
          usPerReq: r1((cpuMicros(gateway.child.pid) - before) / requests),
          reqPerSec: measured.reqPerSec,
          ...(redisPid === null ? {} : { redisUsPerReq: r1((cpuMicros(redisPid) - redisBefore) / requests) }),
        };
      }
      const result = { round: round + 1, first: order[0]?.side.label as 'A' | 'B', A: partial.A as RoundResult['A'], B: partial.B as RoundResult['B'] };
      results.push(result);
      const redisOf = (side: SideResult): string => (side.redisUsPerReq === undefined ? '' : ` (redis ${side.redisUsPerReq})`);
      log(`round ${result.round} (${result.first} first): A ${result.A.usPerReq} µs/req${redisOf(result.A)} ${result.A.reqPerSec} req/s | B ${result.B.usPerReq} µs/req${redisOf(result.B)} ${result.B.reqPerSec} req/s`);
    }

    const aLower = results.filter((r) => r.A.usPerReq < r.B.usPerReq).length;
    const bLower = results.filter((r) => r.B.usPerReq < r.A.usPerReq).length;
    const summary = {
      scenario,
      rounds,
      durationS,
      rate: rate ?? 'max',
      A: { build: sides[0]?.build, config: sides[0]?.config, ...medians(results.map((r) => r.A)) },
      B: { build: sides[1]?.build, config: sides[1]?.config, ...medians(results.map((r) => r.B)) },
      roundsALower: aLower,
      roundsBLower: bLower,
      results,
    };
    process.stdout.write(`${JSON.stringify(summary, null, 2)}\n`);
    process.stdout.write(`\n| scenario | A µs/req (median) | B µs/req (median) | A req/s | B req/s | rounds B lower |\n| --- | ---: | ---: | ---: | ---: | ---: |\n| ${scenario} | ${summary.A.medianUsPerReq} | ${summary.B.medianUsPerReq} | ${summary.A.medianReqPerSec} | ${summary.B.medianReqPerSec} | ${bLower}/${rounds} |\n`);
    if (redisPid !== null) process.stdout.write(`\nRedis CPU µs/req (median): A ${summary.A.medianRedisUsPerReq}, B ${summary.B.medianRedisUsPerReq}\n`);
  } finally {
    for (const child of children.reverse()) await child.stop();
    await redis?.stop();
    await issuer?.close();
    rmSync(workDir, { recursive: true, force: true });
  }
}

function medians(sides: SideResult[]): { medianUsPerReq: number; medianReqPerSec: number; medianRedisUsPerReq?: number } {
  const redis = sides.flatMap((side) => (side.redisUsPerReq === undefined ? [] : [side.redisUsPerReq]));
  return {
    medianUsPerReq: r1(median(sides.map((side) => side.usPerReq))),
    medianReqPerSec: Math.round(median(sides.map((side) => side.reqPerSec))),
    ...(redis.length > 0 ? { medianRedisUsPerReq: r1(median(redis)) } : {}),
  };
}

await main(process.argv.slice(2));
process.exit(0);
