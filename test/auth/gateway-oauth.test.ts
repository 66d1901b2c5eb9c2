// OAuth through the gateway (SPEC §9) from a bare fetch client: a real gateway in auth.mode oauth in
// front of a real SDK upstream. Every token the gateway should accept, and every refusal a real
// authorization server can provoke (expiry, another audience, too few scopes, key rotation, its JWKS
// down), comes from a real OpenID Provider (oidc-provider, test/helpers/oidc-issuer.ts): users by
// authorization code with PKCE, services by client credentials. Tokens no real provider mints (alg
// none, a foreign key, another issuer under a published key, no subject) come from the hand-written
// test/helpers/jwks-issuer.ts. The first four tests are the refusals of the least generous consumer;
// then the attacks on verification, scopes per tool, the header the upstream must never get, and the
// binding of handles to the principal they were minted for.
import { decodeJwt, decodeProtectedHeader } from 'jose';
import t, { type Test } from 'tap';
import type { Clock } from '../../src/clock.js';
import { configSchema } from '../../src/config/schema.js';
import { createLogger } from '../../src/observability/logger.js';
import { runGateway } from '../../src/start.js';
import { wallClock } from '../helpers/clock.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';
import { startTestGateway, testConfig, type TestGateway } from '../helpers/gateway.js';
import { startTestIssuer, type MintOptions } from '../helpers/jwks-issuer.js';
import { startOidcIssuer, type OidcIssuer } from '../helpers/oidc-issuer.js';

type Tap = Pick<typeof t, 'teardown'>;

const upstream = await startPaidUpstream('stateless-json');
t.teardown(() => upstream.close());
/** The real provider: every token a gateway should accept. */
const provider = await startOidcIssuer();
t.teardown(() => provider.close());
/** The hand-written issuer: only tokens a real provider cannot mint. */
const forger = await startTestIssuer();
t.teardown(() => forger.close());

/** What a gateway trusts: an issuer and its JWKS URL. */
interface Trust {
  issuer: string;
  jwksUrl: string;
}
const trustProvider = (issuer: OidcIssuer): Trust => ({ issuer: issuer.issuer, jwksUrl: issuer.jwksUri });

/** A provider of the test's own: for tests that rotate its keys, count its JWKS fetches or take it down. */
async function freshProvider(t: Tap): Promise<OidcIssuer> {
  const issuer = await startOidcIssuer();
  t.teardown(() => issuer.close());
  return issuer;
}

interface OauthGateway extends TestGateway {
  publicUrl: string;
  prm: string;
}

interface GatewayOptions {
  toolScopes?: Record<string, string[]>;
  challengesPerClient?: { ratePerSecond: number; burst: number };
  clock?: Clock;
}

async function oauthGateway(t: Tap, issuer: Trust = trustProvider(provider), upstreamHeaders: Record<string, string> = {}, options: GatewayOptions = {}): Promise<OauthGateway> {
  // Port 0: the gateway binds a free port; the public URL (and the token audience) names the bound one.
  let publicUrl = 'http://127.0.0.1:0/mcp';
  const base = testConfig(upstream.url);
  const gateway = await startTestGateway(
    t as Parameters<typeof startTestGateway>[0],
    testConfig(upstream.url, {
      server: { host: '127.0.0.1', port: 0, publicUrl },
      upstream: { url: upstream.url, headers: upstreamHeaders },
      auth: {
        mode: 'oauth',
        issuer: issuer.issuer,
        jwksUrl: issuer.jwksUrl,
        authorizationServers: [issuer.issuer],
        requiredScopes: ['mcp:use'],
        toolScopes: options.toolScopes ?? { fetch_readable: ['research:pay'] },
      },
      ...(options.challengesPerClient ? { limits: { ...base.limits, challengesPerClient: options.challengesPerClient } } : {}),
    }),
    options.clock ? { clock: options.clock } : {},
  );
  publicUrl = gateway.config.server.publicUrl;
  return { ...gateway, publicUrl, prm: `${gateway.origin}/.well-known/oauth-protected-resource/mcp` };
}

const gateway = await oauthGateway(t);
/** A gateway that trusts the hand-written issuer: for the token shapes only it mints. */
const forgerGateway = await oauthGateway(t, forger);

