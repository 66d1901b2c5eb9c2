// Pure pieces of the stdio upstream (SPEC §5.5): the gateway's own sessions, the per-era shaping of
// messages (2026-07-28 envelope off on the way in, result stamps on the way out), and the rule that
// picks which client a server→client request belongs to. No I/O here.
import { randomBytes } from 'node:crypto';
import { LEGACY_VERSIONS, MODERN_VERSION, VERSION_META_KEY } from '../mcp/classify.js';
import { isObject, type JsonObject, type JsonRpcId } from '../mcp/jsonrpc.js';

/** What the gateway asks the child for; the child may answer an older revision, which is accepted. */
export const CHILD_PROTOCOL_VERSION = '2025-11-25';

/**
 * The reserved 2026-07-28 envelope keys. Only these are lifted before a modern request reaches the
 * (legacy) child — the same set the SDK's servers lift; other `io.modelcontextprotocol/*` keys such
 * as `related-task` are ordinary 2025-era material and stay.
 */
const ENVELOPE_META_KEYS = [
  VERSION_META_KEY,
  'io.modelcontextprotocol/clientInfo',
  'io.modelcontextprotocol/clientCapabilities',
  'io.modelcontextprotocol/logLevel',
] as const;
const SERVER_INFO_META_KEY = 'io.modelcontextprotocol/serverInfo';

/** 2026-07-28 results of these methods carry required cache fields (SEP-2549); the SDK defaults them to 0/private. */
const CACHEABLE_METHODS = new Set(['tools/list', 'prompts/list', 'resources/list', 'resources/templates/list', 'resources/read', 'server/discover']);

/** The child's answer to the gateway's own initialize, replayed to every legacy client. */
export interface ChildIdentity {
  protocolVersion: string;
  capabilities: JsonObject;
  serverInfo: JsonObject;
  instructions?: string;
}

export function parseInitializeResult(result: unknown): ChildIdentity | undefined {
  if (!isObject(result) || typeof result.protocolVersion !== 'string' || !isObject(result.capabilities) || !isObject(result.serverInfo)) return undefined;
  const identity: ChildIdentity = { protocolVersion: result.protocolVersion, capabilities: result.capabilities, serverInfo: result.serverInfo };
  if (typeof result.instructions === 'string') identity.instructions = result.instructions;
  return identity;
}

const metaOf = (params: unknown): JsonObject | undefined => (isObject(params) && isObject(params._meta) ? params._meta : undefined);

/** SPEC §5.1: a request is modern iff its `_meta` carries the protocol version. */
export const isModernRequest = (params: unknown): boolean => metaOf(params)?.[VERSION_META_KEY] !== undefined;

export const modernVersionOf = (params: unknown): unknown => metaOf(params)?.[VERSION_META_KEY];

export const isLegacyVersion = (version: unknown): version is (typeof LEGACY_VERSIONS)[number] =>
  typeof version === 'string' && (LEGACY_VERSIONS as readonly string[]).includes(version);

/** The params a legacy child should see for a modern request: envelope keys gone, `_meta` dropped when emptied. */
export function withoutEnvelope(params: unknown): unknown {
  const meta = metaOf(params);
  if (meta === undefined || !isObject(params)) return params;
  const nextMeta: JsonObject = { ...meta };
  for (const key of ENVELOPE_META_KEYS) delete nextMeta[key];
  const next: JsonObject = { ...params };
  if (Object.keys(nextMeta).length > 0) next._meta = nextMeta;
  else delete next._meta;
  return next;
}

/** The progress token a request carries, if any. */
export function progressTokenOf(params: unknown): string | number | undefined {
  const token = metaOf(params)?.progressToken;
  return typeof token === 'string' || typeof token === 'number' ? token : undefined;
}

/** Params with `_meta.progressToken` replaced (the caller checked that one is present). */
export function withProgressToken(params: unknown, token: string | number): unknown {
  const meta = metaOf(params);
  if (meta === undefined || !isObject(params)) return params;
  return { ...params, _meta: { ...meta, progressToken: token } };
}

/**
 * A child result as a 2026-07-28 server would send it, following the SDK's encode contract:
 * `resultType: "complete"`, cache fields on cacheable results, and the server's identity in `_meta`.
 */
