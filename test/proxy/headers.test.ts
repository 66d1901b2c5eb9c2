// Which headers cross the gateway (SPEC §5.2): the proxy's request and response header hooks.
import t from 'tap';
import { isEventStream, isJson, isPlainJson, normaliseUpstreamHeaders, toClientHeaders, toUpstreamHeaders, type HeaderMap } from '../../src/proxy/headers.js';

const configured = normaliseUpstreamHeaders({ 'X-Upstream-Key': 'k1' });
const upstreamOf = (headers: HeaderMap, parseReply = false, rules = configured): HeaderMap => toUpstreamHeaders({ ...headers }, rules.values, rules.names, parseReply);

t.test('hop-by-hop request headers are dropped; host and content-length (set by the proxy for the upstream) stay', async (t) => {
  const out = upstreamOf({ 'keep-alive': 'timeout=5', te: 'trailers', 'transfer-encoding': 'chunked', upgrade: 'h2c', host: 'upstream:80', 'content-length': '10', expect: '100-continue', 'proxy-authorization': 'x', 'proxy-connection': 'y', accept: 'application/json' });
  t.same(Object.keys(out).sort(), ['accept', 'content-length', 'host', 'x-upstream-key']);
});

t.test("the client's Authorization and Cookie never reach the upstream", async (t) => {
  const out = upstreamOf({ authorization: 'Bearer client-token', cookie: 'sid=1', accept: '*/*' }, false, normaliseUpstreamHeaders({}));
  t.notOk('authorization' in out);
  t.notOk('cookie' in out);
});

t.test('upstream.headers are added (lower-cased) and win over the client', async (t) => {
  const out = upstreamOf({ 'x-upstream-key': 'from-client', authorization: 'Bearer c' }, false, normaliseUpstreamHeaders({ 'X-Upstream-Key': 'k1', Authorization: 'Bearer upstream' }));
  t.equal(out['x-upstream-key'], 'k1');
  t.equal(out.authorization, 'Bearer upstream');
});

t.test('session, Last-Event-ID, Mcp-* and unknown Mcp-Param-* headers pass', async (t) => {
  const incoming = { 'mcp-session-id': 's1', 'last-event-id': 'e9', 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': '=?base64?ZWNobw==?=', 'mcp-param-region': 'eu' };
  t.match(upstreamOf(incoming, true), incoming);
});

t.test('Accept-Encoding is dropped only when the reply must be parsed', async (t) => {
  t.notOk('accept-encoding' in upstreamOf({ 'accept-encoding': 'gzip' }, true));
  t.equal(upstreamOf({ 'accept-encoding': 'gzip' }, false)['accept-encoding'], 'gzip');
});

t.test('response: hop-by-hop headers, those Connection names, and Set-Cookie are dropped, the rest kept', async (t) => {
  const out = toClientHeaders({ connection: 'keep-alive, x-hop', 'x-hop': '1', 'keep-alive': 'timeout=5', 'transfer-encoding': 'chunked', 'set-cookie': ['a=1'], 'mcp-session-id': 's1', 'content-type': 'application/json', 'x-custom': 'y' }, false);
  t.same(out, { 'mcp-session-id': 's1', 'content-type': 'application/json', 'x-custom': 'y' });
});

t.test('response: content-length is kept when relayed as is, dropped when rewritten', async (t) => {
  t.equal(toClientHeaders({ 'content-type': 'application/json', 'content-length': '42' }, false)['content-length'], '42');
  t.notOk('content-length' in toClientHeaders({ 'content-type': 'application/json', 'content-length': '42' }, true));
});

t.test('response: event streams get X-Accel-Buffering: no and lose content-length', async (t) => {
  const out = toClientHeaders({ 'content-type': 'text/event-stream; charset=utf-8', 'content-length': '100' }, false);
  t.equal(out['x-accel-buffering'], 'no');
  t.equal(out['cache-control'], 'no-cache');
  t.notOk('content-length' in out);
});

t.test("response: an event stream's own cache-control is kept", async (t) => {
  t.equal(toClientHeaders({ 'content-type': 'text/event-stream', 'cache-control': 'no-store' }, false)['cache-control'], 'no-store');
});

t.test('content types: event streams and JSON (with +json suffixes) are recognised; plain JSON is exactly application/json', async (t) => {
  t.equal(isEventStream('Text/Event-Stream'), true);
  t.equal(isEventStream(['text/event-stream']), true);
  t.equal(isEventStream('application/json'), false);
  t.equal(isEventStream(undefined), false);
  t.equal(isJson('application/json; charset=utf-8'), true);
  t.equal(isJson('application/problem+json'), true);
  t.equal(isJson('text/plain'), false);
  t.equal(isJson(undefined), false);
  t.equal(isPlainJson('Application/JSON; charset=utf-8'), true);
  t.equal(isPlainJson('application/vnd.example+json'), false);
});
