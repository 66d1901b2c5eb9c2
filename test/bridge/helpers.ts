// Shared pieces of the bridge tests: a bridge on its private socket with a captured log, raw HTTP through
// its dispatcher, SDK clients that reach it (their fetch goes through the dispatcher), the fixtures' commands,
// and a memory sampler for the "memory stays bounded" tests.
import { fileURLToPath } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import type { Test } from 'tap';
import { fetch as undiciFetch, request, type Dispatcher } from 'undici';
import { startBridge, type BridgeOptions, type RunningBridge } from '../../src/bridge/index.js';
import { createLogger, type Logger } from '../../src/observability/logger.js';
import { waitFor as waitForCondition } from '../helpers/clock.js';
import { childEnv } from '../helpers/interop-upstreams.js';

export type Json = Record<string, any>;

const fixture = (name: string): string => fileURLToPath(new URL(`../fixtures/bridge/${name}`, import.meta.url));
export const RAW_SERVER = [process.execPath, fixture('raw-server.mjs')];
export const DEAF_SERVER = [...RAW_SERVER, 'deaf'];
export const CAPABILITIES_SERVER = [process.execPath, fixture('capabilities-server.mjs')];
export const RESEARCH_SERVER = [process.execPath, fileURLToPath(new URL('../../dist/research/stdio.js', import.meta.url))];

export interface CapturedLog {
  logger: Logger;
  lines: Json[];
}

export function captureLogger(level = 'debug'): CapturedLog {
  const lines: Json[] = [];
  const logger = createLogger(level, { write: (line: string) => void lines.push(JSON.parse(line) as Json) });
  return { logger, lines };
}

export interface TestBridge extends RunningBridge {
  log: CapturedLog;
  /** A fetch that reaches the bridge (for SDK client transports). */
  fetch: typeof globalThis.fetch;
}

export async function startTestBridge(t: Test, options: Partial<BridgeOptions> = {}): Promise<TestBridge> {
  const log = captureLogger();
  const bridge = await startBridge({
    command: RAW_SERVER,
    sessions: 'perClient',
    maxChildren: 32,
    idleTimeoutMs: 600_000,
    maxLineBytes: 16 * 1024 * 1024,
    logger: log.logger,
    env: childEnv(),
    ...options,
  });
  t.teardown(() => bridge.close());
  return { ...bridge, log, fetch: fetchVia(bridge.dispatcher) };
}

export function fetchVia(dispatcher: Dispatcher): typeof globalThis.fetch {
  return (input: string | URL | Request, init?: RequestInit) =>
    undiciFetch(input as string, { ...(init as object), dispatcher });
}

export interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  text: string;
  /** JSON body, or the data of every SSE event that holds JSON. */
  messages: Json[];
}

export const LEGACY_ACCEPT = 'application/json, text/event-stream';

/** One request through the bridge's dispatcher, read to its end (`signal` to give up on it). */
export async function raw(
  bridge: { url: string; dispatcher: Dispatcher },
  method: 'POST' | 'GET' | 'DELETE',
  body?: unknown,
  headers: Record<string, string> = {},
  signal?: AbortSignal,
): Promise<RawAnswer> {
  const response = await request(bridge.url, {
    method,
    dispatcher: bridge.dispatcher,
    headers: { accept: LEGACY_ACCEPT, ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    signal,
  });
  const text = await response.body.text();
  const flat: Record<string, string> = {};
  for (const [name, value] of Object.entries(response.headers)) if (value !== undefined) flat[name] = Array.isArray(value) ? value.join(', ') : value;
  return { status: response.statusCode, headers: flat, text, messages: parseMessages(flat['content-type'] ?? '', text) };
}

export function parseMessages(contentType: string, text: string): Json[] {
  if (contentType.startsWith('application/json')) return text === '' ? [] : [JSON.parse(text) as Json].flat();
  return text
    .split('\n\n')
    .map((event) => event.split('\n').filter((line) => line.startsWith('data:')).map((line) => line.slice(5).trimStart()).join('\n'))
    .filter((data) => data.startsWith('{'))
    .map((data) => JSON.parse(data) as Json);
}

export const initializeRequest = (id: number | string = 0, capabilities: Json = {}, protocolVersion = '2025-11-25', clientInfo: Json = { name: 'raw', version: '1' }): Json => ({
  jsonrpc: '2.0', id, method: 'initialize', params: { protocolVersion, capabilities, clientInfo },
});

/** initialize + initialized over raw HTTP; the session id, or the refusal. */
export async function openRawSession(bridge: { url: string; dispatcher: Dispatcher }, capabilities: Json = {}, protocolVersion = '2025-11-25'): Promise<{ id?: string; answer: RawAnswer }> {
  const answer = await raw(bridge, 'POST', initializeRequest(0, capabilities, protocolVersion));
  const id = answer.headers['mcp-session-id'];
  if (id === undefined) return { answer };
  const headers = { 'mcp-session-id': id, 'mcp-protocol-version': protocolVersion };
  await raw(bridge, 'POST', { jsonrpc: '2.0', method: 'notifications/initialized' }, headers);
  return { id, answer };
}

export const sessionHeaders = (id: string, protocolVersion = '2025-11-25'): Record<string, string> => ({ 'mcp-session-id': id, 'mcp-protocol-version': protocolVersion });

export const toolCall = (id: number | string, name: string, args: Json = {}, meta?: Json): Json => ({
  jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args, ...(meta ? { _meta: meta } : {}) },
});

