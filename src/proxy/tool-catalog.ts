// What the upstream declares about its tools, learnt from the upstream itself (SPEC §5.4): a challenge
// may carry structuredContent only for a tool without an outputSchema. The catalog lists the upstream's
// tools on its own (legacy handshake, every page) and caches the answer briefly. These are the
// gateway's own requests, not forwarded traffic: undici straight to the target, replies read by the
// one reply reader (proxy/reply-reader.ts).
// Each read is one short-lived session that is always closed (DELETE, also after a timeout or a failure).
// A stdio upstream's session costs a child (SPEC §22: children are for clients that can use them), so
// there the catalog is read off the request path — when the gateway is built, again every 10 minutes, and
// after a failure with backoff — and a challenge or refusal only ever reads what is known: an unpaid
// call never spawns a child.
import { randomUUID } from 'node:crypto';
import { request } from 'undici';
import { discard } from '../io/body.js';
import { collectResponses, responseTo } from './reply-reader.js';
import type { UpstreamTarget } from './upstream-target.js';
import { isObject, type JsonObject } from '../mcp/jsonrpc.js';

const CACHE_MS = 30_000;
const FETCH_TIMEOUT_MS = 2_000;
/** Off the request path (stdio): nobody waits, so a slow-starting server gets time to answer. */
const BACKGROUND_TIMEOUT_MS = 15_000;
const BACKGROUND_REFRESH_MS = 10 * 60_000;
const BACKGROUND_RETRY_MS = { initial: 5_000, max: 5 * 60_000 };
/** The DELETE that closes the catalog's session gets its own time (the read's signal may have fired). */
const CLOSE_TIMEOUT_MS = 2_000;
const MAX_PAGES = 20;
const MAX_BYTES = 4 * 1024 * 1024;

export class ToolCatalog {
  readonly #target: Pick<UpstreamTarget, 'url' | 'dispatcher'>;
  readonly #headers: Record<string, string>;
  readonly #now: () => number;
  #outputSchemas: Map<string, boolean> | null = null;
  #fetchedAt = Number.NEGATIVE_INFINITY; // last attempt (a failed one is backdated so it retries in 5 s)
  #inflight: Promise<void> | null = null;
  readonly #background: boolean;
  #timer: NodeJS.Timeout | undefined;
  #retryMs = BACKGROUND_RETRY_MS.initial;
  #lastFailed = false;
  #closed = false;

  /** @param deps.background read off the request path only (a stdio upstream: start() begins, close() ends) */
  constructor(target: Pick<UpstreamTarget, 'url' | 'dispatcher'>, deps: { upstreamHeaders: Record<string, string>; now?: () => number; background?: boolean }) {
    this.#target = target;
    this.#headers = deps.upstreamHeaders;
    this.#now = deps.now ?? Date.now;
    this.#background = deps.background ?? false;
  }

  /** Background mode: the first read now, then every 10 minutes (after a failure: 5 s doubling to 5 min). */
  start(): void {
    if (!this.#background || this.#closed || this.#inflight) return;
    this.#inflight = this.#refresh().finally(() => {
      this.#inflight = null;
      this.#schedule();
    });
  }

  close(): void {
    this.#closed = true;
    clearTimeout(this.#timer);
  }

  /** true / false when known, undefined when the upstream could not tell us (or, in background mode, has not yet). */
  async declaresOutputSchema(tool: string): Promise<boolean | undefined> {
    if (this.#background) return this.#outputSchemas?.get(tool);
    if (this.#now() - this.#fetchedAt > CACHE_MS) {
      this.#inflight ??= this.#refresh().finally(() => {
        this.#inflight = null;
      });
      // Stale while revalidating: only a catalog that never loaded makes the caller wait.
      if (!this.#outputSchemas) await this.#inflight;
    }
    return this.#outputSchemas?.get(tool);
  }

  #schedule(): void {
    if (this.#closed) return;
    const failed = this.#fetchedAt === Number.NEGATIVE_INFINITY || this.#lastFailed;
    const delay = failed ? this.#retryMs : BACKGROUND_REFRESH_MS;
    this.#retryMs = failed ? Math.min(this.#retryMs * 2, BACKGROUND_RETRY_MS.max) : BACKGROUND_RETRY_MS.initial;
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => this.start(), delay);
    this.#timer.unref();
  }

  async #refresh(): Promise<void> {
    try {
      const tools = await this.#listAll();
      this.#outputSchemas = new Map(tools.filter((t) => typeof t.name === 'string').map((t) => [t.name as string, isObject(t.outputSchema)]));
      this.#fetchedAt = this.#now();
      this.#lastFailed = false;
    } catch {
      // Unknown: callers omit structuredContent. Keep a stale map rather than none.
      this.#lastFailed = true;
      if (!this.#background) this.#fetchedAt = this.#now() - CACHE_MS + 5_000; // retry in 5 s, not on every call
    }
  }

  async #listAll(): Promise<JsonObject[]> {
    const signal = AbortSignal.timeout(this.#background ? BACKGROUND_TIMEOUT_MS : FETCH_TIMEOUT_MS);
    const session: { id?: string; headers: Record<string, string> } = { headers: {} };
    try {
      return await this.#listIn(session, signal);
    } finally {
      // Always closed, whatever happened: an open session holds a stdio child until its idle timeout.
      if (session.id !== undefined) {
        await request(this.#target.url, { method: 'DELETE', headers: { ...this.#headers, ...session.headers }, signal: AbortSignal.timeout(CLOSE_TIMEOUT_MS), dispatcher: this.#target.dispatcher })
          .then((r) => discard(r.body))
          .catch(() => undefined);
      }
    }
  }

  async #listIn(session: { id?: string; headers: Record<string, string> }, signal: AbortSignal): Promise<JsonObject[]> {
    const init = await this.#post({ jsonrpc: '2.0', id: `tb-${randomUUID()}`, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'tollbooth-gateway', version: '1' } } }, {}, signal);
    const sessionId = init.headers['mcp-session-id'];
    const version = isObject(init.message?.result) && typeof init.message.result.protocolVersion === 'string' ? init.message.result.protocolVersion : '2025-11-25';
    const headers = session.headers;
    if (typeof sessionId === 'string') {
      headers['mcp-session-id'] = sessionId;
      session.id = sessionId;
    }
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
    return tools;
  }

  async #post(body: JsonObject, extra: Record<string, string>, signal: AbortSignal): Promise<{ headers: Record<string, string | string[] | undefined>; message: JsonObject | undefined }> {
    const response = await request(this.#target.url, {
      method: 'POST',
      headers: { ...this.#headers, ...extra, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify(body),
      signal,
      dispatcher: this.#target.dispatcher,
    });
    if (response.statusCode >= 400) {
      discard(response.body);
      throw new Error(`upstream answered ${response.statusCode}`);
    }
    if (!('id' in body)) {
      discard(response.body);
      return { headers: response.headers, message: undefined };
    }
    const responses = await collectResponses(response.body, response.headers['content-type'], MAX_BYTES);
    const reply = responseTo(responses, body.id as string);
    return { headers: response.headers, message: reply !== null && reply !== 'ambiguous' ? (reply as unknown as JsonObject) : undefined };
  }
}