interface TokenOptions {
  scope?: string;
  /** the resource indicator (the token's aud); default the gateway's publicUrl */
  resource?: string;
}

/**
 * A user's token from the real provider (authorization code with PKCE through the MCP client app),
 * by default one the gateway accepts for everything: audience = publicUrl, both scopes.
 */
const tokenFor = (sub: string, options: TokenOptions = {}, gw: OauthGateway = gateway, issuer: OidcIssuer = provider) =>
  issuer.tokenFor({ clientId: 'mcp-client', sub, scope: options.scope ?? 'mcp:use research:pay', resource: options.resource ?? gw.publicUrl });
/** A service's token from the real provider (client credentials of `clientId`). */
const serviceTokenFor = (clientId: string, gw: OauthGateway = gateway) => provider.tokenFor({ clientId, scope: 'mcp:use research:pay', resource: gw.publicUrl });
/** A hand-written token for the forger's gateway (shapes no real provider issues). */
const forged = (options: MintOptions, gw: OauthGateway = forgerGateway) => forger.mint({ aud: gw.publicUrl, scope: 'mcp:use research:pay', ...options });

interface Reply {
  status: number;
  wwwAuthenticate: string | null;
  body: { id?: unknown; error?: { code: number; message: string }; result?: { isError?: boolean; _meta?: Record<string, Record<string, unknown>>; content?: { text: string }[] } };
  text: string;
}

let nextId = 1;
async function post(gw: OauthGateway, message: Record<string, unknown>, token?: string): Promise<Reply> {
  const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
  if (token !== undefined) headers.authorization = `Bearer ${token}`;
  const response = await fetch(gw.url, { method: 'POST', headers, body: JSON.stringify({ jsonrpc: '2.0', id: nextId++, ...message }) });
  const text = await response.text();
  return { status: response.status, wwwAuthenticate: response.headers.get('www-authenticate'), body: JSON.parse(text) as Reply['body'], text };
}

const toolsList = { method: 'tools/list', params: {} };
const callTool = (name: string, args: Record<string, unknown> = {}) => ({ method: 'tools/call', params: { name, arguments: args } });
const invalidToken = (gw: OauthGateway, description: string) => `Bearer error="invalid_token", error_description="${description}", resource_metadata="${gw.prm}"`;

// --- the four refusals from a bare client (SPEC §9) ---

t.test('no token: 401, WWW-Authenticate names only the metadata URL, JSON-RPC error -32001', async (t) => {
  const reply = await post(gateway, toolsList);
  t.equal(reply.status, 401);
  t.equal(reply.wwwAuthenticate, `Bearer resource_metadata="${gateway.prm}"`);
  t.equal(reply.body.error?.code, -32001);
  t.match(reply.body.error?.message, /Authorization required/);
});

t.test('expired token: 401 invalid_token', async (t) => {
  // The provider's token lives 5 minutes; the gateway's clock (its one clock) moves past exp + 30 s.
  let skewMs = 0;
  const gw = await oauthGateway(t, trustProvider(provider), {}, { clock: wallClock(() => Date.now() + skewMs) });
  const token = await tokenFor('alice', {}, gw);
  t.equal((await post(gw, toolsList, token)).status, 200, 'accepted while it is fresh (control)');
  skewMs = (decodeJwt(token).exp as number) * 1000 + 31_000 - Date.now();
  const reply = await post(gw, toolsList, token);
  t.equal(reply.status, 401);
  t.equal(reply.wwwAuthenticate, invalidToken(gw, 'The access token expired'));
  t.equal(reply.body.error?.code, -32001);
});

t.test('token issued for another audience: 401 invalid_token', async (t) => {
  // A real token of this provider for another resource server it serves: valid signature, right issuer.
  const token = await tokenFor('alice', { resource: 'https://other-resource.example/mcp' });
  t.equal(decodeJwt(token).aud, 'https://other-resource.example/mcp', "the provider's audience");
  const reply = await post(gateway, toolsList, token);
  t.equal(reply.status, 401);
  t.equal(reply.wwwAuthenticate, invalidToken(gateway, 'The access token was issued for another resource'));
});

