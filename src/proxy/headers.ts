// Which headers cross the gateway (SPEC §5.2). Hop-by-hop headers never do; the client's Authorization
// and Cookie never reach the upstream (token passthrough is forbidden): upstream.headers go instead.
import type { IncomingHttpHeaders } from 'node:http';

const HOP_BY_HOP = new Set([
  'connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade',
  'host', 'content-length', 'expect', 'http2-settings',
]);
const CLIENT_SECRETS = new Set(['authorization', 'cookie']);

export interface RequestHeaderRules {
  upstreamHeaders: Record<string, string>;
}

/**
 * Headers for the upstream request.
 * @param parseReply strip Accept-Encoding because the gateway has to read the reply
 */
export function upstreamRequestHeaders(incoming: IncomingHttpHeaders, rules: RequestHeaderRules, parseReply: boolean): Record<string, string> {
  const out: Record<string, string> = {};
  const connectionTokens = connectionListed(incoming.connection);
  for (const [name, value] of Object.entries(incoming)) {
    if (value === undefined || HOP_BY_HOP.has(name) || CLIENT_SECRETS.has(name) || connectionTokens.has(name)) continue;
    if (parseReply && name === 'accept-encoding') continue;
    out[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  for (const [name, value] of Object.entries(rules.upstreamHeaders)) out[name.toLowerCase()] = value;
  return out;
}

/** Headers for the client's response; `rewritten` drops the length (the body changes size). */
export function clientResponseHeaders(upstream: Record<string, string | string[]>, rewritten: boolean): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  const connectionTokens = connectionListed(upstream.connection);
  for (const [name, value] of Object.entries(upstream)) {
    if (HOP_BY_HOP.has(name) || connectionTokens.has(name)) {
      if (name !== 'content-length' || rewritten) continue;
    }
    if (name === 'set-cookie') continue; // the upstream's cookies are for the gateway, not the client's browser
    out[name] = value;
  }
  if (isEventStream(out['content-type'])) {
    out['x-accel-buffering'] = 'no';
    out['cache-control'] ??= 'no-cache';
    delete out['content-length'];
  }
  return out;
}

export function isEventStream(contentType: string | string[] | undefined): boolean {
  const value = Array.isArray(contentType) ? contentType[0] : contentType;
  return typeof value === 'string' && value.toLowerCase().startsWith('text/event-stream');
}

export function isJson(contentType: string | string[] | undefined): boolean {
  const value = Array.isArray(contentType) ? contentType[0] : contentType;
  return typeof value === 'string' && /^application\/([a-z.+-]*\+)?json/i.test(value);
}

const NONE: ReadonlySet<string> = new Set();

/** Header names a Connection header lists. No Set is built for the usual values (keep-alive is hop-by-hop anyway). */
function connectionListed(value: string | string[] | undefined): ReadonlySet<string> {
  if (value === undefined || value === 'keep-alive') return NONE;
  const text = Array.isArray(value) ? value.join(',') : value;
  return new Set(text.split(',').map((token) => token.trim().toLowerCase()).filter(Boolean));
}
