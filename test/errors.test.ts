// The one error table (src/errors.ts) walked whole: every code has a status and a JSON-RPC code from RPC,
// and every code is raised by the code that owns it. Most are driven over real HTTP — against a real
// gateway (test/helpers/gateway.ts), a real OAuth gateway with a real OpenID Provider (oidc-provider), a real Moove-mode
// gateway in front of the Moove fake, and a real stdio bridge — and the answer on the wire is checked
// against the table (status, JSON-RPC code, id). The rest are raised here by the real function that owns
// them; UNIT_ONLY says why each cannot be reached from a client. A code added to the table without a
// case in one of the two lists fails the last test.
import { request as httpRequest } from 'node:http';
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import t, { type Test } from 'tap';
import { Bridge } from '../src/bridge/bridge.js';
import { loadConfig, parseConfigText } from '../src/config/load.js';
import { ERROR_CODES, ERROR_TABLE, GatewayError, RPC, type ErrorCode } from '../src/errors.js';
import { asGatewayError } from '../src/io/error-reply.js';
import { createLogger } from '../src/observability/logger.js';
import { MooveProvider } from '../src/payments/moove.js';
import { ProviderError } from '../src/payments/provider.js';
import { FacilitatorClient, FacilitatorError } from '../src/payments/x402/facilitator.js';
import { classifyUpstreamError, UpstreamAbort } from '../src/proxy/upstream-failure.js';
import { MemoryStore } from '../src/store/memory.js';
import { openRedisClient } from '../src/store/redis-connection.js';
import { raw as rawBridge, startTestBridge, initializeRequest } from './bridge/helpers.js';
import { startTestGateway, testConfig } from './helpers/gateway.js';
import { startOidcIssuer } from './helpers/oidc-issuer.js';
import { sendWebhook, startMooveFake } from './helpers/moove-fake.js';
import { deadPort, startScriptedUpstream } from './helpers/scripted-upstream.js';

type Json = Record<string, any>;

/** Raised where no client can make them happen; each is raised below by the function that owns it. */
const UNIT_ONLY: Partial<Record<ErrorCode, string>> = {
  TB_ERR_CONFIG_INVALID: 'a bad config never starts a gateway (process exit, SPEC §2)',
  TB_ERR_CONFIG_UNREADABLE: 'a config file that cannot be read never starts a gateway',
  TB_ERR_STORE_TTL_FLOOR: 'the config schema refuses handles.ttl under 1 h before a store sees one',
  TB_ERR_STORE_UNAVAILABLE: 'on the request path a store failure becomes a refusal result (§6.4), not a wire error',
  TB_ERR_PROVIDER: 'a provider failure on the request path becomes a refusal result (§6.4), not a wire error',
  TB_ERR_FACILITATOR: 'a facilitator failure on the request path becomes an x402 refusal result (§19)',
  TB_ERR_UPSTREAM_TIMEOUT: 'needs an upstream that hangs past undici timeouts or a priced call past callDeadline (a result, §6.5); the mapping is proven here and test/proxy/upstream-failure.test.ts',
  TB_ERR_INTERNAL: 'a bug: nothing a client sends is meant to reach it',
};

const seenOnWire = new Set<ErrorCode>();

/** One request over node:http (Host, Origin and bodies exactly as given). */
function send(url: string, options: { method?: string; headers?: Record<string, string>; body?: string } = {}): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; text: string; json: Json }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method: options.method ?? 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...options.headers } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => {
        let json: Json = {};
        try {
          json = JSON.parse(text) as Json;
        } catch {
          // not JSON: json stays empty and the assertions on it fail
        }
        resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json });
      });
    });
    req.on('error', reject);
    req.end(options.body);
  });
}

/** The answer is the table's for `code`: its status and, on the MCP endpoint, a JSON-RPC error with its code and this id. */
function expectRpc(t: Test, answer: { status: number; json: Json }, code: ErrorCode, id: unknown): void {
  t.equal(answer.status, ERROR_TABLE[code].status, `${code}: status ${ERROR_TABLE[code].status}`);
  t.match(answer.json, { jsonrpc: '2.0', id, error: { code: ERROR_TABLE[code].rpc, message: String } }, `${code}: JSON-RPC ${ERROR_TABLE[code].rpc}`);
  t.equal(answer.json.id, id, `${code}: id ${JSON.stringify(id)}`);
  seenOnWire.add(code);
}

