// SPEC §18 hot reload, the part that decides: re-read and validate the config file, then refuse what a
// running process cannot change. Pure apart from reading the file; start.ts applies a success (a new
// gateway swapped in) and counts and logs every result.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { isMap, isScalar, LineCounter, parseDocument } from 'yaml';
import { loadConfig } from '../config/load.js';
import type { GatewayConfig } from '../config/schema.js';

export type ReloadOutcome =
  | { result: 'success'; config: GatewayConfig }
  | { result: 'invalid' | 'refused'; message: string; path?: string | undefined; line?: number | undefined };

/**
 * What only a restart can change: the socket, the store, the payment provider and its credentials, and the
 * parts built once per process (x402 rail, handle hashing, ledger retention, tracing, reconciler, logger).
 */
export const RESTART_ONLY: readonly (readonly string[])[] = [
  ['server', 'host'],
  ['server', 'port'],
  ['store'],
  ['payments', 'provider'],
  ['payments', 'moove'],
  ['payments', 'x402'],
  ['payments', 'settlement'],
  ['payments', 'reconcile'],
  ['handles', 'hashSecret'],
  ['ledger'],
  ['tracing'],
  ['logging'],
  ['admin'],
];

export function prepareReload(running: GatewayConfig, file: string, env: Record<string, string | undefined> = process.env, adjust: (config: GatewayConfig) => GatewayConfig = (config) => config): ReloadOutcome {
  let next: GatewayConfig;
  try {
    // `adjust`: the start's command-line overrides (--port), applied to every reload as at the start.
    next = adjust(loadConfig(file, env));
  } catch (error) {
    const message = (error as Error).message;
    // load.ts reports "<file>:<line>:<col> <path>: expected …" first; the log line carries where.
    const first = /^.*?:(\d+):\d+ (?:([^\s:]+): )?/.exec(message);
    return { result: 'invalid', message: message.replace(/\n/g, '; '), line: first ? Number(first[1]) : undefined, path: first?.[2] };
  }
  for (const path of RESTART_ONLY) {
    if (sameValue(valueAt(running, path), valueAt(next, path))) continue;
    const dotted = path.join('.');
    const line = lineOf(file, path);
    return { result: 'refused', path: dotted, line, message: `${file}:${line ?? 1} ${dotted}: changed, but a running gateway cannot change it (restart to apply); nothing was reloaded` };
  }
  return { result: 'success', config: next };
}

/** `tollbooth_config_info{sha}`: the first 12 hex digits of the sha256 of the effective config (keys sorted). */
export function configSha(config: GatewayConfig): string {
  return createHash('sha256').update(canonical(config)).digest('hex').slice(0, 12);
}

/** The longest call deadline of any endpoint: how long a replaced gateway's calls may still run. */
export function maxCallDeadline(config: GatewayConfig): number {
  return Math.max(config.upstream.callDeadline, ...Object.values(config.servers).map((entry) => entry.upstream.callDeadline));
}

function valueAt(config: unknown, path: readonly string[]): unknown {
  let value = config;
  for (const key of path) value = value !== null && typeof value === 'object' ? (value as Record<string, unknown>)[key] : undefined;
  return value;
}

function sameValue(a: unknown, b: unknown): boolean {
  return canonical(a) === canonical(b);
}

function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, inner: unknown) =>
    inner !== null && typeof inner === 'object' && !Array.isArray(inner) ? Object.fromEntries(Object.entries(inner as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) : inner,
  ) ?? 'undefined';
}

/** The line of the deepest node of `path` the file holds (1 when none, e.g. a block left to its defaults). */
function lineOf(file: string, path: readonly string[]): number | undefined {
  try {
    const lineCounter = new LineCounter();
    const doc = parseDocument(readFileSync(file, 'utf8'), { lineCounter });
    let node: unknown = doc.contents;
    let offset = 0;
    for (const key of path) {
      if (!isMap(node)) break;
      const pair = node.items.find((item) => (isScalar(item.key) ? String(item.key.value) : String(item.key)) === key);
      if (!pair) break;
      offset = (isScalar(pair.key) ? pair.key.range?.[0] : undefined) ?? offset;
      node = pair.value;
    }
    return lineCounter.linePos(offset).line;
  } catch {
    return undefined;
  }
}