t.test('valid token without the required scope: 403 insufficient_scope naming the scope', async (t) => {
  const token = await tokenFor('alice', { scope: 'profile' });
  const reply = await post(gateway, toolsList, token);
  t.equal(reply.status, 403);
  t.equal(reply.wwwAuthenticate, `Bearer error="insufficient_scope", scope="mcp:use", resource_metadata="${gateway.prm}"`);
  t.equal(reply.body.error?.code, -32003);
});

t.test('a valid token with the required scope passes (control for the refusals above)', async (t) => {
  const reply = await post(gateway, toolsList, await tokenFor('alice'));
  t.equal(reply.status, 200);
  t.ok(Array.isArray((reply.body.result as { tools?: unknown[] } | undefined)?.tools), 'the upstream tools/list');
});

t.test('a GET stream without a token is refused the same way', async (t) => {
  const response = await fetch(gateway.url, { headers: { accept: 'text/event-stream' } });
  t.equal(response.status, 401);
  t.equal(response.headers.get('www-authenticate'), `Bearer resource_metadata="${gateway.prm}"`);
  await response.body?.cancel();
});

// --- metadata ---

t.test('the protected resource metadata is served at both well-known paths', async (t) => {
  const expected = { resource: gateway.publicUrl, authorization_servers: [provider.issuer], scopes_supported: ['mcp:use', 'research:pay'], bearer_methods_supported: ['header'] };
  for (const path of ['/.well-known/oauth-protected-resource/mcp', '/.well-known/oauth-protected-resource']) {
    const response = await fetch(`${gateway.origin}${path}`);
    t.equal(response.status, 200, path);
    t.same(await response.json(), expected, path);
  }
});

// --- attacks on verification ---

t.test('alg none is refused as an algorithm this resource does not accept', async (t) => {
  const reply = await post(gateway, toolsList, forger.mintUnsigned({ iss: provider.issuer, sub: 'mallory', aud: gateway.publicUrl, scope: 'mcp:use research:pay' }));
  t.equal(reply.status, 401);
  t.equal(reply.wwwAuthenticate, invalidToken(gateway, 'The access token is signed with an algorithm this resource does not accept'));
});

t.test('a wrong issuer is refused, even with a valid signature', async (t) => {
  // A key the gateway trusts signing for another issuer: only a hand-written issuer does that.
  const reply = await post(forgerGateway, toolsList, await forged({ sub: 'mallory', iss: 'https://evil.example/' }));
  t.equal(reply.status, 401);
  t.equal(reply.wwwAuthenticate, invalidToken(forgerGateway, 'The access token was issued by an untrusted issuer'));
});

/** jose's JWKS cooldown reads Date.now: move past it instead of sleeping 30 s (put back when the test ends). */
function pastJwksCooldown(t: Tap): void {
  const realNow = Date.now;
  Date.now = () => realNow() + 31_000;
  t.teardown(() => {
    Date.now = realNow;
  });
}

t.test("key rotation at the provider: an unknown kid makes the gateway refetch the provider's JWKS (after the 30 s cooldown) and accept the new key", async (t) => {
  const issuer = await freshProvider(t);
  const gw = await oauthGateway(t, trustProvider(issuer));
  const before = await tokenFor('alice', {}, gw, issuer);
  t.equal((await post(gw, toolsList, before)).status, 200, 'first key set fetched');
  t.equal(issuer.jwksFetches, 1);
  await issuer.rotateKeys();
  pastJwksCooldown(t);
  const after = await tokenFor('alice', {}, gw, issuer);
  t.not(decodeProtectedHeader(after).kid, decodeProtectedHeader(before).kid, 'the provider signs with its new key');
  t.equal(decodeProtectedHeader(after).kid, issuer.kids[0]);
  const reply = await post(gw, toolsList, after);
  t.equal(reply.status, 200, 'the token signed with the new key is accepted');
  t.equal(issuer.jwksFetches, 2, 'exactly one refetch');
});

