// A real gateway as an operator runs it: `node dist/cli.js start --config <file>` in its own process,
// so tests can run several replicas on one store and crash one (SIGKILL) mid-call. It needs a built
// dist/ (`npm test` builds first through `pretest`; alone, run `npm run build`). The child gets no
// NODE_OPTIONS: tap's hooks would slow every child down.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { Cluster, Redis } from 'ioredis';
import type { Test } from 'tap';
import { request, type Dispatcher } from 'undici';
import type { ConfigInput } from '../../src/config/schema.js';
import { createLogger, STDOUT_BUFFER } from '../../src/observability/logger.js';
import { hashHandle } from '../../src/paywall/handles.js';
import { KeySpace } from '../../src/store/keys.js';
import { RedisStore } from '../../src/store/redis.js';
import { freePort, testConfig } from './gateway.js';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const CLI = join(ROOT, 'dist', 'cli.js');

export interface GatewayProcess {
  /** http://127.0.0.1:PORT/mcp */
  url: string;
  origin: string;
  port: number;
  configPath: string;
  child: ChildProcess;
  /** stdout + stderr so far (JSON log lines, or a start-up error). */
  output(): string;
  /** The JSON log lines so far, parsed (other lines skipped). */
  logs(): Record<string, unknown>[];
  /**
   * The JSON log lines once everything logged before this call has reached stdout: `start` writes
   * stdout in batches, flushed at least every STDOUT_BUFFER.flushIntervalMs (observability/logger.ts).
   */
  settledLogs(): Promise<Record<string, unknown>[]>;
  /** SIGTERM (graceful drain), resolves with the exit code. */
  stop(): Promise<number | null>;
  /** SIGKILL (a crash), resolves once the process is gone. */
  kill(): Promise<void>;
}

const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

/** A child env for `node dist/cli.js`: no tap hooks, no config from the parent's environment. */
// The state dir (admin sockets, outbox files) of every process a test spawns: one per test file, removed when
// it ends, so a gateway the test SIGKILLs leaves nothing in the real ~/.local/state (a test may pass its own).
let stateDir: string | undefined;
function testStateDir(): string {
  if (stateDir === undefined) {
    const dir = mkdtempSync(join(tmpdir(), 'tb-state-'));
    stateDir = dir;
    process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
  }
  return stateDir;
}

export function childEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, NODE_OPTIONS: '', XDG_STATE_HOME: testStateDir(), ...extra };
  delete env.TOLLBOOTH_CONFIG;
  return env;
}

export function assertBuilt(): void {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first (\`npm test\` does it through pretest)`);
}

/** Writes the config (JSON is YAML) to a temp file that is removed when the test ends. */
export function writeConfig(t: Test, input: ConfigInput): string {
  const dir = mkdtempSync(join(tmpdir(), 'tb-gw-proc-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'tollbooth.yaml');
  writeFileSync(file, JSON.stringify(input, null, 2));
  return file;
}

/**
 * Starts `tollbooth start` on a free port (unless the config names one) and waits for /healthz.
 * The process is killed when the test ends if the test did not stop it.
 * A child process cannot hand its port-0 port back before it logs at info level (many configs here log
 * at warn), so the port is picked here; another test taking it between pick and bind makes the child
 * exit with EADDRINUSE, and a fresh port is tried (a port the config names is never retried).
 */
export async function startGatewayProcess(t: Test, input: ConfigInput): Promise<GatewayProcess> {
  assertBuilt();
  if (input.server?.port) return startOnce(t, input, input.server.port);
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(t, input, await freePort());
    } catch (error) {
      if (attempt >= 3 || !String((error as Error).message).includes('EADDRINUSE')) throw error;
    }
  }
}

