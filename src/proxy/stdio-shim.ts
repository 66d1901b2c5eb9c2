// TEMPORARY, until the stdio bridge (src/bridge/) is merged: today's stdio upstream served on a
// loopback port so the proxy reaches it like any HTTP upstream (SPEC §16). The bridge replaces this
// file and upstream-stdio.ts / stdio-*.ts.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pipeline } from 'node:stream/promises';
import { Agent } from 'undici';
import type { Logger } from '../observability/logger.js';
import { StdioUpstream } from './upstream-stdio.js';
import type { UpstreamTarget } from './upstream-target.js';

export async function startStdioShim(command: string[], deps: { logger: Logger }): Promise<UpstreamTarget> {
  const upstream = await StdioUpstream.start(command, deps);
  const server = createServer((req, res) => void serve(upstream, req, res));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const agent = new Agent({ headersTimeout: 0, bodyTimeout: 0, keepAliveTimeout: 10_000 });
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    dispatcher: agent,
    probe: () => upstream.probe(),
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await agent.destroy().catch(() => undefined);
      await upstream.close();
    },
  };
}

async function serve(upstream: StdioUpstream, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const controller = new AbortController();
  res.once('close', () => {
    if (!res.writableFinished) controller.abort();
  });
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(req.headers)) if (value !== undefined) headers[name] = Array.isArray(value) ? value.join(', ') : value;
  try {
    const response = await upstream.send({
      method: req.method as 'GET' | 'POST' | 'DELETE',
      path: req.url ?? '/',
      headers,
      body: req.method === 'POST' ? Buffer.concat(chunks).toString('utf8') : undefined,
      signal: controller.signal,
    });
    res.writeHead(response.status, response.headers);
    res.flushHeaders();
    await pipeline(response.body, res).catch(() => undefined);
  } catch {
    if (!res.headersSent) res.writeHead(502, { 'content-type': 'application/json' }).end('{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"the stdio server could not be reached"}}');
    else res.destroy();
  }
}
