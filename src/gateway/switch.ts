// One listening HTTP server in front of a replaceable gateway (SPEC §18 hot reload). Every request goes to
// the gateway current when it arrived and finishes there; `swap` makes a newly built gateway current for
// the requests after it, atomically (one assignment), and drains the old one in the background: its calls
// in flight finish under the config they started with, then its long-lived GET streams end (clients
// reconnect, to the new one) and it closes. Fastify's own request/clientError listeners are reused: the
// server re-emits those events on the current app's (never listening) http server.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Gateway } from '../server.js';

interface Live {
  gateway: Gateway;
  inFlight: number;
  idle: (() => void) | null;
}

export class GatewaySwitch {
  readonly server: Server;
  #current: Live;
  readonly #draining = new Set<Live>();
  /** Connections that never carried a request (pre-connected sockets): destroyed at shutdown. */
  readonly #unused = new Set<Socket>();
  #closing = false;

  /** @param server the listener, when it was bound before the gateway was built (start.ts, port 0) */
  constructor(gateway: Gateway, server: Server = createServer()) {
    this.#current = { gateway, inFlight: 0, idle: null };
    this.server = server;
    const own = gateway.app.server;
    // As fastify configures its own server (keep-alive outlives a request; no request timeout on streams).
    this.server.keepAliveTimeout = own.keepAliveTimeout;
    this.server.requestTimeout = own.requestTimeout;
    this.server.headersTimeout = own.headersTimeout;
    this.server.on('connection', (socket: Socket) => {
      this.#unused.add(socket);
      socket.once('close', () => this.#unused.delete(socket));
    });
    this.server.on('request', (request: IncomingMessage, response: ServerResponse) => this.#route(request, response));
    this.server.on('clientError', (error: Error, socket: Socket) => {
      if (!this.#current.gateway.app.server.emit('clientError', error, socket)) socket.destroy();
    });
  }

  get current(): Gateway {
    return this.#current.gateway;
  }

  /** Every gateway still serving requests: the current one and those draining. */
  get live(): Gateway[] {
    return [this.#current.gateway, ...[...this.#draining].map((live) => live.gateway)];
  }

  /**
   * Makes `next` current for every request from now on; resolves once the previous gateway has drained
   * (its requests finished, or `drainMs` passed) and closed.
   */
  async swap(next: Gateway, drainMs: number): Promise<void> {
    const previous = this.#current;
    this.#current = { gateway: next, inFlight: 0, idle: null };
    this.#draining.add(previous);
    try {
      await this.#drain(previous, drainMs);
    } finally {
      this.#draining.delete(previous);
    }
  }

  /** SIGTERM: stop accepting, finish calls in flight (up to `drainMs`), close every gateway. */
  async close(drainMs: number): Promise<void> {
    this.#closing = true;
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const socket of this.#unused) socket.destroy();
    this.#unused.clear();
    // Keep-alive connections that finish their last call while we drain would hold close() open.
    const sweeper = setInterval(() => this.server.closeIdleConnections(), 100);
    this.server.closeIdleConnections();
    const all = [this.#current, ...this.#draining];
    await Promise.all(all.map((live) => this.#drain(live, drainMs)));
    clearInterval(sweeper);
    this.server.closeAllConnections();
    await closed;
  }

  #route(request: IncomingMessage, response: ServerResponse): void {
    this.#unused.delete(request.socket);
    if (this.#closing) {
      // As fastify's return503OnClosing: a request on a kept-alive connection while draining is not served.
      response.writeHead(503, { 'content-type': 'application/json', connection: 'close' }).end('{"error":"the gateway is shutting down"}');
      return;
    }
    const live = this.#current;
    live.inFlight += 1;
    response.once('close', () => {
      live.inFlight -= 1;
      if (live.inFlight === 0) live.idle?.();
    });
    live.gateway.app.server.emit('request', request, response);
  }

  async #drain(live: Live, drainMs: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, drainMs);
      timer.unref();
    });
    // GET streams never finish on their own: ended now, so only calls are waited for.
    live.gateway.endStreams();
    const idle = live.inFlight === 0 ? Promise.resolve() : new Promise<void>((resolve) => (live.idle = resolve));
    await Promise.race([idle, deadline]);
    clearTimeout(timer);
    await live.gateway.app.close().catch(() => undefined);
  }
}
