// Sessions bound to principals (SPEC §20, auth.mode: oauth). A legacy MCP session belongs to the
// principal whose request created it: the gateway records the binding in the store when it relays the
// reply that hands out the session id (before that reply's headers reach the client), so every replica
// knows it. A request on the session from anyone else is answered 404, as for a session that does not
// exist, and never forwarded.
//
// The per-request cost stays near zero: a binding never changes once written, so each replica caches
// what it read (bounded, least recently used first out). A cached answer is re-read after a while, which
// also slides the binding's lifetime in the store while the session is in use. A session the store knows
// no binding for is refused too (fail closed): one opened before oauth was on, or idle past the TTL.
import { createHash } from 'node:crypto';
import type { Store } from '../store/store.js';
import { SESSION_BINDING_TTL_MS } from '../store/store.js';

export interface SessionBindingOptions {
  /** Sessions whose owner a replica remembers. */
  cacheSize?: number;
  /** How long a remembered owner is trusted before it is read again (and the store's TTL slid). */
  cacheMaxAgeMs?: number;
  ttlMs?: number;
  /**
   * The endpoint the sessions belong to (SPEC §18): a session handed out at one endpoint is bound under
   * that endpoint's name, so at any other endpoint it has no binding and is refused (404). `default`
   * (the top-level endpoint) keeps the plain session hash.
   */
  endpoint?: string;
}

const DEFAULT_CACHE_SIZE = 10_000;
const DEFAULT_CACHE_MAX_AGE_MS = 10 * 60_000;

export class SessionBindings {
  readonly #store: Store;
  readonly #now: () => number;
  readonly #cacheSize: number;
  readonly #cacheMaxAgeMs: number;
  readonly #ttlMs: number;
  readonly #endpoint: string;
  /** session id → its owner and when the store said so; Map order is the eviction order (oldest use first). */
  readonly #owners = new Map<string, { principal: string; readAt: number }>();

  constructor(deps: { store: Store; now: () => number }, options: SessionBindingOptions = {}) {
    this.#store = deps.store;
    this.#now = deps.now;
    this.#cacheSize = options.cacheSize ?? DEFAULT_CACHE_SIZE;
    this.#cacheMaxAgeMs = options.cacheMaxAgeMs ?? DEFAULT_CACHE_MAX_AGE_MS;
    this.#ttlMs = options.ttlMs ?? SESSION_BINDING_TTL_MS;
    this.#endpoint = options.endpoint ?? 'default';
  }

  /** The principal the session belongs to, or null when none is recorded. Rejects when the store fails. */
  async ownerOf(sessionId: string): Promise<string | null> {
    const now = this.#now();
    const cached = this.#owners.get(sessionId);
    if (cached && now - cached.readAt < this.#cacheMaxAgeMs) {
      this.#owners.delete(sessionId); // most recently used goes last
      this.#owners.set(sessionId, cached);
      return cached.principal;
    }
    const principal = await this.#store.sessionPrincipal(this.#key(sessionId), this.#ttlMs);
    if (principal === null) this.#owners.delete(sessionId);
    else this.#remember(sessionId, principal, now);
    return principal;
  }

  /** Records that `principal` created the session; resolves with its owner (the first binding wins). Rejects when the store fails. */
  async bind(sessionId: string, principal: string): Promise<string> {
    const owner = await this.#store.bindSession(this.#key(sessionId), principal, this.#ttlMs);
    this.#remember(sessionId, owner, this.#now());
    return owner;
  }

  #key(sessionId: string): string {
    return this.#endpoint === 'default' ? sessionHash(sessionId) : sessionHash(`${this.#endpoint}\n${sessionId}`);
  }

  #remember(sessionId: string, principal: string, readAt: number): void {
    this.#owners.delete(sessionId);
    if (this.#owners.size >= this.#cacheSize) this.#owners.delete(this.#owners.keys().next().value as string);
    this.#owners.set(sessionId, { principal, readAt });
  }
}

/** The store's name for a session: never the id itself (it is a bearer credential for the session). */
export function sessionHash(sessionId: string): string {
  return createHash('sha256').update(sessionId).digest('base64url');
}

/**
 * The session id a reply hands the client when it is not the one the request carried (the initialize
 * reply; or an upstream that switches sessions, which SDK clients follow): that one must be bound to the
 * requester before the reply's headers go out. Undefined when there is nothing to bind.
 */
export function sessionHandedOut(requestHeader: string | string[] | undefined, replyHeader: string | string[] | number | undefined): string | undefined {
  if (replyHeader === undefined) return undefined;
  // Several headers reach a fetch client joined by ", ": that is the id it would send back.
  const handedOut = Array.isArray(replyHeader) ? replyHeader.join(', ') : String(replyHeader);
  const sent = Array.isArray(requestHeader) ? requestHeader.join(', ') : requestHeader;
  return handedOut === sent ? undefined : handedOut;
}
