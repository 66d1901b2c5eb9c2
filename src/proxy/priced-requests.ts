// The priced-request registry on the request path (SPEC §6.5; docs/decisions.md "A released call's late
// result"). A forwarded priced request that carries an upstream session is recorded in the store by
// (session, JSON-RPC id) — the store's copy is what other replicas read when a response to it turns up
// on a stream that is not its own — and in a bounded in-process log, which answers two questions
// without a store round trip: "does this request reuse the id of a paid call this replica forwarded?"
// (refused: the upstream would route that call's result to it) and, once concluded, "how did it end?".
import { createHash } from 'node:crypto';
import type { JsonRpcId } from '../mcp/jsonrpc.js';
import type { PricedRequestKey, PricedRequestRecord, PricedRequestState, Store } from '../store/store.js';
import { PRICED_REQUEST_TTL_MS } from '../store/store.js';
import { idKey } from './reply-reader.js';

/** Sessions the in-process log remembers; the oldest are forgotten first (the store still knows them). */
const MAX_LOCAL_SESSIONS = 10_000;
/** Requests remembered per session in process. */
const MAX_LOCAL_REQUESTS_PER_SESSION = 1_000;

interface LocalSession {
  expiresAt: number;
  requests: Map<JsonRpcId, PricedRequestState>;
}

export class PricedRequests {
  readonly #store: Store;
  readonly #now: () => number;
  readonly #local = new Map<string, LocalSession>();

  constructor(deps: { store: Store; now: () => number }) {
    this.#store = deps.store;
    this.#now = deps.now;
  }

  /** The store's key: the session hashed (the store never holds an upstream session id), the id with its type. */
  key(sessionId: string, id: JsonRpcId): PricedRequestKey {
    return { session: createHash('sha256').update(sessionId).digest('base64url'), requestId: idKey(id) };
  }

  /** True when this replica forwarded a priced request with this id in this session and it is in flight or was released. Map look-ups only. */
  reusesPricedId(sessionId: string, id: JsonRpcId): boolean {
    if (this.#local.size === 0) return false;
    const state = this.#liveSession(sessionId)?.requests.get(id);
    return state === 'in_flight' || state === 'released';
  }

  /** Records a forwarded priced request: in process at once, in the store by the returned promise (awaited before any of its reply reaches the client). */
  register(sessionId: string, id: JsonRpcId, record: PricedRequestRecord): Promise<void> {
    this.#remember(sessionId, id, 'in_flight');
    return this.#store.registerPricedRequest(this.key(sessionId, id), record, PRICED_REQUEST_TTL_MS);
  }

  /** How this replica saw the request end (the store learns it from the paywall's conclusion). */
  noteConcluded(sessionId: string, id: JsonRpcId, state: 'committed' | 'released'): void {
    const session = this.#liveSession(sessionId);
    if (session?.requests.has(id)) session.requests.set(id, state);
  }

  /** The record of a priced request for a response seen on a stream that is not its own; null when none is known. */
  async lookup(sessionId: string, id: JsonRpcId): Promise<{ key: PricedRequestKey; record: PricedRequestRecord } | null> {
    const key = this.key(sessionId, id);
    const record = await this.#store.getPricedRequest(key);
    return record ? { key, record } : null;
  }

  #remember(sessionId: string, id: JsonRpcId, state: PricedRequestState): void {
    let session = this.#liveSession(sessionId);
    if (!session) {
      if (this.#local.size >= MAX_LOCAL_SESSIONS) this.#local.delete(this.#local.keys().next().value as string);
      session = { expiresAt: 0, requests: new Map() };
      this.#local.set(sessionId, session);
    }
    if (session.requests.size >= MAX_LOCAL_REQUESTS_PER_SESSION) session.requests.delete(session.requests.keys().next().value as JsonRpcId);
    session.requests.set(id, state);
    session.expiresAt = this.#now() + PRICED_REQUEST_TTL_MS;
  }

  #liveSession(sessionId: string): LocalSession | undefined {
    const session = this.#local.get(sessionId);
    if (session && session.expiresAt <= this.#now()) {
      this.#local.delete(sessionId);
      return undefined;
    }
    return session;
  }
}
