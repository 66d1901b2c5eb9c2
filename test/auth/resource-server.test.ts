// The OAuth resource server against a real JWKS served over HTTP. The refusals SPEC §9 demands from a
// bare client, the principals and scopes of real tokens, and key rotation use a real OpenID Provider
// (oidc-provider, test/helpers/oidc-issuer.ts). The rest pin down how tokens are verified, which scopes
// are needed, and the verified-token cache, with claims and keys no real provider produces (alg none,
// HMAC, foreign keys, no exp, no sub, odd scp shapes, no kid): those come from the hand-written
// test/helpers/jwks-issuer.ts.
import t from 'tap';
import { configSchema, type GatewayConfig } from '../../src/config/schema.js';
import { createResourceServer, type AuthOutcome, type ResourceServer } from '../../src/auth/resource-server.js';
import { createMetrics } from '../../src/observability/metrics.js';
import { decodeJwt, decodeProtectedHeader } from 'jose';
import { startTestIssuer, type TestIssuer } from '../helpers/jwks-issuer.js';
import { startOidcIssuer, type OidcIssuer } from '../helpers/oidc-issuer.js';

const PUBLIC_URL = 'https://gw.example.test/mcp';
const PRM = 'https://gw.example.test/.well-known/oauth-protected-resource/mcp';

// The bits of a (sub)test the helpers use; root and subtests both have them.
type Tap = Pick<typeof t, 'teardown' | 'equal' | 'match' | 'ok'>;

// jose's JWKS cooldown reads Date.now(), so time travel shifts Date.now itself; the resource
// server's clock defaults to it too. Each test that moves time puts it back.
const realNow = Date.now.bind(Date);
let offsetMs = 0;
Date.now = () => realNow() + offsetMs;
const nowSeconds = () => Math.floor(Date.now() / 1000);
function travel(t: Tap, ms: number): void {
  offsetMs += ms;
  t.teardown(() => {
    offsetMs = 0;
  });
}

const shared = await startTestIssuer();
t.teardown(() => shared.close());
const provider = await startOidcIssuer();
t.teardown(() => provider.close());

/** What a resource server trusts: an issuer and its JWKS URL. */
interface Trust {
  issuer: string;
  jwksUrl: string;
}
const trustProvider = (issuer: OidcIssuer): Trust => ({ issuer: issuer.issuer, jwksUrl: issuer.jwksUri });
/** A user's token from the real provider (authorization code with PKCE). */
const userToken = (sub: string, scope = 'mcp:use', resource = PUBLIC_URL, issuer: OidcIssuer = provider) => issuer.tokenFor({ clientId: 'mcp-client', sub, scope, resource });

function authConfig(issuer: Trust, auth: Record<string, unknown> = {}): GatewayConfig['auth'] {
  return configSchema.parse({
    server: { publicUrl: PUBLIC_URL },
    upstream: { url: 'http://127.0.0.1:1/mcp' },
    auth: { mode: 'oauth', issuer: issuer.issuer, jwksUrl: issuer.jwksUrl, authorizationServers: [issuer.issuer], ...auth },
  }).auth;
}

function server(t: Tap, issuer: Trust = shared, auth: Record<string, unknown> = {}, metrics?: ReturnType<typeof createMetrics>): ResourceServer {
  const rs = createResourceServer(authConfig(issuer, auth), { publicUrl: PUBLIC_URL, mcpPath: '/mcp', ...(metrics ? { metrics } : {}) });
  t.teardown(() => rs.close());
  return rs;
}

async function freshIssuer(t: Tap): Promise<TestIssuer> {
  const issuer = await startTestIssuer();
  t.teardown(() => issuer.close());
  return issuer;
}

const bearer = (token: string) => `Bearer ${token}`;

function refused(outcome: AuthOutcome): Extract<AuthOutcome, { ok: false }> {
  if (outcome.ok) throw new Error(`expected a refusal, got principal ${outcome.principal}`);
  return outcome;
}