t.test('key rotation at the provider: once the old key is retired from its JWKS, a token signed with it that the gateway never saw is refused', async (t) => {
  const issuer = await freshProvider(t);
  const gw = await oauthGateway(t, trustProvider(issuer));
  t.equal((await post(gw, toolsList, await tokenFor('alice', {}, gw, issuer))).status, 200, 'first key set fetched');
  const unused = await tokenFor('bob', {}, gw, issuer);
  const oldKid = decodeProtectedHeader(unused).kid;
  await issuer.rotateKeys();
  await issuer.retireOldKeys();
  t.notOk(issuer.kids.includes(oldKid as string), 'the JWKS no longer serves the old key');
  pastJwksCooldown(t);
  t.equal((await post(gw, toolsList, await tokenFor('carol', {}, gw, issuer))).status, 200, 'the new key verifies after one refetch');
  t.equal(issuer.jwksFetches, 2);
  const reply = await post(gw, toolsList, unused);
  t.equal(reply.status, 401, 'the retired key no longer verifies');
  t.match(reply.wwwAuthenticate, /^Bearer error="invalid_token", /);
});

t.test('a kid that is in no key set is refused, and refetches are rate limited', async (t) => {
  const issuer = await freshProvider(t);
  const gw = await oauthGateway(t, trustProvider(issuer));
  t.equal((await post(gw, toolsList, await tokenFor('alice', {}, gw, issuer))).status, 200);
  const fetchesBefore = issuer.jwksFetches;
  for (let i = 0; i < 3; i++) {
    const token = await forger.mint({ iss: issuer.issuer, sub: 'mallory', aud: gw.publicUrl, scope: 'mcp:use research:pay', alg: 'ES256', foreignKey: true, kid: `forged-${i}` });
    const reply = await post(gw, toolsList, token);
    t.equal(reply.status, 401, `forged kid ${i}`);
    t.match(reply.wwwAuthenticate, /^Bearer error="invalid_token", /);
  }
  t.ok(issuer.jwksFetches - fetchesBefore <= 1, 'at most one refetch inside the cooldown');
});

t.test('JWKS endpoint down: 401 invalid_token saying the keys could not be fetched (fail closed)', async (t) => {
  const issuer = await freshProvider(t);
  issuer.setAvailability('error');
  const gw = await oauthGateway(t, trustProvider(issuer));
  const marker = `jwks-down-${Date.now()}`;
  const reply = await post(gw, callTool('echo', { text: marker }), await tokenFor('alice', {}, gw, issuer));
  t.equal(reply.status, 401);
  t.equal(reply.wwwAuthenticate, invalidToken(gw, 'The signing keys of the issuer could not be fetched; try again shortly'));
  t.notOk(upstream.sawText(marker), 'nothing reached the upstream');
});

// --- scopes per tool ---

t.test('toolScopes: a tools/call of fetch_readable without research:pay is 403 naming the full set', async (t) => {
  const token = await tokenFor('alice', { scope: 'mcp:use' });
  const before = upstream.callsOf('fetch_readable').length;
  const reply = await post(gateway, callTool('fetch_readable', { url: 'https://example.com/' }), token);
  t.equal(reply.status, 403);
  t.equal(reply.wwwAuthenticate, `Bearer error="insufficient_scope", scope="mcp:use research:pay", resource_metadata="${gateway.prm}"`);
  t.equal(upstream.callsOf('fetch_readable').length, before, 'nothing reached the upstream');
  t.equal((await post(gateway, callTool('echo', { text: 'scoped' }), token)).status, 200, 'a tool without toolScopes works with the same token');
});

// --- the client's credential never reaches the upstream ---

t.test("the client's Authorization header is never forwarded; upstream.headers go instead", async (t) => {
  const gw = await oauthGateway(t, trustProvider(provider), { authorization: 'Bearer upstream-own-credential' });
  const token = await tokenFor('alice', {}, gw);
  const marker = `auth-marker-${Date.now()}`;
  const reply = await post(gw, callTool('echo', { text: marker }), token);
  t.equal(reply.status, 200);
  const seen = upstream.calls.find((c) => c.arguments.text === marker);
  t.ok(seen, 'the call reached the upstream');
  t.equal(seen?.headers.authorization, 'Bearer upstream-own-credential', "the upstream's own credential");
  t.notOk(upstream.sawText(token), 'the token is in no upstream body');
});

// --- handles are bound to the principal they were minted for (SPEC §6.2 step 4) ---

