// Binding the gateway's listener. Port 0 asks the OS for a free port at bind time and the bound port is read
// back from the socket, so nothing picks a port, closes it and hopes it is still free (a race when tests run
// in parallel). A public URL derived from port 0 (config/schema.ts builds it from host and port when
// server.publicUrl is unset) then names the bound port instead.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { GatewayConfig } from '../config/schema.js';

export interface BoundAddress {
  host: string;
  port: number;
  /** http://host:port (IPv6 hosts in brackets) */
  origin: string;
}

/** Listens on `host:port` (0: any free port) and resolves with the address actually bound. */
export function listen(server: Server, host: string, port: number): Promise<BoundAddress> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host, port }, () => {
      server.off('error', reject);
      const bound = server.address() as AddressInfo;
      const shownHost = bound.family === 'IPv6' ? `[${bound.address}]` : bound.address;
      resolve({ host: bound.address, port: bound.port, origin: `http://${shownHost}:${bound.port}` });
    });
  });
}

/**
 * Binds `host:port` and lets it go at once: a port in use (or not ours to bind) fails a start in
 * milliseconds, before the store is reached or any child is spawned, while the real listener still binds
 * last and so accepts connections only once the gateway can answer them.
 */
export async function probePort(host: string, port: number): Promise<void> {
  const probe = createServer();
  await listen(probe, host, port);
  await new Promise<void>((resolve) => probe.close(() => resolve()));
}

/**
 * The config with a public URL naming port 0 (derived from server.port 0, or so written by a test) and an
 * audience equal to it naming `port`, the one bound; any other public URL is left as it is.
 */
export function withBoundPort(config: GatewayConfig, port: number): GatewayConfig {
  if (new URL(config.server.publicUrl).port !== '0') return config;
  // The port alone is replaced, so the URL stays byte for byte what was configured (an audience compares exactly).
  const publicUrl = config.server.publicUrl.replace(/^([a-z]+:\/\/[^/?#]*):0(?=[/?#]|$)/i, `$1:${port}`);
  const audience = config.auth.audience === config.server.publicUrl ? publicUrl : config.auth.audience;
  return { ...config, server: { ...config.server, publicUrl }, auth: { ...config.auth, audience } };
}