function invalidToken(t: Tap, outcome: AuthOutcome, reason: string): void {
  const refusal = refused(outcome);
  t.equal(refusal.status, 401, 'status 401');
  t.equal(refusal.reason, reason, 'reason');
  t.match(refusal.wwwAuthenticate, /^Bearer error="invalid_token", (error_description="[^"]*", )?resource_metadata="([^"]*)"$/, 'invalid_token challenge');
  t.ok(refusal.wwwAuthenticate.endsWith(`resource_metadata="${PRM}"`), 'points at the PRM');
}

// --- the four refusals from a bare client (SPEC §9) ---

t.test('no token: 401 pointing at the protected resource metadata, no error code', async (t) => {
  const outcome = refused(await server(t).authenticate(undefined, {}));
  t.equal(outcome.status, 401);
  t.equal(outcome.reason, 'missing_token');
  t.equal(outcome.wwwAuthenticate, `Bearer resource_metadata="${PRM}"`);
});

t.test('expired token: 401 invalid_token', async (t) => {
  const token = await userToken('alice');
  const rs = server(t, trustProvider(provider));
  t.equal((await rs.authenticate(bearer(token), {})).ok, true, 'accepted while fresh (control)');
  travel(t, (decodeJwt(token).exp as number) * 1000 + 31_000 - Date.now());
  invalidToken(t, await rs.authenticate(bearer(token), {}), 'expired');
});

t.test('token issued for another audience: 401 invalid_token although the signature verifies', async (t) => {
  const token = await userToken('alice', 'mcp:use', 'https://analytics.example.test/mcp');
  invalidToken(t, await server(t, trustProvider(provider)).authenticate(bearer(token), {}), 'wrong_audience');
});

t.test('valid token without the needed scope: 403 insufficient_scope naming every scope the request needs', async (t) => {
  const rs = server(t, trustProvider(provider), { requiredScopes: ['mcp:use'], toolScopes: { delete_file: ['files:write'] } });
  const token = await userToken('alice', 'mcp:use files:read');
  const outcome = refused(await rs.authenticate(bearer(token), { tools: ['delete_file'] }));
  t.equal(outcome.status, 403);
  t.equal(outcome.reason, 'insufficient_scope');
  t.equal(outcome.wwwAuthenticate, `Bearer error="insufficient_scope", scope="mcp:use files:write", resource_metadata="${PRM}"`);
});

// --- the real provider's tokens ---

t.test("a real provider's tokens: authorization code is sub:<user>, client credentials (sub = client_id) client:<client_id>, scopes from its scope claim", async (t) => {
  const rs = server(t, trustProvider(provider));
  const user = await userToken('alice', 'mcp:use files:write');
  t.same(await rs.authenticate(bearer(user), {}), { ok: true, principal: 'sub:alice', scopes: new Set(['mcp:use', 'files:write']) }, 'authorization code with PKCE');
  const service = await provider.tokenFor({ clientId: 'reporting-service', scope: 'mcp:use', resource: PUBLIC_URL });
  t.match(decodeJwt(service), { sub: 'reporting-service', client_id: 'reporting-service' }, 'oidc-provider writes the client id as sub (RFC 9068 §2.2)');
  t.same(await rs.authenticate(bearer(service), {}), { ok: true, principal: 'client:reporting-service', scopes: new Set(['mcp:use']) }, 'client credentials');
});

// --- signature and algorithm ---

t.test('a valid RS256 token and a valid ES256 token are accepted', async (t) => {
  const rs = server(t);
  for (const alg of ['RS256', 'ES256'] as const) {
    const outcome = await rs.authenticate(bearer(await shared.mint({ alg, sub: `user-${alg}`, aud: PUBLIC_URL })), {});
    t.same(outcome, { ok: true, principal: `sub:user-${alg}`, scopes: new Set() }, alg);
  }
});

t.test('aud as an array containing this resource is accepted', async (t) => {
  const token = await shared.mint({ sub: 'alice', aud: ['https://other.example.test/', PUBLIC_URL] });
  t.equal((await server(t).authenticate(bearer(token), {})).ok, true);
});

t.test('alg none is refused without touching the JWKS', async (t) => {
  const issuer = await freshIssuer(t);
  const rs = server(t, issuer);
  invalidToken(t, await rs.authenticate(bearer(issuer.mintUnsigned({ sub: 'mallory', aud: PUBLIC_URL })), {}), 'bad_alg');
  t.equal(issuer.jwksFetches, 0);
});

t.test('HS256 with a guessed secret, or with the RSA public key as the secret, is refused as bad_alg', async (t) => {
  const rs = server(t);
  invalidToken(t, await rs.authenticate(bearer(await shared.mintHmac('secret', { sub: 'mallory', aud: PUBLIC_URL })), {}), 'bad_alg');
  const pem = await shared.publicKeyPem();
  invalidToken(t, await rs.authenticate(bearer(await shared.mintHmac(pem, { sub: 'mallory', aud: PUBLIC_URL })), {}), 'bad_alg');
});

t.test('an algorithm outside the configured allow-list is refused even with a valid signature', async (t) => {
  const rs = server(t, shared, { algorithms: ['RS256'] });
  invalidToken(t, await rs.authenticate(bearer(await shared.mint({ alg: 'ES256', sub: 'alice', aud: PUBLIC_URL })), {}), 'bad_alg');
});

t.test('a token signed by a key outside the JWKS under a published kid fails the signature check', async (t) => {
  const token = await shared.mint({ foreignKey: true, kid: shared.kids.RS256, sub: 'mallory', aud: PUBLIC_URL });
  invalidToken(t, await server(t).authenticate(bearer(token), {}), 'invalid_token');
});

t.test('a tampered payload fails the signature check', async (t) => {
  const token = await shared.mint({ sub: 'alice', aud: PUBLIC_URL });
  const [header, , signature] = token.split('.');
  const payload = Buffer.from(JSON.stringify({ sub: 'root', aud: PUBLIC_URL, iss: shared.issuer, exp: nowSeconds() + 300 })).toString('base64url');
  invalidToken(t, await server(t).authenticate(bearer(`${header}.${payload}.${signature}`), {}), 'invalid_token');
});

t.test('a token without exp is refused', async (t) => {
  const token = await shared.mint({ sub: 'alice', aud: PUBLIC_URL, expSeconds: null });
  invalidToken(t, await server(t).authenticate(bearer(token), {}), 'invalid_token');
});

// --- JWKS fetching ---

t.test('unknown kid: one refetch after the cooldown finds the rotated key; another unknown kid within 30 s does not refetch', async (t) => {
  const issuer = await startOidcIssuer();
  t.teardown(() => issuer.close());
  const rs = server(t, trustProvider(issuer));
  const first = await userToken('alice', 'mcp:use', PUBLIC_URL, issuer);
  t.equal((await rs.authenticate(bearer(first), {})).ok, true);
  t.equal(issuer.jwksFetches, 1, 'first use fetches the JWKS');

  await issuer.rotateKeys();
  const rotated = await userToken('bob', 'mcp:use', PUBLIC_URL, issuer);
  t.not(decodeProtectedHeader(rotated).kid, decodeProtectedHeader(first).kid, 'the provider signs with its new key');
  invalidToken(t, await rs.authenticate(bearer(rotated), {}), 'invalid_token');
  t.equal(issuer.jwksFetches, 1, 'an unknown kid right after a fetch does not refetch');

  travel(t, 31_000);
  const outcome = await rs.authenticate(bearer(rotated), {});
  t.equal(outcome.ok && outcome.principal, 'sub:bob', 'the rotated key verifies after one refetch');
  t.equal(issuer.jwksFetches, 2);

  // A key no provider ever published: hand-written (the real provider signs only with its own keys).
  const unknown = await shared.mint({ iss: issuer.issuer, foreignKey: true, kid: 'never-published', sub: 'mallory', aud: PUBLIC_URL });
  invalidToken(t, await rs.authenticate(bearer(unknown), {}), 'invalid_token');
  invalidToken(t, await rs.authenticate(bearer(unknown), {}), 'invalid_token');
  t.equal(issuer.jwksFetches, 2, 'a second unknown kid within 30 s does not refetch');
});

t.test('a token without kid verifies while two keys of its type are published (mid-rotation)', async (t) => {
  const issuer = await freshIssuer(t);
  const rs = server(t, issuer);
  const old = await issuer.mint({ sub: 'alice', aud: PUBLIC_URL, kid: null });
  await issuer.rotate();
  const fresh = await issuer.mint({ sub: 'bob', aud: PUBLIC_URL, kid: null });
  t.equal((await rs.authenticate(bearer(old), {})).ok, true, 'signed with the previous key');
  t.equal((await rs.authenticate(bearer(fresh), {})).ok, true, 'signed with the current key');
});

t.test('the JWKS is refetched when older than 10 minutes', async (t) => {
  const issuer = await freshIssuer(t);
  const rs = server(t, issuer);
  t.equal((await rs.authenticate(bearer(await issuer.mint({ sub: 'a', aud: PUBLIC_URL })), {})).ok, true);
  travel(t, 11 * 60_000);
  t.equal((await rs.authenticate(bearer(await issuer.mint({ sub: 'b', aud: PUBLIC_URL })), {})).ok, true);
  t.equal(issuer.jwksFetches, 2);
});

t.test('JWKS endpoint down: fail closed with jwks_unavailable, and recover as soon as it is back', async (t) => {
  const issuer = await freshIssuer(t);
  const metrics = createMetrics(async () => 0);
  const rs = server(t, issuer, {}, metrics);
  const token = await issuer.mint({ sub: 'alice', aud: PUBLIC_URL });
  for (const availability of ['error', 'refuse'] as const) {
    issuer.setAvailability(availability);
    invalidToken(t, await rs.authenticate(bearer(token), {}), 'jwks_unavailable');
  }
  const counted = (await metrics.authFailures.get()).values.find((v) => v.labels.reason === 'jwks_unavailable');
  t.equal(counted?.value, 2, 'counted in tollbooth_auth_failures_total{reason="jwks_unavailable"}');
  issuer.setAvailability('up');
  t.equal((await rs.authenticate(bearer(token), {})).ok, true, 'the failure was not cached');
});

t.test('a JWKS fetched before the outage keeps verifying while it is fresh', async (t) => {
  const issuer = await freshIssuer(t);
  const rs = server(t, issuer);
  t.equal((await rs.authenticate(bearer(await issuer.mint({ sub: 'a', aud: PUBLIC_URL })), {})).ok, true);
  issuer.setAvailability('refuse');
  t.equal((await rs.authenticate(bearer(await issuer.mint({ sub: 'b', aud: PUBLIC_URL })), {})).ok, true);
  travel(t, 11 * 60_000);
  invalidToken(t, await rs.authenticate(bearer(await issuer.mint({ sub: 'c', aud: PUBLIC_URL })), {}), 'jwks_unavailable');
});

// --- claims ---

t.test('wrong issuer is refused, compared as an exact string', async (t) => {
  const rs = server(t);
  invalidToken(t, await rs.authenticate(bearer(await shared.mint({ sub: 'a', aud: PUBLIC_URL, iss: 'https://evil.example.test/' })), {}), 'wrong_issuer');
  const noSlash = shared.issuer.replace(/\/$/, '');
  invalidToken(t, await rs.authenticate(bearer(await shared.mint({ sub: 'a', aud: PUBLIC_URL, iss: noSlash })), {}), 'wrong_issuer');
});

t.test('nbf more than 30 s in the future is refused', async (t) => {
  const token = await shared.mint({ sub: 'a', aud: PUBLIC_URL, nbf: nowSeconds() + 90 });
  invalidToken(t, await server(t).authenticate(bearer(token), {}), 'invalid_token');
});

t.test('clock skew within 30 s is accepted: nbf 20 s ahead, exp 20 s behind', async (t) => {
  const rs = server(t);
  t.equal((await rs.authenticate(bearer(await shared.mint({ sub: 'a', aud: PUBLIC_URL, nbf: nowSeconds() + 20 })), {})).ok, true, 'nbf');
  const justExpired = await shared.mint({ sub: 'b', aud: PUBLIC_URL, now: nowSeconds() - 320, expSeconds: 300 });
  t.equal((await rs.authenticate(bearer(justExpired), {})).ok, true, 'exp');
});

t.test('the principal is sub:<sub>, else client:<client_id>, else the token is refused (SPEC §20)', async (t) => {
  const rs = server(t);
  const both = await rs.authenticate(bearer(await shared.mint({ sub: 'alice', client_id: 'app-1', aud: PUBLIC_URL })), {});
  t.equal(both.ok && both.principal, 'sub:alice');
  const clientOnly = await rs.authenticate(bearer(await shared.mint({ client_id: 'app-1', aud: PUBLIC_URL })), {});
  t.equal(clientOnly.ok && clientOnly.principal, 'client:app-1');
  const sameValue = await rs.authenticate(bearer(await shared.mint({ client_id: 'alice', aud: PUBLIC_URL })), {});
  t.equal(sameValue.ok && sameValue.principal, 'client:alice', 'a client id equal to a sub is still another principal');
  invalidToken(t, await rs.authenticate(bearer(await shared.mint({ aud: PUBLIC_URL })), {}), 'invalid_token');
  invalidToken(t, await rs.authenticate(bearer(await shared.mint({ sub: '', aud: PUBLIC_URL })), {}), 'invalid_token');
});

t.test('a sub that is present but not a non-empty string is refused, never replaced by client_id', async (t) => {
  const rs = server(t);
  invalidToken(t, await rs.authenticate(bearer(await shared.mint({ sub: '', client_id: 'app-1', aud: PUBLIC_URL })), {}), 'invalid_token');
  invalidToken(t, await rs.authenticate(bearer(await shared.mint({ client_id: 'app-1', aud: PUBLIC_URL, claims: { sub: 42 as unknown as string } })), {}), 'invalid_token');
  invalidToken(t, await rs.authenticate(bearer(await shared.mint({ aud: PUBLIC_URL, claims: { client_id: 7 } })), {}), 'invalid_token');
});

t.test("a batch needs requiredScopes and every called tool's scopes; the 403 names that whole set (SPEC §20)", async (t) => {
  const rs = server(t, shared, { requiredScopes: ['mcp:use'], toolScopes: { delete_file: ['files:write'], fetch: ['net:fetch', 'mcp:use'] } });
  const full = `Bearer error="insufficient_scope", scope="mcp:use files:write net:fetch", resource_metadata="${PRM}"`;
  for (const scope of ['mcp:use', 'mcp:use files:write', 'mcp:use net:fetch', 'files:write net:fetch']) {
    const token = await shared.mint({ sub: 'a', aud: PUBLIC_URL, scope });
    t.equal(refused(await rs.authenticate(bearer(token), { tools: ['delete_file', 'echo', 'fetch'] })).wwwAuthenticate, full, `holding ${scope}`);
  }
  const all = await shared.mint({ sub: 'a', aud: PUBLIC_URL, scope: 'mcp:use files:write net:fetch' });
  t.equal((await rs.authenticate(bearer(all), { tools: ['delete_file', 'echo', 'fetch'] })).ok, true, 'every scope held: passes');
  t.equal((await rs.authenticate(bearer(all), { tools: ['constructor', '__proto__', 'toString'] })).ok, true, 'hostile tool names need nothing extra');
});

// --- scopes ---

t.test('scopes come from a space-separated scope string or an scp array', async (t) => {
  const rs = server(t);
  const fromScope = await rs.authenticate(bearer(await shared.mint({ sub: 'a', aud: PUBLIC_URL, scope: ' mcp:use  files:read ' })), {});
  t.same(fromScope.ok && [...fromScope.scopes].sort(), ['files:read', 'mcp:use']);
  const fromScp = await rs.authenticate(bearer(await shared.mint({ sub: 'a', aud: PUBLIC_URL, scp: ['mcp:use', 'files:write'] })), {});
  t.same(fromScp.ok && [...fromScp.scopes].sort(), ['files:write', 'mcp:use']);
});

t.test('requiredScopes apply to every request', async (t) => {
  const rs = server(t, shared, { requiredScopes: ['mcp:use'] });
  const outcome = refused(await rs.authenticate(bearer(await shared.mint({ sub: 'a', aud: PUBLIC_URL })), {}));
  t.equal(outcome.wwwAuthenticate, `Bearer error="insufficient_scope", scope="mcp:use", resource_metadata="${PRM}"`);
  t.equal((await rs.authenticate(bearer(await shared.mint({ sub: 'a', aud: PUBLIC_URL, scope: 'mcp:use' })), {})).ok, true);
});

t.test('toolScopes apply to their tool only', async (t) => {
  const rs = server(t, shared, { toolScopes: { delete_file: ['files:write'] } });
  const token = await shared.mint({ sub: 'a', aud: PUBLIC_URL, scope: 'files:read' });
  t.equal((await rs.authenticate(bearer(token), { tools: ['read_file'] })).ok, true, 'another tool');
  t.equal((await rs.authenticate(bearer(token), {})).ok, true, 'not a tools/call');
  const outcome = refused(await rs.authenticate(bearer(token), { tools: ['delete_file'] }));
  t.equal(outcome.wwwAuthenticate, `Bearer error="insufficient_scope", scope="files:write", resource_metadata="${PRM}"`);
  t.equal((await rs.authenticate(bearer(await shared.mint({ sub: 'a', aud: PUBLIC_URL, scp: ['files:write'] })), { tools: ['delete_file'] })).ok, true);
  t.equal((await rs.authenticate(bearer(token), { tools: ['__proto__'] })).ok, true, 'a hostile tool name needs nothing extra');
});

// --- the Authorization header ---

t.test('the Bearer scheme is case-insensitive', async (t) => {
  const token = await shared.mint({ sub: 'a', aud: PUBLIC_URL });
  t.equal((await server(t).authenticate(`bEaReR ${token}`, {})).ok, true);
});

t.test('another scheme counts as no token; two tokens, no token after Bearer or junk is invalid_token', async (t) => {
  const rs = server(t);
  const token = await shared.mint({ sub: 'a', aud: PUBLIC_URL });
  for (const header of ['', '   ', `Basic ${Buffer.from('a:b').toString('base64')}`, `DPoP ${token}`, token]) {
    const outcome = refused(await rs.authenticate(header, {}));
    t.equal(outcome.wwwAuthenticate, `Bearer resource_metadata="${PRM}"`, `missing: ${JSON.stringify(header.slice(0, 12))}`);
  }
  for (const header of ['Bearer', 'Bearer ', `Bearer ${token} ${token}`, `Bearer ${token}, Bearer ${token}`, 'Bearer not"a"token', `Bearer ${'a'.repeat(20_000)}`, 'Bearer abc']) {
    invalidToken(t, await rs.authenticate(header, {}), 'invalid_token');
  }
});

t.test('no refusal echoes the token', async (t) => {
  const rs = server(t, shared, { requiredScopes: ['mcp:use'] });
  const tokens = [
    await shared.mint({ sub: 'a', aud: PUBLIC_URL }),
    await shared.mint({ sub: 'a', aud: 'https://elsewhere.test/' }),
    await shared.mint({ sub: 'a', aud: PUBLIC_URL, now: nowSeconds() - 900 }),
  ];
  for (const token of tokens) {
    const outcome = refused(await rs.authenticate(bearer(token), {}));
    const text = JSON.stringify(outcome);
    t.notOk(text.includes(token.split('.')[2] as string) || text.includes(token.split('.')[1] as string), outcome.reason);
  }
});

t.test('every refusal is counted by reason', async (t) => {
  const metrics = createMetrics(async () => 0);
  const rs = server(t, shared, { requiredScopes: ['mcp:use'] }, metrics);
  await rs.authenticate(undefined, {});
  await rs.authenticate(bearer(await shared.mint({ sub: 'a', aud: 'https://elsewhere.test/' })), {});
  await rs.authenticate(bearer(await shared.mint({ sub: 'a', aud: PUBLIC_URL })), {});
  await rs.authenticate(bearer(await shared.mint({ sub: 'a', aud: PUBLIC_URL, scope: 'mcp:use' })), {});
  const counts = Object.fromEntries((await metrics.authFailures.get()).values.map((v) => [v.labels.reason, v.value]));
  t.same(counts, { missing_token: 1, wrong_audience: 1, insufficient_scope: 1 });
});

// --- the verified-token cache ---

t.test('a cached token is not verified again', async (t) => {
  const rs = server(t, shared, { toolScopes: { delete_file: ['files:write'] } });
  const token = await shared.mint({ sub: 'alice', aud: PUBLIC_URL, scope: 'files:read' });
  for (let i = 0; i < 5; i++) t.equal((await rs.authenticate(bearer(token), {})).ok, true);
  t.match(rs.stats(), { verifications: 1, cacheHits: 4, cacheSize: 1 });
  t.equal(refused(await rs.authenticate(bearer(token), { tools: ['delete_file'] })).reason, 'insufficient_scope', 'scopes are still checked on a hit');
  t.equal(rs.stats().verifications, 1);
});

t.test('concurrent first uses of one token share one verification', async (t) => {
  const rs = server(t);
  const token = await shared.mint({ sub: 'alice', aud: PUBLIC_URL });
  const outcomes = await Promise.all(Array.from({ length: 20 }, () => rs.authenticate(bearer(token), {})));
  t.ok(outcomes.every((o) => o.ok));
  t.equal(rs.stats().verifications, 1);
});

t.test('a cached token is refused once it expires', async (t) => {
  const rs = server(t);
  const token = await shared.mint({ sub: 'alice', aud: PUBLIC_URL, expSeconds: 60 });
  t.equal((await rs.authenticate(bearer(token), {})).ok, true);
  travel(t, 70_000);
  t.equal((await rs.authenticate(bearer(token), {})).ok, true, 'within the 30 s tolerance, verified again');
  t.equal(rs.stats().verifications, 2, 'the cache entry ended at exp');
  travel(t, 30_000);
  invalidToken(t, await rs.authenticate(bearer(token), {}), 'expired');
});

t.test('cache entries live at most 5 minutes even for long-lived tokens', async (t) => {
  const rs = server(t);
  const token = await shared.mint({ sub: 'alice', aud: PUBLIC_URL, expSeconds: 3600 });
  await rs.authenticate(bearer(token), {});
  travel(t, 4 * 60_000);
  await rs.authenticate(bearer(token), {});
  t.equal(rs.stats().verifications, 1, 'hit at 4 minutes');
  travel(t, 2 * 60_000);
  t.equal((await rs.authenticate(bearer(token), {})).ok, true);
  t.equal(rs.stats().verifications, 2, 'verified again at 6 minutes');
});

t.test('failures are not cached', async (t) => {
  const rs = server(t);
  const token = await shared.mint({ sub: 'alice', aud: 'https://elsewhere.test/' });
  await rs.authenticate(bearer(token), {});
  await rs.authenticate(bearer(token), {});
  t.match(rs.stats(), { verifications: 2, cacheHits: 0, cacheSize: 0 });
});

t.test('an injected clock drives the exp check', async (t) => {
  const rs = createResourceServer(authConfig(shared), { publicUrl: PUBLIC_URL, mcpPath: '/mcp', clock: () => Date.now() + 10 * 60_000 });
  t.teardown(() => rs.close());
  invalidToken(t, await rs.authenticate(bearer(await shared.mint({ sub: 'a', aud: PUBLIC_URL, expSeconds: 300 })), {}), 'expired');
});
