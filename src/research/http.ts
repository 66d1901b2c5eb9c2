// Streamable HTTP entrypoint of the research server: POST /mcp, stateless, JSON responses.
// Each request gets a fresh McpServer and transport (no sessions to keep or lose across replicas).
// Run directly: `node dist/research/http.js` (RESEARCH_PORT, default 3001; RESEARCH_HOST, default 127.0.0.1).

import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isEntrypoint } from './main-module.js';
import { createResearchServer } from './server.js';
import type { ResearchDeps } from './tools.js';
import { RPC } from '../errors.js';

export const DEFAULT_RESEARCH_PORT = 3001;
export const DEFAULT_RESEARCH_HOST = '127.0.0.1';

const CLOSE_GRACE_MS = 11_000;
const LOOPBACK_HOSTS = new Set(['127.0.0.1', 'localhost', '::1', '[::1]']);

export interface ResearchHttpOptions {
  port?: number;
  host?: string;
  deps?: ResearchDeps;
}

export interface ResearchHttpServer {
  /** e.g. http://127.0.0.1:3001/mcp */
  url: string;
  close(): Promise<void>;
}

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
}

function hostnameOf(hostHeader: string | undefined): string {
  if (hostHeader === undefined) return '';
  return hostHeader.startsWith('[') ? hostHeader.slice(0, hostHeader.indexOf(']') + 1) : (hostHeader.split(':')[0] ?? '');
}

async function handle(req: IncomingMessage, res: ServerResponse, deps: ResearchDeps, loopbackOnly: boolean): Promise<void> {
  const path = new URL(req.url ?? '/', 'http://research.invalid').pathname;
  if (path === '/healthz') return sendJson(res, 200, { ok: true });
  if (path !== '/mcp') return sendJson(res, 404, { error: 'Not found; the MCP endpoint is /mcp.' });
  // Bound to loopback, a browser page could still reach us through DNS rebinding; its Host header
  // would then name the attacker's domain.
  if (loopbackOnly && !LOOPBACK_HOSTS.has(hostnameOf(req.headers.host))) {
    return sendJson(res, 403, { error: 'Forbidden Host header; this server answers only to localhost.' });
  }
  if (req.method !== 'POST') {
    // Stateless: no standalone SSE stream to GET and no session to DELETE.
    const body = { jsonrpc: '2.0', error: { code: RPC.SERVER_ERROR, message: 'Method not allowed; use POST.' }, id: null };
    return sendJson(res, 405, body, { allow: 'POST' });
  }

  const server = createResearchServer(deps);
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
  res.on('close', () => {
    void transport.close();
    void server.close();
  });
  await server.connect(transport);
  await transport.handleRequest(req, res);
}

export async function startResearchHttp(options: ResearchHttpOptions = {}): Promise<ResearchHttpServer> {
  const host = options.host ?? DEFAULT_RESEARCH_HOST;
  const deps = options.deps ?? {};
  const loopbackOnly = LOOPBACK_HOSTS.has(host);
  const httpServer = createServer((req, res) => {
    handle(req, res, deps, loopbackOnly).catch((err: unknown) => {
      if (!res.headersSent) sendJson(res, 500, { error: `Internal error: ${(err as Error).message}` });
      else res.destroy();
    });
  });
  await new Promise<void>((resolve, reject) => {
    httpServer.once('error', reject);
    httpServer.listen(options.port ?? DEFAULT_RESEARCH_PORT, host, () => {
      httpServer.off('error', reject);
      resolve();
    });
  });
  const { port } = httpServer.address() as AddressInfo;
  const urlHost = host.includes(':') ? `[${host}]` : host;
  return {
    url: `http://${urlHost}:${port}/mcp`,
    close: () =>
      new Promise<void>((resolve, reject) => {
        httpServer.close((err) => (err ? reject(err) : resolve()));
        httpServer.closeIdleConnections();
        // In-flight calls get a grace period (a fetch is bounded by its own 10 s timeout).
        setTimeout(() => httpServer.closeAllConnections(), CLOSE_GRACE_MS).unref();
      }),
  };
}

function portFromEnv(value: string | undefined): number {
  if (value === undefined || value === '') return DEFAULT_RESEARCH_PORT;
  const port = Number(value);
  if (!Number.isInteger(port) || port < 0 || port > 65_535) {
    throw new Error(`RESEARCH_PORT must be a port number (0-65535), not ${JSON.stringify(value)}.`);
  }
  return port;
}

async function main(): Promise<void> {
  const server = await startResearchHttp({
    port: portFromEnv(process.env.RESEARCH_PORT),
    host: process.env.RESEARCH_HOST || DEFAULT_RESEARCH_HOST,
  });
  process.stderr.write(`research server listening on ${server.url}\n`);
  const stop = (): void => {
    server.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

if (isEntrypoint(import.meta.url)) {
  main().catch((err: unknown) => {
    process.stderr.write(`research server failed to start: ${(err as Error).message}\n`);
    process.exit(1);
  });
}
