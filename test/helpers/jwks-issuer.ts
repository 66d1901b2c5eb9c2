// ONLY FOR TOKENS A REAL AUTHORIZATION SERVER CANNOT MINT. Valid tokens come from a real OpenID
// Provider, test/helpers/oidc-issuer.ts (oidc-provider: client credentials, authorization code with
// PKCE, its own JWKS and key rotation); use this file only for the malformed or hostile shapes it
// never issues: `alg: none`, HS256 with a guessed secret or the public key, a key outside the JWKS
// under a published or unknown kid, another issuer under a trusted key, no `exp`, no `sub` (RFC 9068
// requires it; the gateway's `client:` principal is for such tokens), neither `sub` nor `client_id`,
// `scp` arrays, no kid mid-rotation, a tampered payload, and the resource server's unit tests of its
// JWKS cache (refused connections, ages). Pick this one and say why in the test.
//
// RS256 and ES256 key pairs generated with jose, the public halves served as a JWKS over node:http on
// a random 127.0.0.1 port, and `mint` for access tokens with any claims. Controls let a test rotate
// keys, take the JWKS endpoint down and count how often it was fetched.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, exportSPKI, generateKeyPair, SignJWT, UnsecuredJWT, type CryptoKey, type JWK, type JWTPayload } from 'jose';

export type SigningAlg = 'RS256' | 'ES256';

interface KeyPair {
  alg: SigningAlg;
  kid: string;
  privateKey: CryptoKey;
  publicKey: CryptoKey;
  jwk: JWK;
}

export interface MintOptions {
  sub?: string;
  client_id?: string;
  aud?: string | string[];
  /** default: the issuer's own URL */
  iss?: string;
  scope?: string;
  scp?: string[];
  /** lifetime from `now`; null = no `exp` claim (default 300) */
  expSeconds?: number | null;
  /** absolute epoch seconds */
  nbf?: number;
  /** epoch seconds the token is minted at (default: Date.now()) */
  now?: number;
  alg?: SigningAlg;
  /** override the header kid; null = no kid at all */
  kid?: string | null;
  /** sign with a freshly generated key that is not (and never was) in the JWKS */
  foreignKey?: boolean;
  claims?: JWTPayload;
}

/** `up` serves the JWKS; `error` answers 503; `refuse` closes every connection without an answer. */
export type JwksAvailability = 'up' | 'error' | 'refuse';

export interface TestIssuer {
  /** `http://127.0.0.1:<port>/` */
  issuer: string;
  jwksUrl: string;
  /** how many times `/.well-known/jwks.json` was requested */
  readonly jwksFetches: number;
  /** current signing keys' kids */
  readonly kids: Record<SigningAlg, string>;
  mint(options?: MintOptions): Promise<string>;
  /** an `alg: none` token carrying the same claims `mint` would */
  mintUnsigned(options?: MintOptions): string;
  /** HS256 over the claims with `secret` (a guessed secret, or the RSA public key PEM) */
  mintHmac(secret: string, options?: MintOptions): Promise<string>;
  /** the RS256 public key as SPKI PEM (for the classic "public key as HMAC secret" attack) */
  publicKeyPem(): Promise<string>;
  /** new key pairs with new kids; the JWKS serves them and the previous generation */
  rotate(): Promise<void>;
  setAvailability(availability: JwksAvailability): void;
  close(): Promise<void>;
}

let kidCounter = 0;

async function newKeyPair(alg: SigningAlg): Promise<KeyPair> {
  const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true });
  const kid = `${alg.toLowerCase()}-${++kidCounter}-${Math.random().toString(36).slice(2, 8)}`;
  const jwk = { ...(await exportJWK(publicKey)), kid, alg, use: 'sig' };
  return { alg, kid, privateKey, publicKey, jwk };
}

async function newGeneration(): Promise<Record<SigningAlg, KeyPair>> {
  return { RS256: await newKeyPair('RS256'), ES256: await newKeyPair('ES256') };
}

export async function startTestIssuer(): Promise<TestIssuer> {
  let current = await newGeneration();
  let previous: Record<SigningAlg, KeyPair> | undefined;
  let availability: JwksAvailability = 'up';
  let jwksFetches = 0;

  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (path === '/.well-known/jwks.json') {
      jwksFetches += 1;
      if (availability === 'refuse') return void req.socket.destroy();
      if (availability === 'error') return void res.writeHead(503, { 'content-type': 'text/plain' }).end('down');
      const keys = [current.RS256.jwk, current.ES256.jwk, ...(previous ? [previous.RS256.jwk, previous.ES256.jwk] : [])];
      return void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys }));
    }
    if (path === '/.well-known/openid-configuration' || path === '/.well-known/oauth-authorization-server') {
      return void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ issuer, jwks_uri: jwksUrl }));
    }
    res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":"not found"}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const issuer = `http://127.0.0.1:${port}/`;
  const jwksUrl = `${issuer}.well-known/jwks.json`;

  function claimsOf(options: MintOptions): JWTPayload {
    const now = options.now ?? Math.floor(Date.now() / 1000);
    const expSeconds = options.expSeconds === undefined ? 300 : options.expSeconds;
    const claims: JWTPayload = { ...options.claims, iss: options.iss ?? issuer, iat: now };
    if (options.aud !== undefined) claims.aud = options.aud;
    if (options.sub !== undefined) claims.sub = options.sub;
    if (options.client_id !== undefined) claims.client_id = options.client_id;
    if (options.scope !== undefined) claims.scope = options.scope;
    if (options.scp !== undefined) claims.scp = options.scp;
    if (expSeconds !== null) claims.exp = now + expSeconds;
    if (options.nbf !== undefined) claims.nbf = options.nbf;
    return claims;
  }

  return {
    issuer,
    jwksUrl,
    get jwksFetches() {
      return jwksFetches;
    },
    get kids() {
      return { RS256: current.RS256.kid, ES256: current.ES256.kid };
    },
    async mint(options = {}) {
      const alg = options.alg ?? 'RS256';
      const pair = options.foreignKey ? await newKeyPair(alg) : current[alg];
      const kid = options.kid === undefined ? pair.kid : options.kid;
      const header = kid === null ? { alg, typ: 'at+jwt' } : { alg, typ: 'at+jwt', kid };
      return new SignJWT(claimsOf(options)).setProtectedHeader(header).sign(pair.privateKey);
    },
    mintUnsigned(options = {}) {
      return new UnsecuredJWT(claimsOf(options)).encode();
    },
    async mintHmac(secret, options = {}) {
      return new SignJWT(claimsOf(options)).setProtectedHeader({ alg: 'HS256', typ: 'at+jwt', kid: current.RS256.kid }).sign(new TextEncoder().encode(secret));
    },
    publicKeyPem() {
      return exportSPKI(current.RS256.publicKey);
    },
    async rotate() {
      previous = current;
      current = await newGeneration();
    },
    setAvailability(next) {
      availability = next;
    },
    close() {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