/** A non-MCP route's answer for `code`: its status and `{"error": message}`. */
function expectRoute(t: Test, answer: { status: number; json: Json }, code: ErrorCode, message?: string): void {
  t.equal(answer.status, ERROR_TABLE[code].status, `${code}: status ${ERROR_TABLE[code].status}`);
  t.same(Object.keys(answer.json), ['error'], `${code}: the body is {"error": …}`);
  if (message !== undefined) t.equal(answer.json.error, message);
  seenOnWire.add(code);
}

t.test('the table: every code has an HTTP status and a JSON-RPC code from RPC; nothing answers 500', async (t) => {
  const rpcNumbers = new Set<number>(Object.values(RPC));
  t.ok(ERROR_CODES.length >= 30, `${ERROR_CODES.length} codes`);
  for (const code of ERROR_CODES) {
    const { status, rpc } = ERROR_TABLE[code];
    t.ok(Number.isInteger(status) && status >= 200 && status <= 599, `${code}: status ${status}`);
    t.ok(rpcNumbers.has(rpc), `${code}: ${rpc} is an RPC number`);
    t.match(code, /^TB_ERR_[A-Z_]+$/);
    if (status >= 400 && status < 500) t.not(rpc, RPC.INTERNAL_ERROR, `${code}: a client error is not -32603`);
  }
  t.notOk(ERROR_CODES.some((code) => ERROR_TABLE[code].status === 500 && !['TB_ERR_CONFIG_INVALID', 'TB_ERR_CONFIG_UNREADABLE', 'TB_ERR_STORE_TTL_FLOOR'].includes(code)), 'only start-up codes (never on a wire) say 500');
  t.equal(ERROR_TABLE.TB_ERR_INSUFFICIENT_SCOPE.rpc, ERROR_TABLE.TB_ERR_ORIGIN_FORBIDDEN.rpc, 'every 403 carries the same JSON-RPC code');
  t.equal(ERROR_TABLE.TB_ERR_INSUFFICIENT_SCOPE.rpc, -32003);
  const error = new GatewayError('TB_ERR_UNAUTHENTICATED', 'no token', { cause: new Error('secret detail'), headers: { 'www-authenticate': 'Bearer' } });
  t.same([error.status, error.rpcCode, error.headers], [401, -32001, { 'www-authenticate': 'Bearer' }]);
  t.same(JSON.parse(JSON.stringify(error)), { code: 'TB_ERR_UNAUTHENTICATED', message: 'no token' }, 'serialised without its cause');
});