export function processAlive(pid: number | undefined): boolean {
  if (pid === undefined) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The suite's `waitFor` (helpers/clock.ts) with the bridge tests' longer bound: they wait on real children. */
export const waitFor = (condition: () => boolean | Promise<boolean>, what: string, timeoutMs = 20_000): Promise<void> => waitForCondition(condition, what, { timeoutMs, everyMs: 25 });

/** A full garbage collection, also without --expose-gc (the flag can be set at run time). */
export function collectGarbage(): void {
  setFlagsFromString('--expose-gc');
  (runInNewContext('gc') as () => void)();
}

/** Heap + array buffers (Buffers live there) after a full collection. */
export function retainedBytes(): number {
  collectGarbage();
  collectGarbage();
  const usage = process.memoryUsage();
  return usage.heapUsed + usage.arrayBuffers;
}

/** Peak growth of heap + array buffers (Buffers live there) over a baseline, sampled while `work` runs. */
export async function peakMemoryGrowth<T>(work: () => Promise<T>): Promise<{ result: T; peakBytes: number }> {
  const sample = (): number => {
    const usage = process.memoryUsage();
    return usage.heapUsed + usage.arrayBuffers;
  };
  collectGarbage();
  const baseline = sample();
  let peak = baseline;
  const timer = setInterval(() => (peak = Math.max(peak, sample())), 5);
  try {
    const result = await work();
    peak = Math.max(peak, sample());
    return { result, peakBytes: peak - baseline };
  } finally {
    clearInterval(timer);
  }
}

export const MiB = 1024 * 1024;

export interface SseEvent {
  id?: string;
  data: string;
  message?: Json;
}

/**
 * Opens a request whose answer is an event stream and reads events as they come, until `until` says
 * enough (then the connection is dropped, as a client that goes away would).
 */
export async function readEvents(
  bridge: { url: string; dispatcher: Dispatcher },
  method: 'POST' | 'GET',
  body: unknown,
  headers: Record<string, string>,
  until: (events: SseEvent[]) => boolean,
  timeoutMs = 60_000,
): Promise<{ status: number; events: SseEvent[] }> {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), timeoutMs);
  const response = await request(bridge.url, {
    method,
    dispatcher: bridge.dispatcher,
    headers: { accept: method === 'GET' ? 'text/event-stream' : LEGACY_ACCEPT, ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: abort.signal,
  });
  const events: SseEvent[] = [];
  let buffer = '';
  try {
    for await (const chunk of response.body) {
      buffer += String(chunk);
      let end: number;
      while ((end = buffer.indexOf('\n\n')) !== -1) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const event: SseEvent = { data: '' };
        for (const line of block.split('\n')) {
          if (line.startsWith('id:')) event.id = line.slice(3).trim();
          else if (line.startsWith('data:')) event.data += line.slice(5).trimStart();
        }
        if (event.data.startsWith('{')) event.message = JSON.parse(event.data) as Json;
        if (event.id !== undefined || event.data !== '') events.push(event);
      }
      if (until(events)) break;
    }
  } catch {
    // the stream ended under us
  } finally {
    clearTimeout(timer);
    abort.abort();
  }
  return { status: response.statusCode, events };
}
