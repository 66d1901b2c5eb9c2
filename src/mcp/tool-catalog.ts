// What the upstream declares about its tools, learnt from the upstream itself (SPEC §5.4): a challenge
// may carry structuredContent only for a tool without an outputSchema. The catalog lists the upstream's
// tools on its own (legacy handshake, every page) and caches the answer briefly.
import { randomUUID } from 'node:crypto';
import type { Upstream } from '../proxy/upstream.js';
import { readCapped, parseJsonOrUndefined } from '../proxy/body.js';
import { isEventStream } from '../proxy/headers.js';
import { isObject, type JsonObject } from './jsonrpc.js';

const CACHE_MS = 30_000;
const FETCH_TIMEOUT_MS = 2_000;
const MAX_PAGES = 20;
const MAX_BYTES = 4 * 1024 * 1024;

export class ToolCatalog {
  readonly #upstream: Upstream;
  readonly #headers: Record<string, string>;
  readonly #now: () => number;
  #outputSchemas: Map<string, boolean> | null = null;
  #fetchedAt = Number.NEGATIVE_INFINITY; // last attempt (a failed one is backdated so it retries in 5 s)
  #inflight: Promise<void> | null = null;

  constructor(upstream: Upstream, deps: { upstreamHeaders: Record<string, string>; now?: () => number }) {
    this.#upstream = upstream;
    this.#headers = deps.upstreamHeaders;
    this.#now = deps.now ?? Date.now;
  }

  /** true / false when known, undefined when the upstream could not tell us. */
  async declaresOutputSchema(tool: string): Promise<boolean | undefined> {
    if (this.#now() - this.#fetchedAt > CACHE_MS) {
      this.#inflight ??= this.#refresh().finally(() => {
        this.#inflight = null;
      });
      // Stale while revalidating: only a catalog that never loaded makes the caller wait.
      if (!this.#outputSchemas) await this.#inflight;
    }
    return this.#outputSchemas?.get(tool);
  }

  async #refresh(): Promise<void> {
    try {
      const tools = await this.#listAll();
      this.#outputSchemas = new Map(tools.filter((t) => typeof t.name === 'string').map((t) => [t.name as string, isObject(t.outputSchema)]));
      this.#fetchedAt = this.#now();
    } catch {
      // Unknown: callers omit structuredContent. Keep a stale map rather than none.
      this.#fetchedAt = this.#now() - CACHE_MS + 5_000; // retry in 5 s, not on every call
    }
  }

  async #listAll(): Promise<JsonObject[]> {
    const signal = AbortSignal.timeout(FETCH_TIMEOUT_MS);
    const init = await this.#post({ jsonrpc: '2.0', id: `tb-${randomUUID()}`, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'tollbooth-gateway', version: '1' } } }, {}, signal);
    const sessionId = init.headers['mcp-session-id'];
    const version = isObject(init.message?.result) && typeof init.message.result.protocolVersion === 'string' ? init.message.result.protocolVersion : '2025-11-25';
    const headers: Record<string, string> = {};
    if (typeof sessionId === 'string') headers['mcp-session-id'] = sessionId;
    if (version !== '2025-03-26') headers['mcp-protocol-version'] = version;
    await this.#post({ jsonrpc: '2.0', method: 'notifications/initialized' }, headers, signal);
    const tools: JsonObject[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < MAX_PAGES; page++) {
      const reply = await this.#post({ jsonrpc: '2.0', id: `tb-${randomUUID()}`, method: 'tools/list', params: cursor ? { cursor } : {} }, headers, signal);
      const result = reply.message?.result;
      if (!isObject(result) || !Array.isArray(result.tools)) throw new Error('tools/list failed');
      tools.push(...result.tools.filter(isObject));
      cursor = typeof result.nextCursor === 'string' ? result.nextCursor : undefined;
      if (!cursor) break;
    }
    if (typeof sessionId === 'string') {
      await this.#upstream
        .send({ method: 'DELETE', path: '/', headers: { ...this.#headers, ...headers }, signal })
        .then((r) => r.body.resume())
        .catch(() => undefined);
    }
    return tools;
  }

  async #post(body: JsonObject, extra: Record<string, string>, signal: AbortSignal): Promise<{ headers: Record<string, string | string[]>; message: JsonObject | undefined }> {
    const response = await this.#upstream.send({
      method: 'POST',
      path: '/',
      headers: { ...this.#headers, ...extra, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify(body),
      signal,
    });
    const text = await readCapped(response.body, MAX_BYTES);
    if (response.status >= 400) throw new Error(`upstream answered ${response.status}`);
    if (!('id' in body)) return { headers: response.headers, message: undefined };
    const messages = isEventStream(response.headers['content-type'])
      ? text
          .split(/\r?\n/)
          .filter((line) => line.startsWith('data:'))
          .map((line) => parseJsonOrUndefined(line.slice(5).trim()))
      : [parseJsonOrUndefined(text)];
    const message = messages.find((m) => isObject(m) && m.id === body.id) as JsonObject | undefined;
    return { headers: response.headers, message };
  }
}