t.test('binding: a handle minted for A works for A after paying and is refused for B, disclosing and minting nothing', async (t) => {
  const alice = await tokenFor('alice-binding');
  const bob = await tokenFor('bob-binding');
  const args = { url: 'https://example.com/bound' };

  const challenge = await post(gateway, callTool('fetch_readable', args), alice);
  const meta = challenge.body.result?._meta?.['xyz.tollbooth/challenge'] as { checkoutUrl: string; retry: { value: string } };
  t.ok(meta?.retry.value.startsWith('tb_s_'), 'A is challenged with a handle');
  const handle = meta.retry.value;
  const linkId = meta.checkoutUrl.split('/').pop() as string;
  const pay = await fetch(`${meta.checkoutUrl}/pay`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: '', redirect: 'manual' });
  t.equal(pay.status, 303, 'paid');

  const forA = await post(gateway, callTool('fetch_readable', { ...args, tollboothToken: handle }), alice);
  t.not(forA.body.result?.isError, true, 'A runs the tool');
  t.same(forA.body.result?._meta?.['xyz.tollbooth/receipt'], { sku: 'research', cost: 1, remaining: 2 });

  const metricsBefore = await (await fetch(`${gateway.origin}/metrics`)).text();
  const upstreamBefore = upstream.callsOf('fetch_readable').length;
  const forB = await post(gateway, callTool('fetch_readable', { ...args, tollboothToken: handle }), bob);
  t.equal(forB.status, 200);
  t.equal(forB.body.result?.isError, true);
  t.same(forB.body.result?._meta?.['xyz.tollbooth/refusal'], { reason: 'bound_to_other_principal' });
  t.notOk(forB.body.result?._meta?.['xyz.tollbooth/challenge'], 'no challenge: nothing minted for B');
  for (const secret of [handle, meta.checkoutUrl, linkId]) t.notOk(forB.text.includes(secret), 'the refusal discloses neither the handle nor its link');
  t.equal(upstream.callsOf('fetch_readable').length, upstreamBefore, 'B reached nothing upstream');
  const metricsAfter = await (await fetch(`${gateway.origin}/metrics`)).text();
  const charges = (text: string) => /^tollbooth_charges_opened_total\{sku="research"\} (\d+)/m.exec(text)?.[1];
  t.equal(charges(metricsAfter), charges(metricsBefore), 'no charge opened for B');
  t.match(metricsAfter, /tollbooth_paid_calls_total\{server="default",tool="fetch_readable",sku="research",outcome="refused_bound"\} 1/);

  const againForA = await post(gateway, callTool('fetch_readable', { ...args, tollboothToken: handle }), alice);
  t.same(againForA.body.result?._meta?.['xyz.tollbooth/receipt'], { sku: 'research', cost: 1, remaining: 1 }, "B's attempt cost A nothing");
});

// --- SPEC §20: a 403 for a batch names every scope the batch needs ---

