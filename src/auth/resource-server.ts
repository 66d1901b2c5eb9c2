// The OAuth 2.1 resource server (SPEC §9): turns an Authorization header into a principal and its
// scopes, or into the exact 401/403 answer (status + WWW-Authenticate) the client must get.
//
// Verification is jose `jwtVerify` against the issuer's remote JWKS. An uncached verify costs about
// as much as the whole proxy hop, so verified tokens are cached by SHA-256 of the token (never the
// token itself) for at most min(exp, 5 min), in a bounded LRU. Failures are never cached: a refusal
// costs a verify every time, which is what an attacker sending garbage deserves, and a token that
// failed because the JWKS was briefly unreachable works on the very next request.
//
// Failure behaviour: JWKS unreachable (and no usable cached key set) → fail closed, 401
// invalid_token with reason `jwks_unavailable`. The token is never logged, returned or put in a
// metric label.
import { hash } from 'node:crypto';
import { createRemoteJWKSet, errors, jwtVerify, type JWTPayload, type JWTVerifyGetKey, type JWTVerifyOptions } from 'jose';
import type { GatewayConfig } from '../config/schema.js';
import type { Metrics } from '../observability/metrics.js';
import { bearerChallenge, prmUrl } from './metadata.js';
import { scopeRequirements } from './scopes.js';

export type AuthFailureReason =
  | 'missing_token'
  | 'invalid_token'
  | 'expired'
  | 'wrong_audience'
  | 'wrong_issuer'
  | 'bad_alg'
  | 'jwks_unavailable'
  | 'insufficient_scope';

export type AuthOutcome =
  | { ok: true; principal: string; scopes: ReadonlySet<string> }
  | { ok: false; status: 401 | 403; wwwAuthenticate: string; reason: AuthFailureReason; message: string };

export interface ResourceServerStats {
  /** authenticate calls answered from the verified-token cache */
  cacheHits: number;
  /** jwtVerify runs (cache misses that reached jose, coalesced per token) */
  verifications: number;
  cacheSize: number;
}

export interface ResourceServer {
  /**
   * @param needs.tools the tool names of every `tools/call` in the request (a batch may hold several):
   *   each adds its `toolScopes` to the scopes needed, and a 403 names the whole set.
   */
  authenticate(authorizationHeader: string | undefined, needs: { tools?: readonly string[] }): Promise<AuthOutcome>;
  stats(): ResourceServerStats;
  close(): void;
}

export interface ResourceServerDeps {
  publicUrl: string;
  /** accepted for symmetry with the route setup; the advertised PRM URL derives from publicUrl alone */
  mcpPath: string;
  metrics?: Metrics;
  /** epoch milliseconds; drives exp/nbf checks and cache expiry (jose's JWKS cooldown uses Date.now) */
  clock?: () => number;
}

const JWKS_COOLDOWN_MS = 30_000; // an unknown kid refetches the JWKS at most this often
const JWKS_MAX_AGE_MS = 10 * 60_000;
const JWKS_TIMEOUT_MS = 2_000;
const CLOCK_TOLERANCE_S = 30;
const CACHE_MAX_ENTRIES = 10_000;
const CACHE_MAX_TTL_MS = 5 * 60_000;
// Far above any real access token, far below what would make hashing or parsing a cost.
const MAX_TOKEN_LENGTH = 16 * 1024;
// RFC 6750 §2.1 b64token.
const B64TOKEN = /^[A-Za-z0-9\-._~+/]+=*$/;

type Verified = { ok: true; principal: string; scopes: ReadonlySet<string>; cacheUntil: number };
type Refused = { ok: false; reason: Exclude<AuthFailureReason, 'missing_token' | 'insufficient_scope'>; description: string };

/** The key set could not be fetched: distinct from a token whose kid is simply not in it. */
class JwksUnavailableError extends Error {
  constructor(cause: unknown) {
    super('the JWKS could not be fetched', { cause });
    this.name = 'JwksUnavailableError';
  }
}

const DESCRIPTIONS: Record<Refused['reason'], string> = {
  invalid_token: 'The access token is malformed, its signature does not verify, or it names no subject',
  expired: 'The access token expired',
  wrong_audience: 'The access token was issued for another resource',
  wrong_issuer: 'The access token was issued by an untrusted issuer',
  bad_alg: 'The access token is signed with an algorithm this resource does not accept',
  jwks_unavailable: 'The signing keys of the issuer could not be fetched; try again shortly',
};

