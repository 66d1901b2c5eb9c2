// Origin and Host checks on the MCP endpoint (SPEC §5.2): nothing else runs for a request from a foreign
// browser origin or an unexpected Host (DNS-rebinding guard). The check runs in an onRequest hook of the
// MCP endpoint's own routes (http/mcp-endpoint.ts), so it applies to whatever the router matched as
// the endpoint — `/%6Dcp` and `/mcp?x` included — and never to anything else (`/mcp/`, `//mcp`,
// `/MCP`, `/mcp;x` are not the endpoint: 404). It never looks at the raw URL.
import { GatewayError } from '../errors.js';

export interface GuardSettings {
  publicUrl: string;
  allowedOrigins: string[];
  allowedHosts: string[];
}

export type RequestGuard = (headers: { origin?: string | undefined; host?: string | undefined }) => GatewayError | null;

export function createRequestGuard(settings: GuardSettings): RequestGuard {
  const origins = new Set([new URL(settings.publicUrl).origin, ...settings.allowedOrigins.map(normaliseOrigin)]);
  const hosts = new Set(settings.allowedHosts.map((h) => h.toLowerCase()));
  return (headers) => {
    const origin = headers.origin;
    if (origin !== undefined && !origins.has(normaliseOrigin(origin))) {
      return new GatewayError('TB_ERR_ORIGIN_FORBIDDEN', 'Forbidden: this Origin is not allowed to use the MCP endpoint');
    }
    if (hosts.size > 0) {
      const host = (headers.host ?? '').toLowerCase();
      if (!hosts.has(host) && !hosts.has(host.replace(/:\d+$/, ''))) return new GatewayError('TB_ERR_HOST_FORBIDDEN', 'Forbidden: this Host is not served here');
    }
    return null;
  };
}

function normaliseOrigin(value: string): string {
  try {
    return new URL(value).origin;
  } catch {
    return value;
  }
}
