// Which headers cross the gateway (SPEC §5.2).
import t from 'tap';
import { clientResponseHeaders, isEventStream, isJson, upstreamRequestHeaders } from '../../src/proxy/headers.js';

const rules = { upstreamHeaders: { 'X-Upstream-Key': 'k1' } };

t.test('hop-by-hop request headers are dropped', async (t) => {
  const out = upstreamRequestHeaders(
    { connection: 'keep-alive', 'keep-alive': 'timeout=5', te: 'trailers', 'transfer-encoding': 'chunked', upgrade: 'h2c', host: 'gw', 'content-length': '10', expect: '100-continue', 'proxy-authorization': 'x', accept: 'application/json' },
    rules,
    false,
  );
  t.same(Object.keys(out).sort(), ['accept', 'x-upstream-key']);
});

t.test('headers named in Connection are dropped too', async (t) => {
  const out = upstreamRequestHeaders({ connection: 'close, X-Secret-Hop', 'x-secret-hop': '1', 'x-kept': '2' }, rules, false);
  t.notOk('x-secret-hop' in out);
  t.equal(out['x-kept'], '2');
});

t.test("the client's Authorization and Cookie never reach the upstream", async (t) => {
  const out = upstreamRequestHeaders({ authorization: 'Bearer client-token', cookie: 'sid=1', accept: '*/*' }, { upstreamHeaders: {} }, false);
  t.notOk('authorization' in out);
  t.notOk('cookie' in out);
});

t.test('upstream.headers are added (lower-cased) and win over the client', async (t) => {
  const out = upstreamRequestHeaders({ 'x-upstream-key': 'from-client', authorization: 'Bearer c' }, { upstreamHeaders: { 'X-Upstream-Key': 'k1', Authorization: 'Bearer upstream' } }, false);
  t.equal(out['x-upstream-key'], 'k1');
  t.equal(out.authorization, 'Bearer upstream');
});

t.test('session, Last-Event-ID, Mcp-* and unknown Mcp-Param-* headers pass', async (t) => {
  const incoming = { 'mcp-session-id': 's1', 'last-event-id': 'e9', 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': '=?base64?ZWNobw==?=', 'mcp-param-region': 'eu' };
  t.match(upstreamRequestHeaders(incoming, rules, true), incoming);
});

t.test('Accept-Encoding is dropped only when the reply must be parsed', async (t) => {
  t.notOk('accept-encoding' in upstreamRequestHeaders({ 'accept-encoding': 'gzip' }, rules, true));
  t.equal(upstreamRequestHeaders({ 'accept-encoding': 'gzip' }, rules, false)['accept-encoding'], 'gzip');
});

t.test('repeated request headers are joined', async (t) => {
  t.equal(upstreamRequestHeaders({ 'x-multi': ['a', 'b'] }, rules, false)['x-multi'], 'a, b');
});

t.test('response: hop-by-hop headers and Set-Cookie are dropped, the rest kept', async (t) => {
  const out = clientResponseHeaders({ connection: 'keep-alive', 'transfer-encoding': 'chunked', 'set-cookie': ['a=1'], 'mcp-session-id': 's1', 'content-type': 'application/json', 'x-custom': 'y' }, false);
  t.same(out, { 'mcp-session-id': 's1', 'content-type': 'application/json', 'x-custom': 'y' });
});

t.test('response: content-length is kept when relayed as is, dropped when rewritten', async (t) => {
  const upstream = { 'content-type': 'application/json', 'content-length': '42' };
  t.equal(clientResponseHeaders(upstream, false)['content-length'], '42');
  t.notOk('content-length' in clientResponseHeaders(upstream, true));
});

t.test('response: event streams get X-Accel-Buffering: no and lose content-length', async (t) => {
  const out = clientResponseHeaders({ 'content-type': 'text/event-stream; charset=utf-8', 'content-length': '100' }, false);
  t.equal(out['x-accel-buffering'], 'no');
  t.equal(out['cache-control'], 'no-cache');
  t.notOk('content-length' in out);
});

t.test("response: an event stream's own cache-control is kept", async (t) => {
  t.equal(clientResponseHeaders({ 'content-type': 'text/event-stream', 'cache-control': 'no-store' }, false)['cache-control'], 'no-store');
});

t.test('content types: event streams and JSON (with +json suffixes) are recognised', async (t) => {
  t.equal(isEventStream('Text/Event-Stream'), true);
  t.equal(isEventStream(['text/event-stream']), true);
  t.equal(isEventStream('application/json'), false);
  t.equal(isEventStream(undefined), false);
  t.equal(isJson('application/json; charset=utf-8'), true);
  t.equal(isJson('application/problem+json'), true);
  t.equal(isJson('text/plain'), false);
  t.equal(isJson(undefined), false);
});
