// A tiny node:http upstream whose behaviour each test scripts (`respond`), for the proxy path's edge
// cases: odd statuses, event streams written on cue, resets, bodies that never end. It records what
// reached it (path, headers, body) and when each request's connection closed.
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export type ScriptedHandler = (req: IncomingMessage, res: ServerResponse, body: string) => void;

export interface SeenRequest {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: string;
  /** Resolves when the upstream's side of this request closed; `finished` tells whether its reply had ended. */
  closed: Promise<{ finished: boolean }>;
}

export interface ScriptedUpstream {
  /** http://127.0.0.1:PORT/mcp */
  url: string;
  seen: SeenRequest[];
  respond(handler: ScriptedHandler): void;
  /** The next request to arrive. */
  next(): Promise<SeenRequest>;
  close(): Promise<void>;
}

export async function startScriptedUpstream(): Promise<ScriptedUpstream> {
  let handler: ScriptedHandler = (_req, res) => res.writeHead(404).end();
  const seen: SeenRequest[] = [];
  const waiters: ((request: SeenRequest) => void)[] = [];
  const server: Server = createServer((req, res) => {
    res.on('error', () => undefined);
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => {
      const entry: SeenRequest = {
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        body,
        closed: new Promise((resolve) => res.once('close', () => resolve({ finished: res.writableFinished }))),
      };
      seen.push(entry);
      waiters.shift()?.(entry);
      handler(req, res, body);
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`,
    seen,
    respond: (next) => (handler = next),
    next: () => new Promise((resolve) => waiters.push(resolve)),
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** A port nothing listens on (connections are refused). */
export async function deadPort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** Sums a counter or histogram count from the gateway's /metrics for the series whose labels include `labels`. */
export async function metricValue(origin: string, name: string, labels: Record<string, string>): Promise<number> {
  const text = await (await fetch(`${origin}/metrics`)).text();
  let total = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    if (Object.entries(labels).every(([key, value]) => line.includes(`${key}="${value}"`))) total += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return total;
}