export function createResourceServer(auth: GatewayConfig['auth'], deps: ResourceServerDeps): ResourceServer {
  const clock = deps.clock ?? Date.now;
  const audience = auth.audience ?? deps.publicUrl;
  const resourceMetadata = prmUrl(deps.publicUrl);
  const remoteKeys = createRemoteJWKSet(new URL(auth.jwksUrl), {
    cooldownDuration: JWKS_COOLDOWN_MS,
    cacheMaxAge: JWKS_MAX_AGE_MS,
    timeoutDuration: JWKS_TIMEOUT_MS,
  });
  const keyForToken: JWTVerifyGetKey = async (header, token) => {
    try {
      return await remoteKeys(header, token);
    } catch (err) {
      // These describe the token against a key set we do have; anything else is the fetch failing.
      if (err instanceof errors.JWKSNoMatchingKey || err instanceof errors.JWKSMultipleMatchingKeys || err instanceof errors.JOSENotSupported) throw err;
      throw new JwksUnavailableError(err);
    }
  };
  const baseVerifyOptions: JWTVerifyOptions = {
    algorithms: [...auth.algorithms], // the schema's enum cannot hold 'none' or an HMAC algorithm
    issuer: auth.issuer,
    audience,
    clockTolerance: CLOCK_TOLERANCE_S,
    requiredClaims: ['exp'], // an access token without expiry would be valid forever
  };

  const requirements = scopeRequirements(auth);

  const challenge401 = bearerChallenge({ resource_metadata: resourceMetadata });
  const invalid401 = (description: string) => bearerChallenge({ error: 'invalid_token', error_description: description, resource_metadata: resourceMetadata });
  const insufficient403 = (needed: string[]) => bearerChallenge({ error: 'insufficient_scope', scope: needed.join(' '), resource_metadata: resourceMetadata });

  // Insertion order of a Map is its recency order: a hit re-inserts, eviction drops the first key.
  const cache = new Map<string, Verified>();
  const inFlight = new Map<string, Promise<Verified | Refused>>();
  const counts = { cacheHits: 0, verifications: 0 };

  async function verifySignedToken(token: string, options: JWTVerifyOptions): Promise<JWTPayload> {
    try {
      return (await jwtVerify(token, keyForToken, options)).payload;
    } catch (err) {
      // A token without `kid` while the issuer publishes two keys of its type (mid-rotation): try each.
      if (!(err instanceof errors.JWKSMultipleMatchingKeys)) throw err;
      for await (const key of err) {
        try {
          return (await jwtVerify(token, key, options)).payload;
        } catch (inner) {
          if (!(inner instanceof errors.JWSSignatureVerificationFailed)) throw inner;
        }
      }
      throw new errors.JWSSignatureVerificationFailed();
    }
  }

  async function verify(token: string): Promise<Verified | Refused> {
    counts.verifications += 1;
    const now = clock();
    let payload: JWTPayload;
    try {
      payload = await verifySignedToken(token, { ...baseVerifyOptions, currentDate: new Date(now) });
    } catch (err) {
      const reason = refusalReason(err);
      return { ok: false, reason, description: DESCRIPTIONS[reason] };
    }
    const principal = principalOf(payload);
    if (principal === undefined) return { ok: false, reason: 'invalid_token', description: DESCRIPTIONS.invalid_token };
    const exp = payload.exp as number; // required and checked by jwtVerify
    return { ok: true, principal, scopes: scopesOf(payload), cacheUntil: Math.min(exp * 1000, now + CACHE_MAX_TTL_MS) };
  }

  async function verifyCached(token: string): Promise<Verified | Refused> {
    // One-shot hash: no Hash object per request (about half the cost of createHash().update().digest()).
    const key = hash('sha256', token, 'base64url');
    const now = clock();
    const hit = cache.get(key);
    if (hit !== undefined) {
      cache.delete(key);
      if (hit.cacheUntil > now) {
        cache.set(key, hit);
        counts.cacheHits += 1;
        return hit;
      }
    }
    // Concurrent first requests with one token share one verify.
    let pending = inFlight.get(key);
    if (pending === undefined) {
      pending = verify(token).finally(() => inFlight.delete(key));
      inFlight.set(key, pending);
    }
    const result = await pending;
    if (result.ok && result.cacheUntil > clock()) {
      cache.set(key, result);
      if (cache.size > CACHE_MAX_ENTRIES) cache.delete(cache.keys().next().value as string);
    }
    return result;
  }

  function refuse(reason: AuthFailureReason, status: 401 | 403, wwwAuthenticate: string, message: string): AuthOutcome {
    deps.metrics?.authFailures.inc({ reason });
    return { ok: false, status, wwwAuthenticate, reason, message };
  }

  return {
    async authenticate(authorizationHeader, needs) {
      const parsed = parseBearer(authorizationHeader);
      if (parsed === 'absent') {
        return refuse('missing_token', 401, challenge401, 'Authorization required: send an OAuth access token for this resource as "Authorization: Bearer <token>".');
      }
      if (parsed === 'malformed') {
        const description = 'The Authorization header must carry exactly one Bearer token';
        return refuse('invalid_token', 401, invalid401(description), `${description}.`);
      }
      const result = await verifyCached(parsed.token);
      if (!result.ok) {
        return refuse(result.reason, 401, invalid401(result.description), `${result.description}; obtain a new access token for this resource.`);
      }
      const needed = requirements.needed(needs.tools ?? []);
      const missing = needed.filter((scope) => !result.scopes.has(scope));
      if (missing.length > 0) {
        return refuse('insufficient_scope', 403, insufficient403(needed),
          `The access token lacks the scope${missing.length > 1 ? 's' : ''} ${missing.join(', ')}; obtain a token with the scopes: ${needed.join(' ')}.`);
      }
      return { ok: true, principal: result.principal, scopes: result.scopes };
    },
    stats() {
      return { ...counts, cacheSize: cache.size };
    },
    close() {
      cache.clear();
    },
  };
}

