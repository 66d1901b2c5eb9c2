// The priced-request registry on the request path (SPEC §6.5; docs/decisions.md "A released call's late
// result", "Reload memory"). A forwarded priced request that carries an upstream session is recorded in
// the store by (session, JSON-RPC id) — the store's copy is what other replicas read, both when a
// response to it turns up on a stream that is not its own and when a request reuses its id — and in a
// bounded in-process log, which answers "does this request reuse the id of a paid call this process
// forwarded?" without a store round trip, from the moment the call is forwarded (before its store write
// lands). One registry serves the whole process (start.ts builds it once), so a config reload, which
// builds a new gateway, never forgets what the previous one forwarded.
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

  /** True when this process forwarded a priced request with this id in this session and it is in flight or was released. Map look-ups only. */
  reusesPricedId(sessionId: string, id: JsonRpcId): boolean {
    if (this.#local.size === 0) return false;
    const state = this.#liveSession(sessionId)?.requests.get(id);
    return state === 'in_flight' || state === 'released';
  }

  /**
   * The first of `ids` that reuses, in this session, the id of a paid call in flight or released — by this
   * process (no I/O) or by any replica (the store; `shared` false skips it: an endpoint that prices no tool
   * never registers one). A store that cannot answer leaves the in-process answer: free requests keep
   * working while the store is down (SPEC §8), and a priced one is refused by its reservation anyway.
   */
  async reusedId(sessionId: string, ids: readonly JsonRpcId[], shared: boolean): Promise<JsonRpcId | undefined> {
    const local = ids.find((id) => this.reusesPricedId(sessionId, id));
    if (local !== undefined || !shared || ids.length === 0) return local;
    let records: (PricedRequestRecord | null)[];
    try {
      records = await Promise.all(ids.map((id) => this.#store.getPricedRequest(this.key(sessionId, id))));
    } catch {
      return undefined;
    }
    const index = records.findIndex((record) => record !== null && (record.state === 'in_flight' || record.state === 'released'));
    return index === -1 ? undefined : ids[index];
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
