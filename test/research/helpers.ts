// Shared by the research tests: a local HTTP origin and the injected network seams.
// Nothing here reaches the internet: names resolve through a fixed table, and the test-only
// connectOverride dials the local origin whatever (public-looking) address the guard approved.

import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { CheckedTarget, NetDeps, ResolvedAddress } from '../../src/research/net.js';

/** Public addresses outside every refused range (example.com's former ones); never actually dialled. */
export const PUBLIC_V4 = '93.184.216.34';
export const PUBLIC_V6 = '2606:2800:220:1:248:1893:25c8:1946';

export const DNS_TABLE: Record<string, ResolvedAddress[]> = {
  'public.test': [{ address: PUBLIC_V4, family: 4 }],
  'public6.test': [{ address: PUBLIC_V6, family: 6 }],
  'rebind.test': [{ address: '127.0.0.1', family: 4 }],
  'rebind6.test': [{ address: '::1', family: 6 }],
  'mixed.test': [
    { address: PUBLIC_V4, family: 4 },
    { address: '10.1.2.3', family: 4 },
  ],
  'metadata.test': [{ address: '169.254.169.254', family: 4 }],
  'mapped.test': [{ address: '::ffff:127.0.0.1', family: 6 }],
  'empty.test': [],
};

export interface RecordingResolver {
  resolve: (hostname: string) => Promise<ResolvedAddress[]>;
  calls: string[];
}

export function tableResolver(table: Record<string, ResolvedAddress[]> = DNS_TABLE): RecordingResolver {
  const calls: string[] = [];
  return {
    calls,
    resolve: async (hostname) => {
      calls.push(hostname);
      const answers = table[hostname];
      if (answers === undefined) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
      return answers;
    },
  };
}

/** Net deps that approve `public.test` (a public address) but dial 127.0.0.1:`port`. */
export function localDeps(port: number, resolver: RecordingResolver = tableResolver()): NetDeps & { dialled: CheckedTarget[] } {
  const dialled: CheckedTarget[] = [];
  return {
    dialled,
    resolve: resolver.resolve,
    connectOverride: (target) => {
      dialled.push(target);
      return { host: '127.0.0.1', port };
    },
  };
}

export type Route = (req: IncomingMessage, res: ServerResponse) => void;

export interface Origin {
  port: number;
  server: Server;
  /** Paths requested, in order. */
  requests: Array<{ path: string; host: string | undefined }>;
  close(): Promise<void>;
}

export async function startOrigin(routes: Record<string, Route>): Promise<Origin> {
  const requests: Origin['requests'] = [];
  const server = createServer((req, res) => {
    const path = new URL(req.url ?? '/', 'http://origin.invalid').pathname;
    requests.push({ path, host: req.headers.host });
    const route = routes[path];
    if (route) route(req, res);
    else {
      res.writeHead(404, { 'content-type': 'text/plain' });
      res.end('not found');
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    server,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export const html =
  (body: string, status = 200): Route =>
  (_req, res) => {
    res.writeHead(status, { 'content-type': 'text/html; charset=utf-8' });
    res.end(body);
  };

export const redirect =
  (location: string, status = 302): Route =>
  (_req, res) => {
    res.writeHead(status, { location });
    res.end();
  };
