// Upstream failures told apart (SPEC §16): each error undici, node or the reply reader raises maps to
// one outcome and one typed error (502/503/504, never 500), with the original kept as `cause`.
import t from 'tap';
import { GatewayError } from '../../src/errors.js';
import { SseEventTooLargeError } from '../../src/mcp/sse.js';
import { classifyUpstreamError, UpstreamAbort } from '../../src/proxy/upstream-failure.js';

const coded = (code: string): Error => Object.assign(new Error(`x ${code}`), { code });
/** reply-from wraps undici's error in its own FST_* error with the original as cause. */
const wrapped = (inner: unknown): Error => Object.assign(new Error('wrapped'), { code: 'FST_REPLY_FROM_INTERNAL_SERVER_ERROR', cause: inner });

const CASES: [string, unknown, string, number][] = [
  ['ENOTFOUND', coded('ENOTFOUND'), 'name_resolution', 502],
  ['EAI_AGAIN', coded('EAI_AGAIN'), 'name_resolution', 502],
  ['ECONNREFUSED', coded('ECONNREFUSED'), 'connect_refused', 503],
  ['ECONNREFUSED for every address (AggregateError)', Object.assign(new AggregateError([coded('ECONNREFUSED'), coded('ECONNREFUSED')]), {}), 'connect_refused', 503],
  ['UND_ERR_CONNECT_TIMEOUT', coded('UND_ERR_CONNECT_TIMEOUT'), 'connect_timeout', 504],
  ['ECONNRESET', coded('ECONNRESET'), 'reset', 502],
  ['UND_ERR_SOCKET (other side closed)', coded('UND_ERR_SOCKET'), 'reset', 502],
  ['a body cut short (UND_ERR_RES_CONTENT_LENGTH_MISMATCH)', coded('UND_ERR_RES_CONTENT_LENGTH_MISMATCH'), 'reset', 502],
  ['UND_ERR_HEADERS_TIMEOUT', coded('UND_ERR_HEADERS_TIMEOUT'), 'headers_timeout', 504],
  ['a reply over maxResponseBytes', new GatewayError('TB_ERR_UPSTREAM_RESPONSE_TOO_LARGE', 'too big'), 'body_too_large', 502],
  ['an event over maxResponseBytes', new SseEventTooLargeError(10), 'body_too_large', 502],
  ['an unreadable reply', new GatewayError('TB_ERR_UPSTREAM_BAD_RESPONSE', 'bad'), 'bad_response', 502],
  ['the call deadline', new UpstreamAbort('deadline'), 'deadline', 504],
  ['reply-from wrapping ECONNREFUSED', wrapped(coded('ECONNREFUSED')), 'connect_refused', 503],
  ['reply-from wrapping ENOTFOUND', wrapped(coded('ENOTFOUND')), 'name_resolution', 502],
];

for (const [label, error, outcome, status] of CASES) {
  t.test(`${label} → ${outcome} (${status})`, async (t) => {
    const failure = classifyUpstreamError(error);
    t.equal(failure.outcome, outcome);
    t.equal(failure.error.status, status);
    t.not(failure.error.status, 500);
    t.equal(failure.error.rpcCode, -32603);
    t.same(Object.keys(JSON.parse(JSON.stringify(failure.error))).sort(), ['code', 'message'], 'nothing of the cause is serialised');
  });
}
