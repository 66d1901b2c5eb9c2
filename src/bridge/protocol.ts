// Pure pieces of the bridge (SPEC §5.5): the era of a message, the 2026-07-28 envelope off on the way into
// a legacy child and the result stamps on the way out, the bridge's own answers built from a child's
// identity, the bound on session state, and the rule that picks which client a server→client request
// belongs to on a shared child. No I/O here.
import { LEGACY_VERSIONS, MODERN_VERSION, VERSION_META_KEY } from '../mcp/classify.js';
import { RPC } from '../errors.js';
import { isObject, type JsonObject, type JsonRpcId } from '../mcp/jsonrpc.js';

export { MODERN_VERSION };

/** What the bridge asks a child it initialises itself (shared and 2026-07-28 children); it may answer an older revision. */
export const CHILD_PROTOCOL_VERSION = '2025-11-25';
export const BRIDGE_CLIENT_INFO = { name: 'tollbooth-bridge', version: '0.1.0' } as const;

export const CLIENT_CAPABILITIES_META_KEY = 'io.modelcontextprotocol/clientCapabilities';
export const CLIENT_INFO_META_KEY = 'io.modelcontextprotocol/clientInfo';

/**
 * The reserved 2026-07-28 envelope keys. Only these are lifted before a modern request reaches the
 * (legacy) child — the same set the SDK's servers lift; other `io.modelcontextprotocol/*` keys such
 * as `related-task` are ordinary 2025-era material and stay.
 */
const ENVELOPE_META_KEYS = [VERSION_META_KEY, CLIENT_INFO_META_KEY, CLIENT_CAPABILITIES_META_KEY, 'io.modelcontextprotocol/logLevel'] as const;
const SERVER_INFO_META_KEY = 'io.modelcontextprotocol/serverInfo';

/** 2026-07-28 results of these methods carry required cache fields (SEP-2549); the SDK defaults them to 0/private. */
const CACHEABLE_METHODS = new Set(['tools/list', 'prompts/list', 'resources/list', 'resources/templates/list', 'resources/read', 'server/discover']);

/**
 * Session state a client may make the bridge keep (issue 12): a capabilities object or clientInfo larger
 * than this, serialised, is refused. Real ones are a few hundred bytes.
 */
export const MAX_CLIENT_STATE_BYTES = 64 * 1024;

/** A child's answer to initialize, as the bridge replays it (shared child) or answers server/discover from it. */
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

/** The client capabilities a 2026-07-28 request declares (none declared = `{}`). */
export function modernClientCapabilities(params: unknown): JsonObject {
  const declared = metaOf(params)?.[CLIENT_CAPABILITIES_META_KEY];
  return isObject(declared) ? declared : {};
}

export function modernClientInfo(params: unknown): JsonObject | undefined {
  const declared = metaOf(params)?.[CLIENT_INFO_META_KEY];
  return isObject(declared) ? declared : undefined;
}

/**
 * The part of a client's state the bridge would keep that is over MAX_CLIENT_STATE_BYTES, if any:
 * `capabilities` and `clientInfo` of an initialize, or the same two in a 2026-07-28 envelope.
 */
export function oversizedClientState(state: { capabilities?: unknown; clientInfo?: unknown }): { field: string; bytes: number } | undefined {
  for (const field of ['capabilities', 'clientInfo'] as const) {
    const value = state[field];
    if (value === undefined) continue;
    const bytes = Buffer.byteLength(JSON.stringify(value) ?? '');
    if (bytes > MAX_CLIENT_STATE_BYTES) return { field, bytes };
  }
  return undefined;
}

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

/** The shared child's answer to a legacy `initialize`: the client's revision when the bridge serves it, else the latest legacy one. */
export function legacyInitializeResult(requested: unknown, child: ChildIdentity): JsonObject {
  const protocolVersion = isLegacyVersion(requested) ? requested : CHILD_PROTOCOL_VERSION;
  const result: JsonObject = { protocolVersion, capabilities: child.capabilities, serverInfo: child.serverInfo };
  if (child.instructions !== undefined) result.instructions = child.instructions;
  return result;
}