t.test('no JSON-RPC number is spelled outside errors.ts (comments aside)', async (t) => {
  const src = new URL('../src/', import.meta.url);
  const offenders: string[] = [];
  for (const file of readdirSync(src, { recursive: true }) as string[]) {
    if (!file.endsWith('.ts') || file === 'errors.ts') continue;
    const code = readFileSync(new URL(file, src), 'utf8').replace(/\/\*[\s\S]*?\*\//g, '').replace(/\/\/.*$/gm, '');
    if (/-32\d{3}\b/.test(code)) offenders.push(file);
  }
  t.same(offenders, [], 'every module takes its numbers from RPC');
});

t.test('the MCP endpoint: guards, parse, classify, limits, methods, upstream failures', async (t) => {
  const upstream = await startScriptedUpstream();
  t.teardown(() => upstream.close());
  const gateway = await startTestGateway(t, testConfig(upstream.url, { server: { host: '127.0.0.1', port: 0, allowedHosts: ['127.0.0.1'], bodyLimit: '2kb' }, upstream: { url: upstream.url, maxResponseBytes: '64kb' } }));
  const ping = JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'ping' });

  expectRpc(t, await send(gateway.url, { headers: { origin: 'https://evil.example' }, body: ping }), 'TB_ERR_ORIGIN_FORBIDDEN', null);
  expectRpc(t, await send(gateway.url, { headers: { host: 'evil.example' }, body: ping }), 'TB_ERR_HOST_FORBIDDEN', null);
  expectRpc(t, await send(gateway.url, { headers: { 'content-type': 'text/plain' }, body: ping }), 'TB_ERR_UNSUPPORTED_MEDIA_TYPE', 7);
  expectRpc(t, await send(gateway.url, { body: '{"jsonrpc":' }), 'TB_ERR_PARSE', null);
  expectRpc(t, await send(gateway.url, { body: '{}' }), 'TB_ERR_INVALID_REQUEST', null);
  expectRpc(t, await send(gateway.url, { body: JSON.stringify({ jsonrpc: '2.0', id: 8, method: 'tools/call', params: { name: 5 } }) }), 'TB_ERR_INVALID_PARAMS', 8);
  const keyed = JSON.stringify({ jsonrpc: '2.0', id: 13, method: 'tools/call', params: { name: 'fetch_readable', arguments: {} } });
  expectRpc(t, await send(gateway.url, { headers: { 'idempotency-key': 'k'.repeat(256) }, body: keyed }), 'TB_ERR_IDEMPOTENCY_KEY_INVALID', 13);
  const modern = { jsonrpc: '2.0', id: 9, method: 'tools/list', params: { _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28' } } };
  expectRpc(t, await send(gateway.url, { headers: { 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call' }, body: JSON.stringify(modern) }), 'TB_ERR_HEADER_MISMATCH', 9);
  expectRpc(t, await send(gateway.url, { body: JSON.stringify({ jsonrpc: '2.0', id: 10, method: 'ping', params: { pad: 'x'.repeat(4096) } }) }), 'TB_ERR_BODY_TOO_LARGE', null);
  const put = await send(gateway.url, { method: 'PUT', body: ping });
  expectRpc(t, put, 'TB_ERR_METHOD_NOT_ALLOWED', null);
  t.equal(put.headers.allow, 'GET, POST, DELETE', 'Allow comes with the error');
  t.equal(upstream.seen.length, 0, 'none of these reached the upstream');

  upstream.respond((req) => req.socket.destroy());
  expectRpc(t, await send(gateway.url, { body: ping }), 'TB_ERR_UPSTREAM_UNAVAILABLE', 7);
  upstream.respond((_req, res) => res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'gzip' }).end('not gzip'));
  expectRpc(t, await send(gateway.url, { body: JSON.stringify({ jsonrpc: '2.0', id: 11, method: 'tools/list' }) }), 'TB_ERR_UPSTREAM_BAD_RESPONSE', 11);
  upstream.respond((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', id: 12, result: { tools: [], pad: 'x'.repeat(2 * 1024 * 1024) } })));
  expectRpc(t, await send(gateway.url, { body: JSON.stringify({ jsonrpc: '2.0', id: 12, method: 'tools/list' }) }), 'TB_ERR_UPSTREAM_RESPONSE_TOO_LARGE', 12);

  const refused = await startTestGateway(t, testConfig(`http://127.0.0.1:${await deadPort()}/mcp`));
  expectRpc(t, await send(refused.url, { body: ping }), 'TB_ERR_UPSTREAM_REFUSED', 7);
});

t.test('the gateway\'s other routes: not found, and the dev checkout\'s pay action', async (t) => {
  const upstream = await startScriptedUpstream();
  t.teardown(() => upstream.close());
  const gateway = await startTestGateway(t, testConfig(upstream.url));
  expectRoute(t, await send(`${gateway.origin}/nowhere`, { method: 'GET' }), 'TB_ERR_NOT_FOUND', 'not found');

  // A real challenge opens a real dev checkout link.
  upstream.respond((_req, res) => res.writeHead(500).end());
  const challenge = await send(gateway.url, { body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'fetch_readable', arguments: { url: 'x' } } }) });
  const link = /\/tollbooth\/checkout\/[\w-]+/.exec(challenge.text)?.[0];
  t.ok(link, 'a checkout link');
  const pay = `${gateway.origin}${link}/pay`;
  const form = { 'content-type': 'application/x-www-form-urlencoded' };
  expectRoute(t, await send(pay, { headers: { ...form, origin: 'https://evil.example' }, body: 'received=5.00' }), 'TB_ERR_ORIGIN_FORBIDDEN', 'payments are only accepted from the checkout page itself');
  expectRoute(t, await send(`${gateway.origin}/tollbooth/checkout/nope/pay`, { headers: form, body: 'received=5.00' }), 'TB_ERR_NOT_FOUND', 'checkout link not found');
  expectRoute(t, await send(pay, { headers: form, body: 'received=lots' }), 'TB_ERR_INVALID_REQUEST');
  t.equal((await send(pay, { headers: form, body: 'received=5.00' })).status, 303, 'paid');
  expectRoute(t, await send(pay, { headers: form, body: 'received=5.00' }), 'TB_ERR_CHECKOUT_CLOSED', 'this checkout link is no longer payable');
});

t.test('OAuth: no token, a missing scope, a session that is not the caller\'s', async (t) => {
  const upstream = await startScriptedUpstream();
  t.teardown(() => upstream.close());
  const issuer = await startOidcIssuer();
  t.teardown(() => issuer.close());
  // Port 0: the gateway binds a free port; the public URL (and the token audience) names the bound one.
  let publicUrl = 'http://127.0.0.1:0/mcp';
  const gateway = await startTestGateway(
    t,
    testConfig(upstream.url, { server: { host: '127.0.0.1', port: 0, publicUrl }, auth: { mode: 'oauth', issuer: issuer.issuer, jwksUrl: issuer.jwksUri, authorizationServers: [issuer.issuer], requiredScopes: ['mcp:use'] } }),
  );
  publicUrl = gateway.config.server.publicUrl;
  const ping = JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'ping' });
  const none = await send(gateway.url, { body: ping });
  expectRpc(t, none, 'TB_ERR_UNAUTHENTICATED', 3);
  t.match(none.headers['www-authenticate'], /^Bearer resource_metadata=/, 'WWW-Authenticate comes with the error');
  const narrow = await issuer.tokenFor({ clientId: 'mcp-client', sub: 'alice', scope: 'other', resource: publicUrl });
  const scoped = await send(gateway.url, { headers: { authorization: `Bearer ${narrow}` }, body: ping });
  expectRpc(t, scoped, 'TB_ERR_INSUFFICIENT_SCOPE', 3);
  t.match(scoped.headers['www-authenticate'], /error="insufficient_scope"/);
  const token = await issuer.tokenFor({ clientId: 'mcp-client', sub: 'alice', scope: 'mcp:use', resource: publicUrl });
  expectRpc(t, await send(gateway.url, { headers: { authorization: `Bearer ${token}`, 'mcp-session-id': 'someone-elses' }, body: ping }), 'TB_ERR_SESSION_NOT_FOUND', 3);
  t.equal(upstream.seen.length, 0, 'none of these reached the upstream');
});

