// Which headers cross the gateway (SPEC §5.2). Hop-by-hop headers never do; the client's Authorization
// and Cookie never reach the upstream (token passthrough is forbidden): upstream.headers go instead.
// Session headers, Last-Event-ID and Mcp-* pass both ways. Both functions edit the copy reply-from made
// (its own per-request objects), so the hot path builds no second header object.

const HOP_BY_HOP = ['connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'expect', 'http2-settings'];
const CLIENT_SECRETS = ['authorization', 'cookie'];

export type HeaderMap = Record<string, string | string[] | number | undefined>;

/**
 * The upstream request's headers, from reply-from's copy of the client's (Connection and the headers
 * it names already removed; `host` and `content-length` already set for the upstream).
 * @param parseReply drop Accept-Encoding: the gateway has to read the reply
 */
export function toUpstreamHeaders(headers: HeaderMap, upstreamHeaders: Readonly<Record<string, string>>, upstreamHeaderNames: readonly string[], parseReply: boolean): HeaderMap {
  for (const name of HOP_BY_HOP) if (headers[name] !== undefined) delete headers[name];
  for (const name of CLIENT_SECRETS) if (headers[name] !== undefined) delete headers[name];
  if (parseReply && headers['accept-encoding'] !== undefined) delete headers['accept-encoding'];
  for (const name of upstreamHeaderNames) headers[name] = upstreamHeaders[name];
  return headers;
}

/** upstream.headers with lower-case names, once at start-up. */
export function normaliseUpstreamHeaders(headers: Record<string, string>): { values: Record<string, string>; names: string[] } {
  const values: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) values[name.toLowerCase()] = value;
  return { values, names: Object.keys(values) };
}

/**
 * The client's response headers, from the upstream's: hop-by-hop (and those Connection names) and
 * Set-Cookie dropped; an event stream gets X-Accel-Buffering: no and Cache-Control (if absent) and
 * loses its length, as does a body the gateway rewrites.
 */
export function toClientHeaders(headers: HeaderMap, rewritten: boolean): HeaderMap {
  const connection = headers.connection;
  if (typeof connection === 'string' && connection !== 'keep-alive' && connection !== 'close') {
    for (const token of connection.split(',')) {
      const name = token.trim().toLowerCase();
      if (name) delete headers[name];
    }
  }
  for (const name of HOP_BY_HOP) if (headers[name] !== undefined) delete headers[name];
  if (headers['set-cookie'] !== undefined) delete headers['set-cookie']; // the upstream's cookies are for the gateway, not the client's browser
  if (isEventStream(headers['content-type'] as string | undefined)) {
    headers['x-accel-buffering'] = 'no';
    if (headers['cache-control'] === undefined) headers['cache-control'] = 'no-cache';
    delete headers['content-length'];
  } else if (rewritten && headers['content-length'] !== undefined) {
    delete headers['content-length'];
  }
  return headers;
}

export function isEventStream(contentType: string | string[] | undefined): boolean {
  const value = Array.isArray(contentType) ? contentType[0] : contentType;
  return typeof value === 'string' && value.toLowerCase().startsWith('text/event-stream');
}

export function isJson(contentType: string | string[] | undefined): boolean {
  const value = Array.isArray(contentType) ? contentType[0] : contentType;
  return typeof value === 'string' && /^application\/([a-z.+-]*\+)?json/i.test(value);
}

/** True for exactly `application/json` (any parameters): the type reply-from serialises a parsed body for. */
export function isPlainJson(contentType: string | undefined): boolean {
  if (typeof contentType !== 'string') return false;
  if (contentType === 'application/json') return true;
  const end = contentType.indexOf(';');
  return (end === -1 ? contentType : contentType.slice(0, end)).trim().toLowerCase() === 'application/json';
}