/**
 * `Bearer <token>` with a case-insensitive scheme and exactly one b64token (RFC 6750 §2.1).
 * No header, or another scheme (Basic, DPoP…), is `absent`: the request carries no bearer credential.
 */
function parseBearer(header: string | undefined): { token: string } | 'absent' | 'malformed' {
  if (header === undefined) return 'absent';
  const trimmed = header.trim();
  if (trimmed === '') return 'absent';
  const space = trimmed.search(/\s/);
  const scheme = space === -1 ? trimmed : trimmed.slice(0, space);
  if (scheme.toLowerCase() !== 'bearer') return 'absent';
  if (space === -1) return 'malformed';
  const token = trimmed.slice(space).trim();
  if (token.length > MAX_TOKEN_LENGTH || !B64TOKEN.test(token)) return 'malformed'; // also refuses a second token
  return { token };
}

function refusalReason(err: unknown): Refused['reason'] {
  if (err instanceof JwksUnavailableError) return 'jwks_unavailable';
  if (err instanceof errors.JWTExpired) return 'expired';
  if (err instanceof errors.JOSEAlgNotAllowed) return 'bad_alg';
  if (err instanceof errors.JWTClaimValidationFailed) {
    if (err.claim === 'aud') return 'wrong_audience';
    if (err.claim === 'iss') return 'wrong_issuer';
  }
  return 'invalid_token';
}

/**
 * SPEC §20: `sub:<sub>` when the token has a subject, else `client:<client_id>` (a client-credentials
 * token: no subject, or — as real providers mint them (RFC 9068) — a subject equal to its client_id). The prefixes keep the two namespaces apart: a client whose id equals a user's subject is
 * another principal, with its own handles and its own challenge bucket. A `sub` that is present but
 * not a non-empty string is a malformed token (refused), never a reason to fall back to the client id.
 */
function principalOf(payload: JWTPayload): string | undefined {
  const clientId = typeof payload.client_id === 'string' && payload.client_id !== '' ? payload.client_id : undefined;
  if (payload.sub !== undefined) {
    if (typeof payload.sub !== 'string' || payload.sub === '') return undefined;
    // RFC 9068 §2.2: a client-credentials token's subject is the client itself (sub = client_id).
    return payload.sub === clientId ? `client:${clientId}` : `sub:${payload.sub}`;
  }
  return clientId === undefined ? undefined : `client:${clientId}`;
}

/** `scope` (RFC 9068, space-separated) and `scp` (array, or a string in some IdPs), merged. */
function scopesOf(payload: JWTPayload): ReadonlySet<string> {
  const scopes = new Set<string>();
  const add = (value: unknown) => {
    if (typeof value === 'string') for (const scope of value.split(' ')) if (scope !== '') scopes.add(scope);
    if (Array.isArray(value)) for (const scope of value) if (typeof scope === 'string' && scope !== '') scopes.add(scope);
  };
  add(payload.scope);
  add(payload.scp);
  return scopes;
}
