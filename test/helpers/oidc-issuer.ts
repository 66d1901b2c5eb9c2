// A real OpenID Provider for the OAuth tests: `oidc-provider` (v9) on node:http at a random 127.0.0.1
// port, issuing RFC 9068 JWT access tokens for a resource indicator (RFC 8707: the gateway's audience).
// Tokens come out of the provider's own grants, so their `sub`, `client_id`, `aud`, `scope`, `iat`/`exp`
// and `kid` are what a real authorization server writes, not what a test wishes for:
//   - client credentials: POST /token (client_secret_basic) → `sub` is the client id (oidc-provider,
//     as RFC 9068 §2.2 recommends), `client_id` the same;
//   - authorization code with PKCE (S256): GET /auth → the provider's interaction (the login is this
//     helper's one-line "form": the subject to sign in) → its resume redirect → POST /token with the
//     code verifier → `sub` is the account, `client_id` the client.
// Clients are registered on first use (any id; secret derived from it) through the provider's adapter,
// the same path a database-backed registry takes. Key rotation restarts the provider with the new key
// first (it signs) and the old one still published, the way an operator rolls keys; `retireOldKeys`
// drops the old one. The provider's state (clients, grants, sessions) lives in the adapter, so it
// survives the restart. The hand-written test/helpers/jwks-issuer.ts remains only for tokens a real
// provider cannot mint (alg none, forged keys, missing claims, a foreign issuer with a valid key).
import { createHash, generateKeyPair, randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { promisify } from 'node:util';
import Provider from 'oidc-provider';

/** The scopes the resource server (every resource this provider issues for) defines. */
const DEFAULT_RESOURCE_SCOPES = ['mcp:use', 'research:pay', 'research:costly', 'files:read', 'files:write', 'admin', 'profile', 'other'];
const REDIRECT_URI = 'http://127.0.0.1/callback';
const ACCESS_TOKEN_TTL_S = 300;

export interface TokenRequest {
  clientId: string;
  /** space-separated; every scope must be one the resource server defines */
  scope: string;
  /** the resource indicator: the token's `aud` (the gateway's publicUrl, or its `auth.audience`) */
  resource: string;
  /** present: authorization code with PKCE, signed in as this subject; absent: client credentials */
  sub?: string;
}

/** `up` serves the provider; `error` answers 503 on the JWKS URL (the rest keeps working). */
export type JwksAvailability = 'up' | 'error';

export interface OidcIssuer {
  /** the provider's issuer identifier, `http://127.0.0.1:<port>` (the tokens' `iss`) */
  issuer: string;
  /** the `jwks_uri` the provider's discovery document advertises */
  jwksUri: string;
  /** how many times the JWKS was requested */
  readonly jwksFetches: number;
  /** the kids the JWKS serves now; the first signs */
  readonly kids: readonly string[];
  tokenFor(request: TokenRequest): Promise<string>;
  /** a new signing key (it signs from now on); the previous keys stay in the JWKS */
  rotateKeys(): Promise<void>;
  /** the JWKS serves only the current signing key */
  retireOldKeys(): Promise<void>;
  setAvailability(availability: JwksAvailability): void;
  close(): Promise<void>;
}

export interface OidcIssuerOptions {
  /** the scopes the resource server defines (default: every scope the suite uses) */
  resourceScopes?: string[];
}

type Stored = Record<string, unknown>;

/**
 * The provider's storage (its documented adapter interface), one map per model, outliving provider
 * restarts. Expiry is the provider's business: it checks `exp` on everything it reads.
 */
function memoryAdapter(store: Map<string, Map<string, Stored>>) {
  return class MapAdapter {
    readonly #models: Map<string, Stored>;
    constructor(name: string) {
      let models = store.get(name);
      if (models === undefined) store.set(name, (models = new Map()));
      this.#models = models;
    }
    async upsert(id: string, payload: Stored) {
      this.#models.set(id, payload);
    }
    async find(id: string) {
      return this.#models.get(id);
    }
    async findByUid(uid: string) {
      for (const payload of this.#models.values()) if (payload.uid === uid) return payload;
      return undefined;
    }
    async findByUserCode(userCode: string) {
      for (const payload of this.#models.values()) if (payload.userCode === userCode) return payload;
      return undefined;
    }
    async consume(id: string) {
      const payload = this.#models.get(id);
      if (payload) payload.consumed = Math.floor(Date.now() / 1000);
    }
    async destroy(id: string) {
      this.#models.delete(id);
    }
    async revokeByGrantId(grantId: string) {
      for (const [id, payload] of this.#models) if (payload.grantId === grantId) this.#models.delete(id);
    }
  };
}

// Off the event loop: RSA key generation takes tens of milliseconds, and gateways share this process.
const generateRsaKeyPair = promisify(generateKeyPair);

async function newSigningJwk(): Promise<Record<string, unknown>> {
  const { privateKey } = await generateRsaKeyPair('rsa', { modulusLength: 2048 });
  return { ...privateKey.export({ format: 'jwk' }), use: 'sig', alg: 'RS256', kid: `rs256-${randomBytes(6).toString('hex')}` };
}

const clientSecret = (clientId: string) => createHash('sha256').update(`secret:${clientId}`).digest('base64url');

/** The cookies a browser would carry through the authorization flow (one origin, names unique per flow). */
class CookieJar {
  readonly #cookies = new Map<string, string>();
  take(response: Response): void {
    for (const line of response.headers.getSetCookie()) {
      const pair = line.split(';', 1)[0] as string;
      const eq = pair.indexOf('=');
      this.#cookies.set(pair.slice(0, eq), pair.slice(eq + 1));
    }
  }
  header(): string {
    return [...this.#cookies].map(([name, value]) => `${name}=${value}`).join('; ');
  }
}

export async function startOidcIssuer(options: OidcIssuerOptions = {}): Promise<OidcIssuer> {
  const resourceScopes = (options.resourceScopes ?? DEFAULT_RESOURCE_SCOPES).join(' ');
  const storage = new Map<string, Map<string, Stored>>();
  const Adapter = memoryAdapter(storage);
  const cookieKeys = [randomBytes(32).toString('base64url')];
  let keys = [await newSigningJwk()];
  let availability: JwksAvailability = 'up';
  let jwksFetches = 0;

  const server: Server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const jwksUri = `${issuer}/jwks`;

  function buildProvider(): Provider {
    const provider = new Provider(issuer, {
      adapter: Adapter,
      jwks: { keys },
      cookies: { keys: cookieKeys },
      features: {
        devInteractions: { enabled: false },
        clientCredentials: { enabled: true },
        resourceIndicators: {
          enabled: true,
          defaultResource: async (_ctx: unknown, _client: unknown, oneOf?: string) => oneOf,
          useGrantedResource: async () => true,
          // Every resource this provider serves defines the same scopes and gets RS256 JWT access tokens.
          getResourceServerInfo: async () => ({ scope: resourceScopes, accessTokenFormat: 'jwt', accessTokenTTL: ACCESS_TOKEN_TTL_S, jwt: { sign: { alg: 'RS256' } } }),
        },
      },
      pkce: { required: () => true },
      // Lifetimes of the provider's own artifacts (access tokens take the resource server's TTL).
      ttl: { ClientCredentials: ACCESS_TOKEN_TTL_S, AccessToken: ACCESS_TOKEN_TTL_S, AuthorizationCode: 60, Interaction: 600, Grant: 600, Session: 600 },
      findAccount: async (_ctx: unknown, sub: string) => ({ accountId: sub, claims: async () => ({ sub }) }),
      interactions: { url: async (_ctx: unknown, interaction: { uid: string }) => `/interaction/${interaction.uid}` },
    });
    // The provider's own errors are asserted through the token requests; keep its console quiet.
    provider.on('server_error', () => undefined);
    return provider;
  }

  let provider = buildProvider();
  let handle = provider.callback();

  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    const path = (req.url ?? '/').split('?')[0] as string;
    if (path === '/jwks') {
      jwksFetches += 1;
      if (availability === 'error') return void res.writeHead(503, { 'content-type': 'text/plain' }).end('down');
    }
    const login = /^\/interaction\/([^/]+)\/login$/.exec(path);
    if (login && req.method === 'POST') return void signIn(req, res).catch((err: unknown) => res.writeHead(500).end(String(err)));
    handle(req, res);
  });

  /**
   * The login step of the interaction: the subject in the form signs in, and a grant for exactly the
   * scopes and resource the client asked for is the consent (what a user clicking "allow" gives).
   */
  async function signIn(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let body = '';
    for await (const chunk of req) body += (chunk as Buffer).toString('utf8');
    const sub = new URLSearchParams(body).get('sub');
    if (!sub) return void res.writeHead(400).end('sub required');
    const details = await provider.interactionDetails(req, res);
    const grant = new provider.Grant({ accountId: sub, clientId: details.params.client_id });
    const resources = [details.params.resource ?? []].flat();
    for (const resource of resources) grant.addResourceScope(resource, details.params.scope ?? '');
    const grantId = await grant.save();
    await provider.interactionFinished(req, res, { login: { accountId: sub }, consent: { grantId } }, { mergeWithLastSubmission: false });
  }

  function register(clientId: string): void {
    let clients = storage.get('Client');
    if (clients === undefined) storage.set('Client', (clients = new Map()));
    if (clients.has(clientId)) return;
    clients.set(clientId, {
      client_id: clientId,
      client_secret: clientSecret(clientId),
      grant_types: ['client_credentials', 'authorization_code'],
      response_types: ['code'],
      redirect_uris: [REDIRECT_URI],
      token_endpoint_auth_method: 'client_secret_basic',
    });
  }

  async function tokenRequest(clientId: string, form: Record<string, string>): Promise<string> {
    const response = await fetch(`${issuer}/token`, {
      method: 'POST',
      headers: {
        'content-type': 'application/x-www-form-urlencoded',
        authorization: `Basic ${Buffer.from(`${encodeURIComponent(clientId)}:${encodeURIComponent(clientSecret(clientId))}`).toString('base64')}`,
      },
      body: new URLSearchParams(form).toString(),
    });
    const json = (await response.json()) as { access_token?: string; error?: string; error_description?: string };
    if (!response.ok || json.access_token === undefined) throw new Error(`token endpoint: HTTP ${response.status} ${json.error ?? ''} ${json.error_description ?? ''}`);
    return json.access_token;
  }

  async function authorizationCode(request: TokenRequest & { sub: string }): Promise<string> {
    const verifier = randomBytes(32).toString('base64url');
    const state = randomBytes(8).toString('base64url');
    const jar = new CookieJar();
    const step = async (url: string, init: RequestInit = {}): Promise<string> => {
      const response = await fetch(new URL(url, issuer), { ...init, redirect: 'manual', headers: { ...(init.headers as Record<string, string>), cookie: jar.header() } });
      jar.take(response);
      await response.arrayBuffer();
      const location = response.headers.get('location');
      if (response.status !== 303 && response.status !== 302) throw new Error(`authorization flow: HTTP ${response.status} at ${url}`);
      if (location === null) throw new Error(`authorization flow: no redirect from ${url}`);
      return location;
    };
    const authorize = new URL(`${issuer}/auth`);
    authorize.search = new URLSearchParams({
      client_id: request.clientId,
      response_type: 'code',
      redirect_uri: REDIRECT_URI,
      scope: request.scope,
      resource: request.resource,
      state,
      code_challenge: createHash('sha256').update(verifier).digest('base64url'),
      code_challenge_method: 'S256',
    }).toString();
    const interaction = await step(authorize.href);
    const resume = await step(`${interaction}/login`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams({ sub: request.sub }).toString() });
    const callback = new URL(await step(resume));
    if (callback.origin + callback.pathname !== REDIRECT_URI || callback.searchParams.get('state') !== state) throw new Error(`authorization flow: unexpected redirect ${callback.origin}${callback.pathname}`);
    const code = callback.searchParams.get('code');
    if (code === null) throw new Error(`authorization flow: ${callback.searchParams.get('error') ?? 'no code'} ${callback.searchParams.get('error_description') ?? ''}`);
    return tokenRequest(request.clientId, { grant_type: 'authorization_code', code, redirect_uri: REDIRECT_URI, code_verifier: verifier, resource: request.resource });
  }

  async function restartWith(next: Record<string, unknown>[]): Promise<void> {
    keys = next;
    provider = buildProvider();
    handle = provider.callback();
  }

  return {
    issuer,
    jwksUri,
    get jwksFetches() {
      return jwksFetches;
    },
    get kids() {
      return keys.map((key) => key.kid as string);
    },
    async tokenFor(request) {
      register(request.clientId);
      if (request.sub === undefined) return tokenRequest(request.clientId, { grant_type: 'client_credentials', scope: request.scope, resource: request.resource });
      return authorizationCode({ ...request, sub: request.sub });
    },
    rotateKeys: async () => restartWith([await newSigningJwk(), ...keys]),
    retireOldKeys: () => restartWith(keys.slice(0, 1)),
    setAvailability(next) {
      availability = next;
    },
    close() {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
