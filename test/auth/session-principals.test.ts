// SPEC §20, sessions bound to principals (auth.mode oauth): a legacy MCP session belongs to the principal
// whose request created it. Another principal holding its Mcp-Session-Id gets 404 — on POST, GET, GET
// with Last-Event-ID and DELETE — and nothing reaches the upstream; the owner keeps working. Access
// tokens from a real OpenID Provider (oidc-provider, test/helpers/oidc-issuer.ts: users by authorization
// code with PKCE, services by client credentials), a real SDK upstream with an event store, and two
// gateway processes on one Redis (needs a built dist/: `npm run build`). A token with a client_id and no
// `sub` (the shape the gateway's `client:` rule is for) is one RFC 9068 forbids and oidc-provider never
// issues, so that one comes from the hand-written test/helpers/jwks-issuer.ts.
import { randomBytes } from 'node:crypto';
import t, { type Test } from 'tap';
import type { ConfigInput } from '../../src/config/schema.js';
import { freePort, startTestGateway, testConfig } from '../helpers/gateway.js';
import { redisGatewayConfig, startGatewayProcess } from '../helpers/gateway-process.js';
import { startTestIssuer, type TestIssuer } from '../helpers/jwks-issuer.js';
import { startOidcIssuer, type OidcIssuer } from '../helpers/oidc-issuer.js';
import { startPaidUpstream, type PaidUpstream } from '../helpers/paid-upstream.js';
import { startRedis } from '../helpers/redis-server.js';
import { startScriptedUpstream } from '../helpers/scripted-upstream.js';

const LEGACY = '2025-11-25';
const issuer = await startOidcIssuer();
t.teardown(() => issuer.close());

function oauth(from: OidcIssuer | TestIssuer = issuer): ConfigInput['auth'] {
  const jwksUrl = 'jwksUri' in from ? from.jwksUri : from.jwksUrl;
  return { mode: 'oauth', issuer: from.issuer, jwksUrl, authorizationServers: [from.issuer], requiredScopes: ['mcp:use'] };
}

/** A user's token: authorization code with PKCE through the MCP client app, signed in as `sub`. */
const userToken = (publicUrl: string, sub: string) => issuer.tokenFor({ clientId: 'mcp-client', sub, scope: 'mcp:use', resource: publicUrl });
/** A service's token: client credentials of `clientId`. */
const serviceToken = (publicUrl: string, clientId: string) => issuer.tokenFor({ clientId, scope: 'mcp:use', resource: publicUrl });

interface Answer {
  status: number;
  sessionId: string | null;
  text: string;
  /** The SSE event ids of the reply, in order. */
  eventIds: string[];
}

/** One exchange on the MCP endpoint with a bearer token; a GET stream is read for `readMs` and then dropped. */
async function exchange(url: string, token: string, options: { method?: string; body?: unknown; sessionId?: string; lastEventId?: string; readMs?: number } = {}): Promise<Answer> {
  const headers: Record<string, string> = { authorization: `Bearer ${token}`, accept: 'application/json, text/event-stream', 'mcp-protocol-version': LEGACY };
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  if (options.sessionId) headers['mcp-session-id'] = options.sessionId;
  if (options.lastEventId) headers['last-event-id'] = options.lastEventId;
  const controller = new AbortController();
  const response = await fetch(url, { method: options.method ?? 'POST', headers, body: options.body === undefined ? undefined : JSON.stringify(options.body), signal: controller.signal });
  let text = '';
  if (options.readMs !== undefined && response.ok) {
    const reader = (response.body as ReadableStream<Uint8Array>).getReader();
    const timer = setTimeout(() => controller.abort(), options.readMs);
    const decoder = new TextDecoder();
    try {
      for (let next = await reader.read(); !next.done; next = await reader.read()) text += decoder.decode(next.value, { stream: true });
    } catch {
      // aborted after readMs: what arrived is kept
    }
    clearTimeout(timer);
  } else {
    text = await response.text();
  }
  return { status: response.status, sessionId: response.headers.get('mcp-session-id'), text, eventIds: [...text.matchAll(/^id: ?(.+)$/gm)].map((match) => (match[1] as string).trim()) };
}

const initialize = { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: LEGACY, capabilities: {}, clientInfo: { name: 'session-principals', version: '1' } } };
const echo = (id: number, text: string) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'echo', arguments: { text } } });

/** initialize + notifications/initialized as `token`; the session id the gateway relayed. */
async function openSession(url: string, token: string): Promise<string> {
  const opened = await exchange(url, token, { body: initialize });
  if (!opened.sessionId) throw new Error(`no session (HTTP ${opened.status}: ${opened.text})`);
  await exchange(url, token, { body: { jsonrpc: '2.0', method: 'notifications/initialized' }, sessionId: opened.sessionId });
  return opened.sessionId;
}

