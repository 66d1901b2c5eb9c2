// A TCP proxy in front of a real redis-server that a test can cut at the worst moment: after the
// server ran a command, before its reply reaches the client (SPEC §21, a lost reply). Armed, it
// swallows the next bytes the server sends and closes both sides of that connection. It can also stand
// for an address that moves to another server (a DNS name or virtual IP a managed Redis re-points at a
// promoted replica): `redirect` drops every connection and sends new ones to the other port.
import net from 'node:net';

export interface CuttableProxy {
  url: string;
  port: number;
  /** Drops the next reply from the server and resets the connection it came on. */
  cutNextReply(): void;
  /** How many replies were swallowed so far (the test's evidence that the cut happened). */
  readonly swallowed: number;
  /** Client connections accepted so far (a reconnect after a cut adds one). */
  readonly connections: number;
  /** A failover behind one address: every open connection is dropped, new ones reach `port`. */
  redirect(port: number): void;
  close(): Promise<void>;
}

export async function startCuttableProxy(targetPort: number): Promise<CuttableProxy> {
  let armed = false;
  let swallowed = 0;
  let connections = 0;
  let target = targetPort;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    connections++;
    const upstream = net.connect(target, '127.0.0.1');
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
      socket.on('error', () => undefined);
    }
    client.on('data', (chunk) => upstream.write(chunk));
    upstream.on('data', (chunk) => {
      if (armed) {
        armed = false;
        swallowed++;
        client.destroy();
        upstream.destroy();
        return;
      }
      client.write(chunk);
    });
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    cutNextReply() {
      armed = true;
    },
    get swallowed() {
      return swallowed;
    },
    get connections() {
      return connections;
    },
    redirect(port) {
      target = port;
      for (const socket of sockets) socket.destroy();
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