t.test('the Moove webhook route: off without a secret, unsigned deliveries refused', async (t) => {
  const upstream = await startScriptedUpstream();
  t.teardown(() => upstream.close());
  const fake = await startMooveFake({ apiKeys: ['mk_test'] });
  t.teardown(() => fake.close());
  const moove = (webhookSecret: string) => testConfig(upstream.url, { payments: { provider: 'moove', moove: { apiKey: 'mk_test', baseUrl: fake.url, webhookSecret } } });
  const off = await startTestGateway(t, moove(''));
  const on = await startTestGateway(t, moove('whsec_errors_test'));
  const webhook = (origin: string) => `${origin}/tollbooth/webhooks/moove`;
  expectRoute(t, await send(webhook(off.origin), { body: '{}' }), 'TB_ERR_WEBHOOKS_OFF', 'webhooks not configured');
  const forged = await sendWebhook(webhook(on.origin), 'whsec_someone_else', { id: 'evt_1', data: { paymentLinkId: 'pl_1' } });
  expectRoute(t, { status: forged.status, json: forged.body as Json }, 'TB_ERR_WEBHOOK_SIGNATURE');
  const get = await send(webhook(on.origin), { method: 'GET' });
  expectRoute(t, get, 'TB_ERR_METHOD_NOT_ALLOWED');
  t.equal(get.headers.allow, 'POST');
});

t.test('the stdio bridge refuses with the same table', async (t) => {
  const bridge = await startTestBridge(t);
  const notAcceptable = await rawBridge(bridge, 'POST', initializeRequest(1), { accept: 'application/json' });
  expectRpc(t, { status: notAcceptable.status, json: notAcceptable.messages[0] ?? {} }, 'TB_ERR_NOT_ACCEPTABLE', null);
  const future = { jsonrpc: '2.0', id: 4, method: 'tools/list', params: { _meta: { 'io.modelcontextprotocol/protocolVersion': '2099-01-01' } } };
  const version = await rawBridge(bridge, 'POST', future);
  expectRpc(t, { status: version.status, json: version.messages[0] ?? {} }, 'TB_ERR_UNSUPPORTED_PROTOCOL_VERSION', 4);
  const unknown = await rawBridge(bridge, 'POST', { jsonrpc: '2.0', id: 5, method: 'ping' }, { 'mcp-session-id': 'nope' });
  t.equal(unknown.status, 404);
  t.match(unknown.messages[0], { error: { code: RPC.SESSION_NOT_FOUND } });
  // A bridge that is closing (startBridge stops listening as it closes: served here by a listener that stays).
  const closed = new Bridge({
    command: ['true'], sessions: 'perClient', maxChildren: 1, idleTimeoutMs: 60_000, logger: createLogger('error'),
    child: { command: ['true'], env: {}, logger: createLogger('error'), maxLineBytes: 1024, maxStdinBytes: 1024 },
    path: '/mcp', maxBodyBytes: 1024, maxSessions: 1, eventBuffer: { events: 1, bytes: 1024 } as never, maxBufferedBytes: 1024, initializeTimeoutMs: 1_000, restartBackoff: { initialMs: 1, maxMs: 1 },
  });
  await closed.close();
  const server = createServer((req, res) => void closed.handle(req, res));
  server.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const closing = await send(`http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`, { body: JSON.stringify({ jsonrpc: '2.0', id: 6, method: 'ping' }) });
  expectRpc(t, closing, 'TB_ERR_BRIDGE_UNAVAILABLE', null);
});

