// The two writers of a GatewayError (src/io/error-reply.ts), over real HTTP: a fastify route and a
// bare node:http server (the bridge's), each answering with the table's status, the error's headers and
// the body of its kind; a reply whose headers are out is cut, never given a second head. And the mapping
// of fastify's own errors (asGatewayError).
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import Fastify, { type FastifyInstance } from 'fastify';
import t from 'tap';
import { ERROR_TABLE, GatewayError } from '../../src/errors.js';
import { asGatewayError, rpcErrorBody, sendErrorReply, sendRpcError } from '../../src/io/error-reply.js';

const scope = new GatewayError('TB_ERR_INSUFFICIENT_SCOPE', 'Forbidden: needs research:pay', { headers: { 'www-authenticate': 'Bearer error="insufficient_scope"' } });

async function fastifyWith(t: Tap, routes: (app: FastifyInstance) => void): Promise<string> {
  const app = Fastify();
  routes(app);
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  return `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
}

type Tap = Pick<typeof t, 'teardown'>;

async function nodeWith(t: Tap, handler: Parameters<typeof createServer>[1]): Promise<string> {
  const server: Server = createServer(handler);
  server.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

t.test('rpcErrorBody: the table\'s JSON-RPC code, the message, the id, data only when given', async (t) => {
  t.same(rpcErrorBody(scope, 4), { jsonrpc: '2.0', id: 4, error: { code: -32003, message: 'Forbidden: needs research:pay' } });
  t.same(rpcErrorBody(new GatewayError('TB_ERR_PARSE', 'Parse error'), null, { why: 1 }), { jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error', data: { why: 1 } } });
});

t.test('sendRpcError on a fastify reply: status, headers, JSON-RPC body; a cause never goes out', async (t) => {
  const origin = await fastifyWith(t, (app) => {
    app.get('/scope', async (_request, reply) => sendRpcError(reply, scope, 'a'));
    app.get('/internal', async (_request, reply) => sendRpcError(reply, new GatewayError('TB_ERR_INTERNAL', 'the gateway could not complete the request', { cause: new Error('password=hunter2') }), null));
    app.get('/stale', async (_request, reply) => {
      reply.header('content-length', '999').header('content-encoding', 'gzip');
      return sendRpcError(reply, new GatewayError('TB_ERR_UPSTREAM_BAD_RESPONSE', 'bad'), 1);
    });
  });
  const answer = await fetch(`${origin}/scope`);
  t.equal(answer.status, 403);
  t.equal(answer.headers.get('www-authenticate'), 'Bearer error="insufficient_scope"');
  t.match(answer.headers.get('content-type'), /^application\/json/);
  t.same(await answer.json(), { jsonrpc: '2.0', id: 'a', error: { code: ERROR_TABLE.TB_ERR_INSUFFICIENT_SCOPE.rpc, message: 'Forbidden: needs research:pay' } });

  const internal = await fetch(`${origin}/internal`);
  t.equal(internal.status, 503, 'the gateway itself never answers 500');
  t.notMatch(await internal.text(), /hunter2/, 'the cause stays out of the body');

  const stale = await fetch(`${origin}/stale`);
  t.equal(stale.status, 502);
  t.equal(stale.headers.get('content-encoding'), null, 'headers set for a body that is not sent are dropped');
  t.same(await stale.json(), { jsonrpc: '2.0', id: 1, error: { code: -32603, message: 'bad' } });
});

t.test('sendErrorReply on a fastify reply: status, headers, {"error": message}', async (t) => {
  const origin = await fastifyWith(t, (app) => {
    app.get('/off', async (_request, reply) => sendErrorReply(reply, new GatewayError('TB_ERR_WEBHOOKS_OFF', 'webhooks not configured')));
    app.get('/method', async (_request, reply) => sendErrorReply(reply, new GatewayError('TB_ERR_METHOD_NOT_ALLOWED', 'method not allowed', { headers: { allow: 'POST' } })));
  });
  const off = await fetch(`${origin}/off`);
  t.same([off.status, await off.json()], [503, { error: 'webhooks not configured' }]);
  const method = await fetch(`${origin}/method`);
  t.same([method.status, method.headers.get('allow'), await method.json()], [405, 'POST', { error: 'method not allowed' }]);
});

t.test('both writers on a bare node:http response (the bridge): same status, headers, body and a length', async (t) => {
  const origin = await nodeWith(t, (req, res) => {
    if (req.url === '/rpc') return sendRpcError(res, new GatewayError('TB_ERR_SESSION_NOT_FOUND', 'Session not found'), null);
    sendErrorReply(res, new GatewayError('TB_ERR_METHOD_NOT_ALLOWED', 'no', { headers: { allow: 'GET, POST, DELETE' } }));
  });
  const rpc = await fetch(`${origin}/rpc`);
  const text = await rpc.text();
  t.equal(rpc.status, 404);
  t.equal(rpc.headers.get('content-length'), String(Buffer.byteLength(text)));
  t.same(JSON.parse(text), { jsonrpc: '2.0', id: null, error: { code: -32001, message: 'Session not found' } });
  const other = await fetch(`${origin}/other`);
  t.same([other.status, other.headers.get('allow'), await other.json()], [405, 'GET, POST, DELETE', { error: 'no' }]);
});

t.test('a reply whose headers are already out is cut, not given a second head', async (t) => {
  const origin = await nodeWith(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write('data: one\n\n', () => sendRpcError(res, new GatewayError('TB_ERR_UPSTREAM_UNAVAILABLE', 'gone'), 1));
  });
  const answer = await fetch(`${origin}/`);
  t.equal(answer.status, 200, 'the head that went out stands');
  const body = await answer.text().catch(() => 'cut');
  t.notMatch(body, /gone/, 'no error body is appended to a stream');
});

t.test('asGatewayError: fastify\'s own errors and anything unexpected', async (t) => {
  const tooLarge = asGatewayError(Object.assign(new Error('too large'), { code: 'FST_ERR_CTP_BODY_TOO_LARGE', statusCode: 413 }), 2048);
  t.same([tooLarge.code, tooLarge.status, tooLarge.message], ['TB_ERR_BODY_TOO_LARGE', 413, 'Request body too large: the limit is 2048 bytes']);
  t.equal(asGatewayError(Object.assign(new Error('media'), { statusCode: 415 }), 1).code, 'TB_ERR_UNSUPPORTED_MEDIA_TYPE');
  t.equal(asGatewayError(Object.assign(new Error('bad'), { statusCode: 400 }), 1).code, 'TB_ERR_INVALID_REQUEST');
  const bug = new TypeError('x is undefined');
  const internal = asGatewayError(bug, 1);
  t.same([internal.code, internal.status, internal.cause], ['TB_ERR_INTERNAL', 503, bug]);
  t.equal(asGatewayError(scope, 1), scope, 'a GatewayError is itself');
  t.equal(asGatewayError(null, 1).code, 'TB_ERR_INTERNAL');
});