/** Every way another principal can use a session: POST, GET, GET with Last-Event-ID, DELETE. Each must be 404 and reach nothing upstream. */
async function assertLockedOut(t: Test, url: string, token: string, sessionId: string, lastEventId: string, upstream: PaidUpstream, who: string): Promise<void> {
  const before = upstream.requests.length;
  const attempts: [string, Parameters<typeof exchange>[2]][] = [
    ['POST', { body: echo(90, 'not yours'), sessionId }],
    ['GET', { method: 'GET', sessionId, readMs: 300 }],
    ['GET with Last-Event-ID', { method: 'GET', sessionId, lastEventId, readMs: 300 }],
    ['DELETE', { method: 'DELETE', sessionId }],
  ];
  for (const [what, options] of attempts) {
    const answer = await exchange(url, token, options);
    t.equal(answer.status, 404, `${who}: ${what} → 404`);
    t.match(answer.text.startsWith('{') ? JSON.parse(answer.text) : answer.text, { jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' } }, `${who}: ${what} → a JSON-RPC "Session not found"`);
    t.notOk(answer.text.includes('not yours'), `${who}: ${what} → nothing of the session`);
  }
  t.equal(upstream.requests.length, before, `${who}: nothing reached the upstream`);
}

/** The owner still uses its session: a call, a resumed stream, and finally DELETE. */
async function assertOwnerWorks(t: Test, url: string, token: string, sessionId: string, lastEventId: string): Promise<void> {
  const call = await exchange(url, token, { body: echo(91, 'mine'), sessionId });
  t.equal(call.status, 200, 'the owner: POST works');
  t.match(call.text, /mine/);
  const replay = await exchange(url, token, { method: 'GET', sessionId, lastEventId, readMs: 2_000 });
  t.equal(replay.status, 200, 'the owner: GET with Last-Event-ID works');
  t.match(replay.text, /first/, 'the replayed events');
  t.equal((await exchange(url, token, { method: 'DELETE', sessionId })).status, 200, 'the owner: DELETE works');
}

t.test('one gateway: another principal on the session gets 404 on POST, GET, GET with Last-Event-ID and DELETE; the owner keeps working', async (t) => {
  const upstream = await startPaidUpstream('sessions-resumable');
  t.teardown(() => upstream.close());
  // Port 0: the gateway binds a free port; the public URL (and the token audience) names the bound one.
  let publicUrl = 'http://127.0.0.1:0/mcp';
  const gateway = await startTestGateway(t, testConfig(upstream.url, { server: { host: '127.0.0.1', port: 0, publicUrl }, auth: oauth() }));
  publicUrl = gateway.config.server.publicUrl;
  const alice = await userToken(publicUrl, 'alice');
  const sessionId = await openSession(gateway.url, alice);
  const first = await exchange(gateway.url, alice, { body: echo(1, 'first'), sessionId });
  t.equal(first.status, 200);
  t.ok(first.eventIds.length > 0, 'the upstream gave event ids');
  const lastEventId = first.eventIds[0] as string;

  await assertLockedOut(t, gateway.url, await userToken(publicUrl, 'bob'), sessionId, lastEventId, upstream, 'another user');
  await assertLockedOut(t, gateway.url, await serviceToken(publicUrl, 'reporting-service'), sessionId, lastEventId, upstream, 'a client-credentials client');
  t.ok(gateway.logs().some((line) => line.evt === 'session_refused' && line.reason === 'other_principal'), 'the refusals are logged');
  t.notOk(gateway.logText().includes(sessionId), 'the session id is not logged');
  await assertOwnerWorks(t, gateway.url, alice, sessionId, lastEventId);
});

t.test("a token with a client_id and no sub (principal client:<id>) cannot use the session of the user whose sub is that id", async (t) => {
  // RFC 9068 makes `sub` required and oidc-provider always writes it, so this shape is hand-minted.
  const handWritten = await startTestIssuer();
  t.teardown(() => handWritten.close());
  const upstream = await startPaidUpstream('sessions-resumable');
  t.teardown(() => upstream.close());
  // Port 0: the gateway binds a free port; the public URL (and the token audience) names the bound one.
  let publicUrl = 'http://127.0.0.1:0/mcp';
  const gateway = await startTestGateway(t, testConfig(upstream.url, { server: { host: '127.0.0.1', port: 0, publicUrl }, auth: oauth(handWritten) }));
  publicUrl = gateway.config.server.publicUrl;
  const alice = await handWritten.mint({ sub: 'alice', aud: publicUrl, scope: 'mcp:use' });
  const sessionId = await openSession(gateway.url, alice);
  const lastEventId = (await exchange(gateway.url, alice, { body: echo(1, 'first'), sessionId })).eventIds[0] as string;
  const client = await handWritten.mint({ client_id: 'alice', aud: publicUrl, scope: 'mcp:use' });
  await assertLockedOut(t, gateway.url, client, sessionId, lastEventId, upstream, "a client whose client_id is the owner's sub");
  await assertOwnerWorks(t, gateway.url, alice, sessionId, lastEventId);
});

t.test("a real client-credentials token whose client_id is the owner's sub cannot use the owner's session", async (t) => {
  const upstream = await startPaidUpstream('sessions-resumable');
  t.teardown(() => upstream.close());
  // Port 0: the gateway binds a free port; the public URL (and the token audience) names the bound one.
  let publicUrl = 'http://127.0.0.1:0/mcp';
  const gateway = await startTestGateway(t, testConfig(upstream.url, { server: { host: '127.0.0.1', port: 0, publicUrl }, auth: oauth() }));
  publicUrl = gateway.config.server.publicUrl;
  const alice = await userToken(publicUrl, 'alice');
  const sessionId = await openSession(gateway.url, alice);
  const lastEventId = (await exchange(gateway.url, alice, { body: echo(1, 'first'), sessionId })).eventIds[0] as string;
  // oidc-provider writes `sub: <client_id>` into a client-credentials token (RFC 9068 §2.2): the
  // gateway makes such a token `client:alice`, another principal than the user `sub:alice`.
  await assertLockedOut(t, gateway.url, await serviceToken(publicUrl, 'alice'), sessionId, lastEventId, upstream, "a client whose client_id is the owner's sub");
});

t.test('a session with no recorded owner (opened behind the gateway) is refused 404 to everyone, never forwarded', async (t) => {
  const upstream = await startPaidUpstream('sessions-resumable');
  t.teardown(() => upstream.close());
  // Port 0: the gateway binds a free port; the public URL (and the token audience) names the bound one.
  let publicUrl = 'http://127.0.0.1:0/mcp';
  const gateway = await startTestGateway(t, testConfig(upstream.url, { server: { host: '127.0.0.1', port: 0, publicUrl }, auth: oauth() }));
  publicUrl = gateway.config.server.publicUrl;
  const direct = await exchange(upstream.url, 'unused', { body: initialize });
  t.ok(direct.sessionId, 'a session opened at the upstream directly');
  const before = upstream.requests.length;
  const refused = await exchange(gateway.url, await userToken(publicUrl, 'alice'), { body: echo(1, 'x'), sessionId: direct.sessionId as string });
  t.equal(refused.status, 404);
  t.equal(upstream.requests.length, before, 'nothing forwarded');
});

t.test('an upstream that hands one session id to two principals: the second initialize is not relayed, and no session id reaches that client', async (t) => {
  const upstream = await startScriptedUpstream();
  t.teardown(() => upstream.close());
  upstream.respond((_req, res, body) => {
    const message = JSON.parse(body) as { id?: number };
    res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': 'the-same-session' });
    res.end(JSON.stringify({ jsonrpc: '2.0', id: message.id ?? null, result: { protocolVersion: LEGACY, capabilities: {}, serverInfo: { name: 'x', version: '1' } } }));
  });
  // Port 0: the gateway binds a free port; the public URL (and the token audience) names the bound one.
  let publicUrl = 'http://127.0.0.1:0/mcp';
  const gateway = await startTestGateway(t, testConfig(upstream.url, { server: { host: '127.0.0.1', port: 0, publicUrl }, auth: oauth() }));
  publicUrl = gateway.config.server.publicUrl;
  const first = await exchange(gateway.url, await userToken(publicUrl, 'alice'), { body: initialize });
  t.equal(first.sessionId, 'the-same-session', "the first principal gets it (and it is now the first principal's)");
  const second = await exchange(gateway.url, await userToken(publicUrl, 'bob'), { body: initialize });
  t.equal(second.status, 502);
  t.equal(second.sessionId, null, 'no session header');
  t.match(JSON.parse(second.text), { jsonrpc: '2.0', id: 0, error: { code: -32603 } });
  t.ok(gateway.logs().some((line) => line.evt === 'session_bind_failed'), 'logged');
});

t.test('auth.mode none: sessions are not bound (any client may use any session id, as before)', async (t) => {
  const upstream = await startPaidUpstream('sessions-resumable');
  t.teardown(() => upstream.close());
  const gateway = await startTestGateway(t, testConfig(upstream.url));
  const sessionId = await openSession(gateway.url, 'ignored');
  t.equal((await exchange(gateway.url, 'another-ignored', { body: echo(1, 'x'), sessionId })).status, 200);
});

t.test('two gateway processes on one Redis: the binding written by one is enforced by the other', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const upstream = await startPaidUpstream('sessions-resumable');
  t.teardown(() => upstream.close());
  const port = await freePort();
  const publicUrl = `http://127.0.0.1:${port}/mcp`;
  const config = redisGatewayConfig(upstream.url, { url: redis.url }, `tbsess${randomBytes(3).toString('hex')}:`, { auth: oauth() });
  const [a, b] = await Promise.all([
    startGatewayProcess(t, { ...config, server: { host: '127.0.0.1', port, publicUrl } }),
    startGatewayProcess(t, { ...config, server: { host: '127.0.0.1', publicUrl } }),
  ]);
  const alice = await userToken(publicUrl, 'alice');
  const sessionId = await openSession(a.url, alice);
  const first = await exchange(a.url, alice, { body: echo(1, 'first'), sessionId });
  const lastEventId = first.eventIds[0] as string;
  await assertLockedOut(t, b.url, await userToken(publicUrl, 'bob'), sessionId, lastEventId, upstream, 'another user through the other replica');
  await assertLockedOut(t, a.url, await userToken(publicUrl, 'bob'), sessionId, lastEventId, upstream, 'another user through the first replica');
  await assertOwnerWorks(t, b.url, alice, sessionId, lastEventId);
});
