// Origin and Host checks on the MCP endpoint (SPEC §5.2), at onRequest: nothing else runs for a
// request from a foreign browser origin or an unexpected Host (DNS-rebinding guard).
import type { FastifyInstance } from 'fastify';
import { errorResponse } from '../mcp/jsonrpc.js';

export interface GuardSettings {
  mcpPath: string;
  publicUrl: string;
  allowedOrigins: string[];
  allowedHosts: string[];
}

export function registerRequestGuards(app: FastifyInstance, settings: GuardSettings): void {
  const origins = new Set([new URL(settings.publicUrl).origin, ...settings.allowedOrigins.map(normaliseOrigin)]);
  const hosts = new Set(settings.allowedHosts.map((h) => h.toLowerCase()));
  app.addHook('onRequest', async (request, reply) => {
    if (request.url.split('?')[0] !== settings.mcpPath) return;
    const origin = request.headers.origin;
    if (origin !== undefined && !origins.has(normaliseOrigin(origin))) {
      return reply.code(403).send(errorResponse(null, -32600, 'Forbidden: this Origin is not allowed to use the MCP endpoint'));
    }
    if (hosts.size > 0) {
      const host = (request.headers.host ?? '').toLowerCase();
      if (!hosts.has(host) && !hosts.has(host.replace(/:\d+$/, ''))) {
        return reply.code(403).send(errorResponse(null, -32600, 'Forbidden: this Host is not served here'));
      }
    }
  });
}

function normaliseOrigin(value: string): string {
  try {
    return new URL(value).origin;
  } catch {
    return value;
  }
}
