// buildGateway(config, deps): the fastify instance with every concern attached in hook order.
// No listen() here: start.ts listens, tests build as many gateways as they like in one process.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import Fastify, { type FastifyInstance } from 'fastify';
import { systemClock, type Clock } from './clock.js';
import type { GatewayConfig } from './config/schema.js';
import type { Logger } from './observability/logger.js';
import type { Metrics } from './observability/metrics.js';
import type { Tracing } from './observability/tracing.js';
import { registerRequestIdEcho, requestIdOf } from './observability/request-id.js';
import type { PaymentProvider } from './payments/provider.js';
import { Settler } from './payments/settle.js';
import { registerDevCheckout } from './http/dev-checkout.js';
import type { X402Rail } from './payments/x402/rail.js';
import { DeadlineQueue } from './proxy/deadlines.js';
import { PricedRequests } from './proxy/priced-requests.js';
import type { UpstreamTarget } from './proxy/upstream-target.js';
import { GatewayError } from './errors.js';
import { asGatewayError, sendErrorReply } from './io/error-reply.js';
import type { Store } from './store/store.js';
import { registerOpsRoutes } from './http/ops-routes.js';
import { registerEndpoint } from './gateway/endpoint.js';
import type { RequestMemory } from './gateway/memory.js';
import { DEFAULT_ENDPOINT, endpointsOf } from './gateway/endpoints.js';

export interface GatewayDeps {
  store: Store;
  provider: PaymentProvider;
  /** Where MCP traffic goes: an HTTP upstream's URL, or the stdio bridge's private endpoint (SPEC §16). */
  upstream: UpstreamTarget;
  /** The upstream of each `servers` entry (SPEC §18), by its key; the owner closes them. */
  servers?: Record<string, UpstreamTarget>;
  logger: Logger;
  metrics: Metrics;
  /** The one clock (src/clock.ts): wall time for records and expiries, monotonic time and timers for deadlines. */
  clock?: Clock;
  /** OpenTelemetry spans for the MCP endpoint (SPEC §17); absent or null when tracing is off. */
  tracing?: Tracing | null;
  /** Extra routes a provider needs (the Moove webhook receiver), registered with the others. */
  registerProviderRoutes?: (app: FastifyInstance, settler: Settler) => void;
  /** The x402 rail (SPEC §19), when payments.x402 is on; its owner closes it after the drain. */
  x402Rail?: X402Rail | null;
  /**
   * The process's §6.5 memory (gateway/memory.ts), shared by every gateway a reload builds; absent (tests
   * that build one gateway), this gateway has its own, closed with it.
   */
  memory?: RequestMemory;
}

export interface Gateway {
  app: FastifyInstance;
  settler: Settler;
  /** Ends long-lived GET streams; fastify.close() then waits for calls in flight. */
  endStreams(): void;
}

export async function buildGateway(config: GatewayConfig, deps: GatewayDeps): Promise<Gateway> {
  const clock = deps.clock ?? systemClock;
  const now = clock.now;
  const app = Fastify({
    logger: false,
    bodyLimit: config.server.bodyLimit,
    trustProxy: config.server.trustProxy,
    // Calls in flight finish on close; idle keep-alive connections are dropped.
    forceCloseConnections: 'idle',
    return503OnClosing: true,
    // Keep-alive connections from proxies and clients outlive a single request.
    keepAliveTimeout: 65_000,
    // Request ids: an acceptable incoming x-request-id, else a UUID; echoed on every response.
    requestIdHeader: false,
    genReqId: requestIdOf,
  });
  registerRequestIdEcho(app);

  // Bodies arrive as text: the MCP policy parses them itself so malformed JSON gets -32700, not fastify's 400.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'string' }, (_request, body, done) => done(null, body));

  // The MCP endpoint has its own error handler (JSON-RPC errors); this one answers every other route.
  app.setErrorHandler((error, request, reply) => {
    const refusal = asGatewayError(error, config.server.bodyLimit);
    if (refusal.code === 'TB_ERR_INTERNAL') deps.logger.error({ evt: 'internal_error', reqId: request.id, code: (error as { code?: string }).code ?? 'unknown', url: request.routeOptions.url }, 'request failed');
    return sendErrorReply(reply, refusal);
  });
  app.setNotFoundHandler((_request, reply) => sendErrorReply(reply, new GatewayError('TB_ERR_NOT_FOUND', 'not found')));

  const settler = new Settler({ store: deps.store, provider: deps.provider, policy: config.payments.settlement, metrics: deps.metrics, logger: deps.logger, clock });
  const openStreams = new Set<ServerResponse>();
  // One deadline queue: every endpoint's priced calls share its one timer. The process's (start.ts) outlives
  // this gateway, so a call left pending here (a stream the upstream ended early) is still released at its
  // deadline after a reload; a gateway built alone has its own, disarmed when it closes.
  const memory = deps.memory ?? { registry: new PricedRequests({ store: deps.store, now }), deadlines: new DeadlineQueue(clock) };
  const { deadlines } = memory;
  if (!deps.memory) app.addHook('onClose', async () => deadlines.close());
  closeUnusedConnectionsOnClose(app);
  // One MCP endpoint per entry (SPEC §18): the top-level one, then each of `servers`, each before its own upstream.
  const servers: Record<string, UpstreamTarget> = {};
  for (const endpoint of endpointsOf(config)) {
    const target = endpoint.name === DEFAULT_ENDPOINT ? deps.upstream : deps.servers?.[endpoint.name];
    if (!target) throw new Error(`no upstream target for servers.${endpoint.name}`);
    if (endpoint.name !== DEFAULT_ENDPOINT) servers[endpoint.name] = target;
    await registerEndpoint(app, config, endpoint, {
      store: deps.store,
      provider: deps.provider,
      settler,
      target,
      metrics: deps.metrics,
      logger: deps.logger,
      now,
      deadlines,
      registry: memory.registry,
      tracing: deps.tracing ?? null,
      x402Rail: deps.x402Rail ?? null,
      openStreams,
    });
  }
  registerOpsRoutes(app, { store: deps.store, upstream: deps.upstream, servers, metrics: deps.metrics, metricsConfig: config.metrics });
  if (deps.provider.name === 'dev') registerDevCheckout(app, { store: deps.store, publicUrl: config.server.publicUrl, now, onPaid: (linkId) => settler.observeByRef(linkId) });
  deps.registerProviderRoutes?.(app, settler);

  return {
    app,
    settler,
    endStreams: () => {
      for (const res of openStreams) res.end();
    },
  };
}

/**
 * A connection that never sent a request (a client's or a browser's pre-connected socket) is not a call in
 * flight, but Node's closeIdleConnections() leaves it open, so draining would wait for it until the call
 * deadline. Such sockets are destroyed when the gateway starts closing; sockets that carried a request are
 * left to fastify's idle-connection handling, so calls in flight still finish.
 */
function closeUnusedConnectionsOnClose(app: FastifyInstance): void {
  const unused = new Set<Socket>();
  app.server.on('connection', (socket: Socket) => {
    unused.add(socket);
    socket.once('close', () => unused.delete(socket));
  });
  app.server.on('request', (request: IncomingMessage) => unused.delete(request.socket));
  app.addHook('preClose', async () => {
    for (const socket of unused) socket.destroy();
    unused.clear();
  });
}
