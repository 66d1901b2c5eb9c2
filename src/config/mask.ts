// What `tollbooth check` (and anything else that shows the effective config) may print: a copy with
// every secret replaced by "***". An empty secret stays empty, so the operator can still see that
// it is unset (e.g. webhooks off).
import type { GatewayConfig } from './schema.js';

export const MASK = '***';

export function maskSecrets(config: GatewayConfig): GatewayConfig {
  const copy = structuredClone<GatewayConfig>(config);
  const { moove } = copy.payments;
  moove.apiKey = maskValue(moove.apiKey);
  moove.webhookSecret = maskValue(moove.webhookSecret);
  copy.handles.hashSecret = maskValue(copy.handles.hashSecret);
  copy.ledger.signingKey = maskValue(copy.ledger.signingKey);
  for (const upstream of [copy.upstream, ...Object.values(copy.servers).map((entry) => entry.upstream)]) {
    for (const name of Object.keys(upstream.headers)) upstream.headers[name] = maskValue(upstream.headers[name] ?? '');
    // A stdio child's given environment is where its own credentials go.
    for (const name of Object.keys(upstream.env)) upstream.env[name] = maskValue(upstream.env[name] ?? '');
    if (upstream.url !== undefined) upstream.url = maskUrlSecrets(upstream.url);
  }
  copy.payments.x402.facilitatorUrl = maskUrlSecrets(copy.payments.x402.facilitatorUrl);
  const { redis } = copy.store;
  if (redis) {
    if (redis.url !== undefined) redis.url = maskUrlSecrets(redis.url);
    if (redis.cluster) redis.cluster = redis.cluster.map(maskUrlSecrets);
  }
  moove.baseUrl = maskUrlSecrets(moove.baseUrl);
  copy.auth.jwksUrl = maskUrlSecrets(copy.auth.jwksUrl);
  copy.tracing.otlpEndpoint = maskUrlSecrets(copy.tracing.otlpEndpoint);
  return copy;
}

/**
 * The effective config as `tollbooth check` prints it: secrets masked, and no moove block unless the
 * provider is moove. Printed back, a dev config's defaulted moove.baseUrl would be a filled-in block,
 * which is an error (SPEC §20); without it the printed config parses again.
 */
export function printableConfig(config: GatewayConfig): unknown {
  const masked = maskSecrets(config);
  if (masked.payments.provider === 'moove') return masked;
  const { moove: _unused, ...payments } = masked.payments;
  return { ...masked, payments };
}

function maskValue(value: string): string {
  return value === '' ? '' : MASK;
}

// Query parameter names that carry a credential: password, sentinelPassword, token, access_token,
// secret, key, api_key, apikey, auth, credential(s), pwd, pass, sig, signature.
const SECRET_PARAMETER = /pass|pwd|secret|token|key|auth|credential|sig/i;

/**
 * A URL as it may be printed, logged or put in an error (SPEC §10): the userinfo password and the
 * value of every query parameter that carries a secret become "***"; everything else is kept so an
 * operator can still tell which server is meant. Works on the text, not through `new URL`, because
 * a Sentinel URL (`redis://:pw@s1:26379,s2:26379/0?sentinelMasterName=m&sentinelPassword=pw`) is
 * not a WHATWG URL. Text without a scheme that holds an `@` is masked whole.
 */
export function maskUrlSecrets(url: string): string {
  const schemeEnd = url.indexOf('://');
  if (schemeEnd === -1) return url.includes('@') ? MASK : url;
  const authorityStart = schemeEnd + 3;
  const hashAt = url.indexOf('#', authorityStart);
  const beforeHash = hashAt === -1 ? url : url.slice(0, hashAt);
  const fragment = hashAt === -1 ? '' : url.slice(hashAt);
  const queryAt = beforeHash.indexOf('?', authorityStart);
  const beforeQuery = queryAt === -1 ? beforeHash : beforeHash.slice(0, queryAt);
  const query = queryAt === -1 ? null : beforeHash.slice(queryAt + 1);
  const pathAt = beforeQuery.indexOf('/', authorityStart);
  const authority = pathAt === -1 ? beforeQuery.slice(authorityStart) : beforeQuery.slice(authorityStart, pathAt);
  const path = pathAt === -1 ? '' : beforeQuery.slice(pathAt);
  return `${url.slice(0, authorityStart)}${maskUserinfo(authority)}${path}${query === null ? '' : `?${maskQuery(query)}`}${fragment}`;
}

/** `user:pw@host` → `user:***@host`. The last `@` ends the userinfo (a password may hold an `@`). */
function maskUserinfo(authority: string): string {
  const at = authority.lastIndexOf('@');
  if (at === -1) return authority;
  const userinfo = authority.slice(0, at);
  const colon = userinfo.indexOf(':');
  if (colon === -1 || colon === userinfo.length - 1) return authority; // a user name alone is no secret
  return `${userinfo.slice(0, colon)}:${MASK}${authority.slice(at)}`;
}

function maskQuery(query: string): string {
  return query
    .split('&')
    .map((pair) => {
      const equals = pair.indexOf('=');
      if (equals === -1 || equals === pair.length - 1) return pair;
      return SECRET_PARAMETER.test(decodeName(pair.slice(0, equals))) ? `${pair.slice(0, equals)}=${MASK}` : pair;
    })
    .join('&');
}

function decodeName(name: string): string {
  try {
    return decodeURIComponent(name.replace(/\+/g, ' '));
  } catch {
    return name;
  }
}