t.test('codes no client can reach, raised by the code that owns them', async (t) => {
  const raised = new Map<ErrorCode, unknown>();
  const dir = mkdtempSync(join(tmpdir(), 'tb-errors-'));
  raised.set('TB_ERR_CONFIG_UNREADABLE', await Promise.resolve().then(() => loadConfig(join(dir, 'missing.yaml'))).catch((e: unknown) => e));
  writeFileSync(join(dir, 'bad.yaml'), 'upstream: 5\n');
  raised.set('TB_ERR_CONFIG_INVALID', await Promise.resolve().then(() => parseConfigText('upstream: 5\n', join(dir, 'bad.yaml'))).catch((e: unknown) => e));
  raised.set('TB_ERR_STORE_TTL_FLOOR', await new MemoryStore().createHandle({ handleHash: 'h', fingerprint: 'f', principal: null, ttlMs: 60_000 }).catch((e: unknown) => e));
  const logger = createLogger('error');
  raised.set('TB_ERR_STORE_UNAVAILABLE', await openRedisClient({ url: `redis://127.0.0.1:${await deadPort()}`, keyPrefix: 'tb:' }, logger).catch((e: unknown) => e));
  const fake = await startMooveFake({ apiKeys: ['mk_right'] });
  t.teardown(() => fake.close());
  const provider = new MooveProvider({ apiKey: 'mk_wrong', baseUrl: fake.url, logger });
  t.teardown(() => provider.close());
  const opened = await provider.openCharge({ nonce: 'Qm9vdGhOb25jZTEyMzQ1Ng', sku: 'research', amount: '5.00', currency: 'USDC', label: 'Research', credits: 3, tool: 'fetch_readable', expiresAt: Date.now() + 3_600_000 }).catch((e: unknown) => e);
  t.ok(opened instanceof ProviderError, 'a ProviderError');
  raised.set('TB_ERR_PROVIDER', opened);
  const facilitator = new FacilitatorClient({ url: `http://127.0.0.1:${await deadPort()}`, logger, baseDelayMs: 1, maxDelayMs: 2 });
  const verified = await facilitator.verify({} as never, {} as never).catch((e: unknown) => e);
  t.ok(verified instanceof FacilitatorError, 'a FacilitatorError');
  raised.set('TB_ERR_FACILITATOR', verified);
  raised.set('TB_ERR_UPSTREAM_TIMEOUT', classifyUpstreamError(new UpstreamAbort('deadline')).error);
  raised.set('TB_ERR_INTERNAL', asGatewayError(new TypeError('a bug'), 1024));

  for (const [code, why] of Object.entries(UNIT_ONLY) as [ErrorCode, string][]) {
    const error = raised.get(code);
    t.ok(error instanceof GatewayError, `${code} is a GatewayError (${why})`);
    t.equal((error as GatewayError).code, code);
    t.equal((error as GatewayError).status, ERROR_TABLE[code].status);
    t.equal((error as GatewayError).rpcCode, ERROR_TABLE[code].rpc);
  }
});

t.test('every code in the table is either seen on the wire above or raised by its owner', async (t) => {
  for (const code of ERROR_CODES) {
    const wire = seenOnWire.has(code);
    const unit = code in UNIT_ONLY;
    t.ok(wire || unit, `${code}: ${wire ? 'on the wire' : unit ? `unit only: ${UNIT_ONLY[code]}` : 'NEVER RAISED'}`);
    t.notOk(wire && unit, `${code}: not listed as unit-only once it is driven over HTTP`);
  }
  const doc = readFileSync(new URL('../docs/operations.md', import.meta.url), 'utf8');
  for (const code of ERROR_CODES) t.match(doc, `| \`${code}\` | ${ERROR_TABLE[code].status} | ${ERROR_TABLE[code].rpc} |`, `docs/operations.md lists ${code} as the table says`);
  t.comment(`${seenOnWire.size} codes over real HTTP, ${Object.keys(UNIT_ONLY).length} unit only, ${ERROR_CODES.length} in all`);
});