t.test('a batch calling two tools with their own scopes is refused 403 naming every scope of the batch, whatever the token lacks', async (t) => {
  const gw = await oauthGateway(t, trustProvider(provider), {}, { toolScopes: { fetch_readable: ['research:pay'], costly: ['research:costly'] } });
  const batch = [
    { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'fetch_readable', arguments: { url: 'u' } } },
    { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'costly', arguments: { url: 'u' } } },
  ];
  const full = `Bearer error="insufficient_scope", scope="mcp:use research:pay research:costly", resource_metadata="${gw.prm}"`;
  const before = upstream.callsOf('fetch_readable').length + upstream.callsOf('costly').length;
  for (const scope of ['mcp:use', 'mcp:use research:pay', 'mcp:use research:costly']) {
    const token = await tokenFor('batcher', { scope }, gw);
    const response = await fetch(gw.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${token}` },
      body: JSON.stringify(batch),
    });
    await response.text();
    t.equal(response.status, 403, `token with ${scope}`);
    t.equal(response.headers.get('www-authenticate'), full, `token with ${scope}: the whole set is named`);
  }
  t.equal(upstream.callsOf('fetch_readable').length + upstream.callsOf('costly').length, before, 'nothing reached the upstream');
});

// --- SPEC §20: principals are namespaced (sub:… / client:…) ---
// The `client:` principal is for a client-credentials token: a client_id and no `sub` (hand-written, on
// the forger's gateway: RFC 9068 makes `sub` required), or a `sub` equal to the client_id, as
// oidc-provider mints them (the real provider's tokens follow).

/** Challenged, then paid on the dev checkout: the handle and its link. */
async function paidHandle(t: Pick<Test, 'ok'>, gw: OauthGateway, token: string): Promise<{ handle: string; checkoutUrl: string }> {
  const challenge = await post(gw, callTool('fetch_readable', { url: 'https://example.com/ns' }), token);
  const meta = challenge.body.result?._meta?.['xyz.tollbooth/challenge'] as { checkoutUrl: string; retry: { value: string } };
  t.ok(meta?.retry.value.startsWith('tb_s_'), 'challenged with a handle');
  const pay = await fetch(`${meta.checkoutUrl}/pay`, { method: 'POST', redirect: 'manual' });
  t.ok(pay.status === 303, 'paid');
  return { handle: meta.retry.value, checkoutUrl: meta.checkoutUrl };
}

t.test("principals: a client-credentials token whose client_id equals a user's sub cannot spend that user's handle", async (t) => {
  const sharedId = 'same-id-4Fq';
  const user = await forged({ sub: sharedId });
  const service = await forged({ client_id: sharedId });
  const { handle, checkoutUrl } = await paidHandle(t, forgerGateway, user);

  const upstreamBefore = upstream.callsOf('fetch_readable').length;
  const forService = await post(forgerGateway, callTool('fetch_readable', { url: 'https://example.com/ns', tollboothToken: handle }), service);
  t.equal(forService.status, 200);
  t.same(forService.body.result?._meta?.['xyz.tollbooth/refusal'], { reason: 'bound_to_other_principal' });
  t.notOk(forService.text.includes(handle) || forService.text.includes(checkoutUrl), 'nothing of the handle disclosed');
  t.equal(upstream.callsOf('fetch_readable').length, upstreamBefore, 'the service reached nothing upstream');

  const forUser = await post(forgerGateway, callTool('fetch_readable', { url: 'https://example.com/ns', tollboothToken: handle }), user);
  t.same(forUser.body.result?._meta?.['xyz.tollbooth/receipt'], { sku: 'research', cost: 1, remaining: 2 }, 'the user still has every credit');
});

t.test("principals, real provider: a client-credentials token whose client_id equals a user's sub cannot spend that user's handle", async (t) => {
  const sharedId = 'same-id-7Rp';
  const user = await tokenFor(sharedId);
  const service = await serviceTokenFor(sharedId);
  t.match(decodeJwt(user), { sub: sharedId, client_id: 'mcp-client' }, "the user's token (authorization code)");
  t.match(decodeJwt(service), { sub: sharedId, client_id: sharedId }, "the service's token: oidc-provider puts the client id in sub (RFC 9068 §2.2)");
  const { handle } = await paidHandle(t, gateway, user);
  // The service is `client:same-id-7Rp` (its sub is its client_id), the user `sub:same-id-7Rp`.
  const upstreamBefore = upstream.callsOf('fetch_readable').length;
  const forService = await post(gateway, callTool('fetch_readable', { url: 'https://example.com/ns', tollboothToken: handle }), service);
  t.same(forService.body.result?._meta?.['xyz.tollbooth/refusal'], { reason: 'bound_to_other_principal' }, 'the service is refused');
  t.equal(upstream.callsOf('fetch_readable').length, upstreamBefore, 'the service reached nothing upstream');
});

t.test("principals: the other way round, a user whose sub equals a client's client_id cannot spend the client's handle", async (t) => {
  const sharedId = 'same-id-9Kd';
  const user = await forged({ sub: sharedId });
  const service = await forged({ client_id: sharedId });
  const { handle } = await paidHandle(t, forgerGateway, service);
  const forUser = await post(forgerGateway, callTool('fetch_readable', { url: 'https://example.com/ns', tollboothToken: handle }), user);
  t.same(forUser.body.result?._meta?.['xyz.tollbooth/refusal'], { reason: 'bound_to_other_principal' });
  const forService = await post(forgerGateway, callTool('fetch_readable', { url: 'https://example.com/ns', tollboothToken: handle }), service);
  t.same(forService.body.result?._meta?.['xyz.tollbooth/receipt'], { sku: 'research', cost: 1, remaining: 2 }, 'the client spends its own handle');
});

t.test("principals: a client-credentials token does not share the challenge-throttle bucket of the user whose sub equals its client_id", async (t) => {
  const gw = await oauthGateway(t, forger, {}, { challengesPerClient: { ratePerSecond: 0.001, burst: 1 } });
  const sharedId = 'same-id-2Wn';
  const user = await forged({ sub: sharedId }, gw);
  const service = await forged({ client_id: sharedId }, gw);
  const first = await post(gw, callTool('fetch_readable', { url: 'u' }), user);
  t.ok(first.body.result?._meta?.['xyz.tollbooth/challenge'], "the user's one challenge");
  const again = await post(gw, callTool('fetch_readable', { url: 'u' }), user);
  t.match(again.body.result?._meta?.['xyz.tollbooth/refusal'], { reason: 'rate_limited' }, "the user's bucket is empty now (control)");
  const forService = await post(gw, callTool('fetch_readable', { url: 'u' }), service);
  t.ok(forService.body.result?._meta?.['xyz.tollbooth/challenge'], 'the service still gets its own challenge: its own bucket');
});

t.test('a token with neither sub nor client_id is refused 401 invalid_token', async (t) => {
  const reply = await post(forgerGateway, toolsList, await forged({ scope: 'mcp:use' }));
  t.equal(reply.status, 401);
  t.match(reply.wwwAuthenticate, /^Bearer error="invalid_token"/);
});

// --- SPEC §20: WWW-Authenticate is built safely (scopes are validated at load; this is the second line) ---

t.test('a scope that slipped past validation can neither inject a WWW-Authenticate parameter nor turn the 403 into a 502', async (t) => {
  // Port 0: the gateway binds a free port; its public URL names the bound one.
  const config = configSchema.parse(
    testConfig(upstream.url, {
      server: { host: '127.0.0.1', port: 0, publicUrl: 'http://127.0.0.1:0/mcp' },
      auth: { mode: 'oauth', issuer: provider.issuer, jwksUrl: provider.jwksUri, requiredScopes: ['mcp:use'], toolScopes: { fetch_readable: ['x'], costly: ['y'] } },
    }),
  );
  // What load.ts now refuses, put in behind its back.
  config.auth.toolScopes.fetch_readable = ['pay" error="invalid_token'];
  config.auth.toolScopes.costly = ['pay\r\nX-Injected: 1'];
  const running = await runGateway(config, { logger: createLogger('silent') });
  t.teardown(() => running.close());
  const publicUrl = running.config.server.publicUrl;
  const { origin } = new URL(running.url);
  const gw = { url: running.url, publicUrl, prm: `${origin}/.well-known/oauth-protected-resource/mcp`, origin } as OauthGateway;
  const token = await provider.tokenFor({ clientId: 'mcp-client', sub: 'injector', scope: 'mcp:use', resource: publicUrl });

  const quoted = await post(gw, callTool('fetch_readable', { url: 'u' }), token);
  t.equal(quoted.status, 403);
  // The whole header, read as RFC 9110 auth-params (quoted-strings with \\-escapes): exactly three.
  t.match(quoted.wwwAuthenticate, /^Bearer [a-z_]+="(?:[^"\\]|\\.)*"(?:, [a-z_]+="(?:[^"\\]|\\.)*")*$/, 'well-formed auth-params');
  const params = [...(quoted.wwwAuthenticate ?? '').matchAll(/([a-z_]+)="(?:[^"\\]|\\.)*"/g)].map((match) => match[1]);
  t.same(params, ['error', 'scope', 'resource_metadata'], 'one error, one scope, one resource_metadata');
  t.match(quoted.wwwAuthenticate, /^Bearer error="insufficient_scope", scope="mcp:use pay\\" error=\\"invalid_token", resource_metadata="/);

  const crlf = await fetch(gw.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${token}` },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, ...callTool('costly', { url: 'u' }) }),
  });
  await crlf.text();
  t.equal(crlf.status, 403, 'a 403, not a 502');
  t.equal(crlf.headers.get('x-injected'), null, 'no header injected');
  t.equal(crlf.headers.get('www-authenticate'), `Bearer error="insufficient_scope", scope="mcp:use payX-Injected: 1", resource_metadata="${gw.prm}"`);
});