/**
 * The answer to `server/discover`, shaped like @modelcontextprotocol/server 2.4's `_ondiscover` after its
 * encode seam (supportedVersions, capabilities, instructions, then the modern stamps); `serverInfo` is
 * repeated at the top level for clients that read it there.
 */
export function discoverResult(child: ChildIdentity): unknown {
  const result: JsonObject = { supportedVersions: [MODERN_VERSION], capabilities: child.capabilities, serverInfo: child.serverInfo };
  if (child.instructions !== undefined) result.instructions = child.instructions;
  return stampModernResult('server/discover', result, child.serverInfo);
}

/** Which client capability a server→client request needs on a shared child; methods not listed cannot be relayed. */
export const RELAY_CAPABILITY: Readonly<Record<string, string>> = {
  'sampling/createMessage': 'sampling',
  'elicitation/create': 'elicitation',
  'roots/list': 'roots',
};

/** Notifications about the server as a whole: on a shared child every session gets them, whatever is in flight. */
export const SERVER_WIDE_NOTIFICATIONS = new Set([
  'notifications/tools/list_changed',
  'notifications/prompts/list_changed',
  'notifications/resources/list_changed',
  'notifications/resources/updated',
]);

/** JSON-RPC ids are string | number; as Map keys they must not confuse 1 with "1". */
export const idKey = (id: JsonRpcId): string => (typeof id === 'number' ? `n:${id}` : `s:${String(id)}`);

/** A stable key for a JSON value: object keys sorted, so `{a,b}` and `{b,a}` name the same capability set. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (isObject(value)) {
    return `{${Object.keys(value)
      .sort()
      .map((key) => `${JSON.stringify(key)}:${canonicalJson(value[key])}`)
      .join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

export interface RelayCandidate {
  sessionId: string;
  /** Larger = started later. */
  seq: number;
}

/**
 * Which running call a server→client request belongs to on a shared child. The stdio wire does not say,
 * so: among the calls whose client can take it, one session's calls → that session's latest call; calls
 * of several sessions → ambiguous (relaying it to a guess could show one client another's prompt).
 */
export function chooseRelayTarget<T extends RelayCandidate>(candidates: readonly T[]): T | 'none' | 'ambiguous' {
  if (candidates.length === 0) return 'none';
  const sessionId = candidates[0]!.sessionId;
  if (candidates.some((c) => c.sessionId !== sessionId)) return 'ambiguous';
  return candidates.reduce((latest, c) => (c.seq > latest.seq ? c : latest));
}

export const hasCapability = (capabilities: JsonObject, name: string): boolean => capabilities[name] !== undefined && capabilities[name] !== null;

/**
 * JSON-RPC errors the bridge itself answers calls with (a reply to one message, not a refusal of the HTTP
 * request: those are GatewayErrors, io/error-reply.ts). Numbers (errors.ts RPC) follow the SDK's server transports where the
 * situation is theirs (-32000 server errors, -32603 internal); `data.reason` is stable and machine-readable.
 */
export const BRIDGE_ERROR = {
  /** The child died (or was stopped) before answering. */
  childGone: { code: RPC.INTERNAL_ERROR, reason: 'stdio_server_gone' },
  /** The child is not reading its stdin and the bounded queue is full. */
  stdinFull: { code: RPC.SERVER_ERROR, reason: 'stdio_server_not_reading' },
  /** maxChildren children are running (or maxSessions sessions on a shared child). */
  atCapacity: { code: RPC.SERVER_ERROR, reason: 'at_capacity' },
  /** A capabilities object or clientInfo over MAX_CLIENT_STATE_BYTES. */
  stateTooLarge: { code: RPC.INVALID_PARAMS, reason: 'client_state_too_large' },
  /** The client cancelled the request (the answer it ignores, so its stream can close). */
  cancelled: { code: RPC.REQUEST_CANCELLED, reason: 'cancelled' },
} as const;