async function startOnce(t: Test, input: ConfigInput, port: number): Promise<GatewayProcess> {
  const configPath = writeConfig(t, { ...input, server: { host: '127.0.0.1', ...input.server, port } });
  const child = spawn(process.execPath, [CLI, 'start', '--config', configPath], { cwd: ROOT, env: childEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
  live.add(child);
  const exited = new Promise<void>((resolve) =>
    child.once('exit', () => {
      live.delete(child);
      resolve();
    }),
  );
  let text = '';
  child.stdout?.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
  child.stderr?.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
  const gone = (): boolean => child.exitCode !== null || child.signalCode !== null;
  const kill = async (): Promise<void> => {
    if (gone()) return;
    child.kill('SIGKILL');
    await exited;
  };
  t.teardown(kill);

  const origin = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 45_000; // generous: a loaded CI machine starts node slowly
  for (;;) {
    if (gone()) throw new Error(`the gateway exited during start-up (code ${child.exitCode}, signal ${child.signalCode}):\n${text}`);
    const healthy = await fetch(`${origin}/healthz`).then(
      (response) => response.ok,
      () => false,
    );
    if (healthy) break;
    if (Date.now() > deadline) {
      await kill();
      throw new Error(`the gateway did not answer /healthz within 45 s:\n${text}`);
    }
    await sleep(50);
  }

  const logs = (): Record<string, unknown>[] =>
    text.split('\n').flatMap((line) => {
      if (!line.startsWith('{')) return [];
      try {
        return [JSON.parse(line) as Record<string, unknown>];
      } catch {
        return [];
      }
    });
  return {
    url: `${origin}${input.server?.mcpPath ?? '/mcp'}`,
    origin,
    port,
    configPath,
    child,
    output: () => text,
    logs,
    async settledLogs() {
      await sleep(STDOUT_BUFFER.flushIntervalMs * 2 + 100);
      return logs();
    },
    async stop() {
      if (gone()) return child.exitCode;
      const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
      child.kill('SIGTERM');
      await exited;
      clearTimeout(timer);
      return child.exitCode;
    },
    kill,
  };
}

/** Sums one counter (every series whose labels contain `labels`) from a Prometheus exposition. */
export function sumCounter(exposition: string, name: string, labels: Record<string, string> = {}): number {
  let total = 0;
  for (const line of exposition.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    const matches = Object.entries(labels).every(([key, value]) => line.includes(`${key}="${value}"`));
    if (matches) total += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return total;
}

/**
 * Waits until no acknowledged webhook's after-response work is running on any of `origins`
 * (tollbooth_webhook_triggers_running is raised before the 2xx and lowered when the work ends), then
 * returns how many triggers concluded there in all. The conclusion an absence check waits for.
 */
export async function webhookTriggersConcluded(origins: string[], timeoutMs = 20_000): Promise<number> {
  const give = Date.now() + timeoutMs;
  for (;;) {
    const texts = await Promise.all(origins.map((origin) => scrape(origin)));
    const running = texts.reduce((total, text) => total + sumCounter(text, 'tollbooth_webhook_triggers_running'), 0);
    if (running === 0) return texts.reduce((total, text) => total + sumCounter(text, 'tollbooth_webhook_triggers_total'), 0);
    if (Date.now() > give) throw new Error(`${running} webhook triggers still running after ${timeoutMs} ms`);
    await sleep(20);
  }
}

/** GET {origin}/metrics as text. */
export async function scrape(origin: string): Promise<string> {
  const response = await fetch(`${origin}/metrics`);
  return response.text();
}

export type CallOutcome =
  | { kind: 'paid'; remaining: number; ms: number }
  | { kind: 'ok'; ms: number } // a result without a receipt: a free tool (a paid call's result never comes without one, SPEC §6.5)
  | { kind: 'tool_error'; ms: number } // isError from the upstream itself
  | { kind: 'challenged'; reason: string; handle: string; checkoutUrl: string; ms: number }
  | { kind: 'refused'; reason: string; ms: number }
  | { kind: 'failed'; detail: string; ms: number }; // no JSON-RPC result (HTTP error, reset, …)

let nextId = 1;

/**
 * One legacy `tools/call` as a plain HTTP POST (no session: the upstream is stateless), classified by
 * what the gateway answered. `dispatcher` bounds the connections (an undici Agent).
 */
export async function callTool(url: string, name: string, args: Record<string, unknown>, dispatcher?: Dispatcher): Promise<CallOutcome> {
  const started = performance.now();
  const ms = (): number => Math.round(performance.now() - started);
  try {
    const response = await request(url, {
      method: 'POST',
      dispatcher,
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18' },
      body: JSON.stringify({ jsonrpc: '2.0', id: nextId++, method: 'tools/call', params: { name, arguments: args } }),
    });
    const text = await response.body.text();
    const message = parseReply(text) as { result?: { isError?: boolean; _meta?: Record<string, Record<string, unknown>> } } | undefined;
    const result = message?.result;
    if (response.statusCode !== 200 || !result) return { kind: 'failed', detail: `${response.statusCode} ${text.slice(0, 200)}`, ms: ms() };
    const meta = result._meta ?? {};
    const receipt = meta['xyz.tollbooth/receipt'];
    if (receipt) return { kind: 'paid', remaining: receipt.remaining as number, ms: ms() };
    const challenge = meta['xyz.tollbooth/challenge'];
    if (challenge) {
      const retry = challenge.retry as { value: string };
      return { kind: 'challenged', reason: challenge.reason as string, handle: retry.value, checkoutUrl: challenge.checkoutUrl as string, ms: ms() };
    }
    const refusal = meta['xyz.tollbooth/refusal'];
    if (refusal) return { kind: 'refused', reason: refusal.reason as string, ms: ms() };
    return result.isError ? { kind: 'tool_error', ms: ms() } : { kind: 'ok', ms: ms() };
  } catch (error) {
    return { kind: 'failed', detail: (error as Error).message, ms: ms() };
  }
}

/** A JSON body, or the last `data:` of an SSE body. */
function parseReply(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    const data = text.split('\n').filter((line) => line.startsWith('data:')).pop();
    try {
      return data ? JSON.parse(data.slice(5)) : undefined;
    } catch {
      return undefined;
    }
  }
}

/** Tallies outcomes by kind (refusals and challenges by reason too: `refused:payments_unavailable`). */
export function tally(outcomes: CallOutcome[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const outcome of outcomes) {
    const key = outcome.kind === 'refused' || outcome.kind === 'challenged' ? `${outcome.kind}:${outcome.reason}` : outcome.kind;
    counts[key] = (counts[key] ?? 0) + 1;
  }
  return counts;
}

/** Pays a dev checkout link through any replica (the link lives in the shared store). */
export async function payDevCheckout(checkoutUrl: string, viaOrigin: string): Promise<number> {
  const response = await fetch(`${viaOrigin}${new URL(checkoutUrl).pathname}/pay`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: '',
    redirect: 'manual',
  });
  await response.arrayBuffer();
  return response.status;
}

export const HASH_SECRET = 'scale-out-hash-secret';

export type RedisTarget = { url: string } | { cluster: string[] };

/**
 * testConfig with a Redis store (a prefix of its own, so tests sharing a server never meet), a hash
 * secret, limits generous enough that only credits decide, and warn-level logs.
 */
export function redisGatewayConfig(upstreamUrl: string, target: RedisTarget, keyPrefix: string, overrides: Partial<ConfigInput> = {}): ConfigInput {
  const base = testConfig(upstreamUrl);
  return {
    ...base,
    store: { type: 'redis', redis: { ...target, keyPrefix } },
    handles: { hashSecret: HASH_SECRET },
    limits: { perHandle: { ratePerSecond: 10_000, burst: 10_000 }, challengesPerClient: { ratePerSecond: 10_000, burst: 10_000 }, newChargesPerSecond: 10_000 },
    logging: { level: 'warn' },
    ...overrides,
  };
}

/** The same store from the test process, to read balances the way the gateways see them. */
export async function connectStore(t: Test, target: RedisTarget, keyPrefix: string): Promise<RedisStore> {
  const store = await RedisStore.connect({ type: 'redis', redis: { url: 'url' in target ? target.url : undefined, cluster: 'cluster' in target ? target.cluster : undefined, keyPrefix } }, { logger: createLogger('silent') });
  t.teardown(() => store.close());
  return store;
}

export async function balanceOf(store: RedisStore, handle: string, sku = 'research'): Promise<number | undefined> {
  const state = await store.getHandle(hashHandle(handle, HASH_SECRET));
  return state?.balances[sku];
}

/** How many reservations the handle holds right now (its `:res` hash), read straight from Redis. */
export async function heldReservations(target: RedisTarget, keyPrefix: string, handle: string): Promise<number> {
  const redis = 'url' in target ? new Redis(target.url, { lazyConnect: true }) : new Cluster(target.cluster.map((seed) => ({ host: new URL(seed).hostname, port: Number(new URL(seed).port) })), { lazyConnect: true });
  try {
    await redis.connect();
    return await redis.hlen(new KeySpace(keyPrefix).handle(hashHandle(handle, HASH_SECRET)).reservations);
  } finally {
    redis.disconnect();
  }
}

/** Waits until the handle holds no reservation (the reconciler releases stale ones); returns the wait in ms. */
export async function waitForNoReservations(target: RedisTarget, keyPrefix: string, handle: string, timeoutMs: number): Promise<number> {
  const started = Date.now();
  while ((await heldReservations(target, keyPrefix, handle)) > 0) {
    if (Date.now() - started > timeoutMs) throw new Error(`reservations still held ${timeoutMs} ms later`);
    await sleep(250);
  }
  return Date.now() - started;
}
