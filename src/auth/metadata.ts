// OAuth 2.0 Protected Resource Metadata (RFC 9728) for the MCP endpoint (SPEC §4, §9). Clients that
// get a 401 follow `resource_metadata` to this document to learn which authorization server to ask
// and which scopes exist. Pure functions of the config: the gateway computes them once at start.
// Also the one writer of `WWW-Authenticate: Bearer …` challenges (`bearerChallenge`).
import type { GatewayConfig } from '../config/schema.js';

type AuthConfig = GatewayConfig['auth'];

export const PRM_WELL_KNOWN = '/.well-known/oauth-protected-resource';

export interface ProtectedResourceMetadata {
  resource: string;
  authorization_servers: string[];
  scopes_supported: string[];
  bearer_methods_supported: ['header'];
}

/**
 * The path of the resource identifier as RFC 9728 §3.1 inserts it after the well-known prefix:
 * `https://gw.example.com/mcp` → `/mcp`; a bare origin (`https://gw.example.com/`) → `` (the
 * terminating slash after the host is removed).
 */
function pathOf(publicUrl: string): string {
  const { pathname } = new URL(publicUrl);
  return pathname === '/' ? '' : pathname;
}

/** The metadata document served at every path of {@link prmPaths}. */
export function protectedResourceMetadata(auth: AuthConfig, publicUrl: string): ProtectedResourceMetadata {
  // A PRM without an authorization server is useless to a client; the issuer is the natural one.
  const authorizationServers = auth.authorizationServers.length > 0 ? auth.authorizationServers : auth.issuer ? [auth.issuer] : [];
  const scopes = new Set(auth.requiredScopes);
  for (const toolScopes of Object.values(auth.toolScopes)) for (const scope of toolScopes) scopes.add(scope);
  return {
    resource: publicUrl,
    authorization_servers: [...authorizationServers],
    scopes_supported: [...scopes],
    bearer_methods_supported: ['header'],
  };
}

/**
 * The paths the gateway serves the metadata on: the RFC 9728 path-inserted one first, then the bare
 * well-known path for clients that only try the root. One entry when publicUrl has no path.
 * (Routing ignores query strings, so a publicUrl query is not part of a path.)
 */
export function prmPaths(publicUrl: string): string[] {
  const inserted = PRM_WELL_KNOWN + pathOf(publicUrl);
  return inserted === PRM_WELL_KNOWN ? [PRM_WELL_KNOWN] : [inserted, PRM_WELL_KNOWN];
}

/** The absolute metadata URL advertised in `WWW-Authenticate: Bearer resource_metadata="…"`. */
export function prmUrl(publicUrl: string): string {
  const url = new URL(publicUrl);
  return url.origin + PRM_WELL_KNOWN + pathOf(publicUrl) + url.search;
}

/**
 * `Bearer name="value", …` (RFC 6750 §3), each value a quoted-string (RFC 9110 §5.6.4): `"` and `\`
 * are escaped, and any character a header value cannot carry (CR, LF, other controls, non-ASCII) is
 * dropped. So whatever a value holds, it stays one parameter and the header stays one valid line.
 * Config validation already limits scopes to RFC 6749 scope-tokens (SPEC §20); this is the second line.
 */
export function bearerChallenge(params: Record<string, string>): string {
  const parts = Object.entries(params).map(([name, value]) => `${name}="${quotedStringContent(value)}"`);
  return `Bearer ${parts.join(', ')}`;
}

function quotedStringContent(value: string): string {
  return value.replace(/[^\t\x20-\x7E]/g, '').replace(/["\\]/g, (c) => `\\${c}`);
}
