// RFC 9728 protected resource metadata: the document, where it is served, and the URL advertised.
import t from 'tap';
import { configSchema, type GatewayConfig } from '../../src/config/schema.js';
import { bearerChallenge, prmPaths, prmUrl, protectedResourceMetadata } from '../../src/auth/metadata.js';

function authConfig(publicUrl: string, auth: Record<string, unknown> = {}): GatewayConfig['auth'] {
  return configSchema.parse({
    server: { publicUrl },
    upstream: { url: 'http://127.0.0.1:1/mcp' },
    auth: { mode: 'oauth', issuer: 'https://id.example.test/', jwksUrl: 'https://id.example.test/jwks', ...auth },
  }).auth;
}

t.test('the document names the resource, its authorization servers, every scope once and header bearer use', async (t) => {
  const publicUrl = 'https://gw.example.test/mcp';
  const auth = authConfig(publicUrl, {
    authorizationServers: ['https://as.example.test/'],
    requiredScopes: ['mcp:use'],
    toolScopes: { delete_file: ['files:write', 'mcp:use'], read_file: ['files:read'], write_file: ['files:write'] },
  });
  t.same(protectedResourceMetadata(auth, publicUrl), {
    resource: publicUrl,
    authorization_servers: ['https://as.example.test/'],
    scopes_supported: ['mcp:use', 'files:write', 'files:read'],
    bearer_methods_supported: ['header'],
  });
});

t.test('without configured authorization servers the issuer is named', async (t) => {
  const publicUrl = 'https://gw.example.test/mcp';
  t.same(protectedResourceMetadata(authConfig(publicUrl), publicUrl).authorization_servers, ['https://id.example.test/']);
});

t.test('no scopes configured: scopes_supported is empty', async (t) => {
  const publicUrl = 'https://gw.example.test/mcp';
  t.same(protectedResourceMetadata(authConfig(publicUrl), publicUrl).scopes_supported, []);
});

t.test('the metadata URL inserts the well-known path between origin and path (RFC 9728 §3.1)', async (t) => {
  t.equal(prmUrl('https://gw.example.test/mcp'), 'https://gw.example.test/.well-known/oauth-protected-resource/mcp');
  t.equal(prmUrl('http://127.0.0.1:8080/mcp'), 'http://127.0.0.1:8080/.well-known/oauth-protected-resource/mcp');
  t.equal(prmUrl('https://gw.example.test/tenants/a/mcp'), 'https://gw.example.test/.well-known/oauth-protected-resource/tenants/a/mcp');
  t.equal(prmUrl('https://gw.example.test/'), 'https://gw.example.test/.well-known/oauth-protected-resource', 'a bare origin loses its slash');
  t.equal(prmUrl('https://gw.example.test'), 'https://gw.example.test/.well-known/oauth-protected-resource');
  t.equal(prmUrl('https://GW.example.test:443/mcp'), 'https://gw.example.test/.well-known/oauth-protected-resource/mcp', 'origin normalised');
});

t.test('the metadata is served on the path-inserted and the bare well-known path', async (t) => {
  t.same(prmPaths('https://gw.example.test/mcp'), ['/.well-known/oauth-protected-resource/mcp', '/.well-known/oauth-protected-resource']);
  t.same(prmPaths('https://gw.example.test/'), ['/.well-known/oauth-protected-resource']);
});

t.test('the advertised URL is one of the served paths', async (t) => {
  for (const publicUrl of ['https://gw.example.test/mcp', 'https://gw.example.test/', 'http://127.0.0.1:9/a/b']) {
    t.ok(prmPaths(publicUrl).includes(new URL(prmUrl(publicUrl)).pathname), publicUrl);
  }
});

// SPEC §20: WWW-Authenticate is built safely, whatever a value holds.
t.test('bearerChallenge quotes each value: a quote or backslash is escaped and cannot start another parameter', async (t) => {
  const header = bearerChallenge({ error: 'insufficient_scope', scope: 'a"b c\\d', resource_metadata: 'https://gw.example.test/.well-known/oauth-protected-resource/mcp' });
  t.equal(header, 'Bearer error="insufficient_scope", scope="a\\"b c\\\\d", resource_metadata="https://gw.example.test/.well-known/oauth-protected-resource/mcp"');
  t.same(parseChallengeParams(header), { error: 'insufficient_scope', scope: 'a"b c\\d', resource_metadata: 'https://gw.example.test/.well-known/oauth-protected-resource/mcp' }, 'exactly three parameters');
});

t.test('bearerChallenge drops CR, LF and every other character a header value cannot carry', async (t) => {
  const header = bearerChallenge({ scope: 'x\r\nSet-Cookie: a=b\u0000\u00e9', resource_metadata: 'https://gw/' });
  // eslint-disable-next-line no-control-regex -- asserts that no NUL (or CR, LF) reaches the header
  t.notMatch(header, /[\r\n\u0000\u00e9]/);
  t.equal(header, 'Bearer scope="xSet-Cookie: a=b", resource_metadata="https://gw/"');
});

/** The auth-params of one challenge, quoted-string escapes undone (RFC 9110 §11.2). */
function parseChallengeParams(header: string): Record<string, string> {
  const params: Record<string, string> = {};
  for (const match of header.replace(/^Bearer /, '').matchAll(/([A-Za-z_]+)="((?:[^"\\]|\\.)*)"(?:, |$)/g)) {
    params[match[1] as string] = (match[2] as string).replace(/\\(.)/g, '$1');
  }
  return params;
}
