// The state of one request on the MCP endpoint, from onRequest to the response's close: what the policy
// hooks learnt (method, era, ids, session), how the reply must be read, and the upstream request's abort
// signal. It is one object per request on purpose: it doubles as the AbortSignal undici watches (the
// EventTarget subset undici uses), so a free call costs no AbortController, and the dispatcher
// (dispatcher.ts) finds it on the header object reply-from hands over.
import type { Era } from '../mcp/classify.js';
import type { JsonRpcId } from '../mcp/jsonrpc.js';
import type { OwnPrices } from '../mcp/tools-list.js';
import type { ToolView } from '../mcp/visibility.js';
import type { RequestTrace } from '../observability/tracing.js';

/** Where the dispatcher finds a request's call state: a symbol key on reply-from's header object (undici reads only string keys). */
export const kCall = Symbol('tollbooth.call');

/** What a call that forwards a priced request (one call, or a batch holding some) does with the upstream's reply. */
export interface PricedForward {
  /** The proxy's response hook: the upstream answered (status, headers, body). */
  onHead(head: UpstreamHead): void;
  /** The proxy's error hook: nothing answered (or the gateway aborted the request). */
  onError(error: unknown): void;
}

export interface UpstreamHead {
  statusCode: number;
  headers: Record<string, string | string[] | undefined>;
  stream: import('node:stream').Readable;
}

export class McpCall {
  readonly startedAt: number;
  /** Labels for tollbooth_mcp_requests_total (set once the body is classified). */
  method = 'unknown';
  era: Era = 'legacy';
  /** The JSON-RPC id for an error reply (null until known, and for batches). */
  requestId: JsonRpcId = null;
  /** The authenticated principal (auth.mode oauth), null otherwise: a session the reply hands out is bound to it (SPEC §20). */
  principal: string | null = null;
  /** The client's Mcp-Session-Id (the upstream's session), when it sent one. */
  sessionId: string | undefined = undefined;
  /** A JSON reply may hold a tools/list result (a POST asked for one): parsed and rewritten. */
  rewriteJson = false;
  /** What this caller may see in a tools/list result (SPEC §18); null: every tool. Set when the caller is known. */
  toolView: ToolView | null = null;
  /** SPEC §23: a tools/list from a known caller (principal or handle) is its own: private, never cached for another. */
  privateList = false;
  /** What the caller's own list adds to each priced tool's price; null: nothing (unknown caller, or the store failed). */
  ownPrices: OwnPrices | null = null;
  /** The ids of the requests this POST carried (their own responses pass a filtered stream unlooked-up). */
  ownIds: readonly JsonRpcId[] = NO_IDS;
  /** Set when the call forwards priced requests: the proxy's hooks hand the reply to it. */
  priced: PricedForward | null = null;
  /** When the proxy sent the request upstream (ms, the gateway clock), 0 before. */
  forwardedAt = 0;
  /** The request's span (observability/tracing.ts); null when tracing is off. */
  trace: RequestTrace | null = null;

  // ── the AbortSignal protocol undici uses (aborted, reason, add/removeEventListener('abort')) ──
  aborted = false;
  reason: unknown = undefined;
  #onAbort: (() => void) | null = null;

  constructor(startedAt: number) {
    this.startedAt = startedAt;
  }

  addEventListener(_type: 'abort', listener: () => void): void {
    this.#onAbort = listener;
  }

  removeEventListener(_type: 'abort', listener: () => void): void {
    if (this.#onAbort === listener) this.#onAbort = null;
  }

  /** Aborts the upstream request (before its headers, or its body after). Idempotent. */
  abort(reason: Error): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    const listener = this.#onAbort;
    this.#onAbort = null;
    listener?.();
  }
}

const NO_IDS: readonly JsonRpcId[] = Object.freeze([]);