export function stampModernResult(method: string, result: unknown, serverInfo: JsonObject): unknown {
  if (!isObject(result)) return result;
  const stamped: JsonObject = { ...result };
  if (stamped.resultType === undefined) stamped.resultType = 'complete';
  if (stamped.resultType === 'complete' && CACHEABLE_METHODS.has(method)) {
    if (!(typeof stamped.ttlMs === 'number' && Number.isSafeInteger(stamped.ttlMs) && stamped.ttlMs >= 0)) stamped.ttlMs = 0;
    if (stamped.cacheScope !== 'public' && stamped.cacheScope !== 'private') stamped.cacheScope = 'private';
  }
  const meta = stamped._meta;
  if (meta === undefined) stamped._meta = { [SERVER_INFO_META_KEY]: serverInfo };
  else if (isObject(meta) && meta[SERVER_INFO_META_KEY] === undefined) stamped._meta = { ...meta, [SERVER_INFO_META_KEY]: serverInfo };
  return stamped;
}

/** The gateway's answer to a legacy `initialize`: the client's revision when it is one we serve, else the latest legacy one. */
export function legacyInitializeResult(requested: unknown, child: ChildIdentity): JsonObject {
  const protocolVersion = isLegacyVersion(requested) ? requested : CHILD_PROTOCOL_VERSION;
  const result: JsonObject = { protocolVersion, capabilities: child.capabilities, serverInfo: child.serverInfo };
  if (child.instructions !== undefined) result.instructions = child.instructions;
  return result;
}

/**
 * The gateway's answer to `server/discover`, shaped like @modelcontextprotocol/server 2.4's `_ondiscover`
 * after its encode seam (supportedVersions, capabilities, instructions, then the modern stamps); `serverInfo`
 * is repeated at the top level for clients that read it there.
 */
export function discoverResult(child: ChildIdentity): unknown {
  const result: JsonObject = { supportedVersions: [MODERN_VERSION], capabilities: child.capabilities, serverInfo: child.serverInfo };
  if (child.instructions !== undefined) result.instructions = child.instructions;
  return stampModernResult('server/discover', result, child.serverInfo);
}

/** Which client capability a server→client request needs; methods not listed cannot be relayed. */
export const RELAY_CAPABILITY: Readonly<Record<string, string>> = {
  'sampling/createMessage': 'sampling',
  'elicitation/create': 'elicitation',
  'roots/list': 'roots',
};

/** Notifications about the server as a whole: every session's GET stream gets them, whatever is in flight. */
export const SERVER_WIDE_NOTIFICATIONS = new Set([
  'notifications/tools/list_changed',
  'notifications/prompts/list_changed',
  'notifications/resources/list_changed',
  'notifications/resources/updated',
]);

/** JSON-RPC ids are string | number; as Map keys they must not confuse 1 with "1". */
export const idKey = (id: JsonRpcId): string => (typeof id === 'number' ? `n:${id}` : `s:${String(id)}`);

export interface Session {
  readonly id: string;
  readonly protocolVersion: string;
  readonly capabilities: JsonObject;
  /** Client request id → child id, for the requests of this session still running. */
  readonly running: Map<string, number>;
  lastSeenAt: number;
}

/** The gateway's own legacy sessions (the child never sees them). */
export class SessionTable {
  readonly #sessions = new Map<string, Session>();

  create(protocolVersion: string, capabilities: JsonObject, now: number): Session {
    const session: Session = { id: randomBytes(16).toString('base64url'), protocolVersion, capabilities, running: new Map(), lastSeenAt: now };
    this.#sessions.set(session.id, session);
    return session;
  }

  get(id: string): Session | undefined {
    return this.#sessions.get(id);
  }

  delete(id: string): boolean {
    return this.#sessions.delete(id);
  }

  values(): IterableIterator<Session> {
    return this.#sessions.values();
  }

  /** Sessions idle longer than `idleMs` with nothing running and no open stream (the caller says which are open). */
  expired(now: number, idleMs: number, hasStream: (session: Session) => boolean): Session[] {
    return [...this.#sessions.values()].filter((s) => now - s.lastSeenAt > idleMs && s.running.size === 0 && !hasStream(s));
  }
}

export interface RelayCandidate {
  sessionId: string;
  /** Larger = started later. */
  seq: number;
}

/**
 * Which running call a server→client request belongs to. The stdio wire does not say, so: among the
 * calls whose client can take it, one session's calls → that session's latest call; calls of several
 * sessions → ambiguous (relaying it to a guess could show one client another's prompt).
 */
export function chooseRelayTarget<T extends RelayCandidate>(candidates: readonly T[]): T | 'none' | 'ambiguous' {
  if (candidates.length === 0) return 'none';
  const sessionId = candidates[0]!.sessionId;
  if (candidates.some((c) => c.sessionId !== sessionId)) return 'ambiguous';
  return candidates.reduce((latest, c) => (c.seq > latest.seq ? c : latest));
}

export const hasCapability = (capabilities: JsonObject, name: string): boolean => capabilities[name] !== undefined && capabilities[name] !== null;
