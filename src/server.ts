// buildGateway(config, deps): the fastify instance with every concern attached in hook order.
// No listen() here: start.ts listens, tests build as many gateways as they like in one process.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import Fastify, { type FastifyInstance } from 'fastify';
import type { GatewayConfig } from './config/schema.js';
import { ToolCatalog } from './proxy/tool-catalog.js';
import { pricingFromConfig } from './mcp/tools-list.js';
import { visibilityFromConfig } from './mcp/visibility.js';
import type { Logger } from './observability/logger.js';
import type { Metrics } from './observability/metrics.js';
import type { Tracing } from './observability/tracing.js';
import { registerRequestIdEcho, requestIdOf } from './observability/request-id.js';
import type { PaymentProvider } from './payments/provider.js';
import { Settler } from './payments/settle.js';
import { registerDevCheckout } from './http/dev-checkout.js';
import type { X402Rail } from './payments/x402/rail.js';
import { Paywall } from './paywall/decide.js';
import { X402Calls } from './paywall/x402-calls.js';
import type { UpstreamTarget } from './proxy/upstream-target.js';
import { GatewayError } from './errors.js';
import { asGatewayError, sendErrorReply } from './io/error-reply.js';
import { registerMcpEndpoint } from './http/mcp-endpoint.js';
import type { Store } from './store/store.js';
import type { Authenticator } from './http/mcp-policy.js';
import { registerOpsRoutes } from './http/ops-routes.js';
import { createResourceServer, type ResourceServer } from './auth/resource-server.js';
import { SessionBindings } from './auth/session-bindings.js';
import { prmPaths, protectedResourceMetadata } from './auth/metadata.js';

export interface GatewayDeps {
  store: Store;
  provider: PaymentProvider;
  /** Where MCP traffic goes: an HTTP upstream's URL, or the stdio bridge's private endpoint (SPEC §16). */
  upstream: UpstreamTarget;
  logger: Logger;
  metrics: Metrics;
  now?: () => number;
  /** OpenTelemetry spans for the MCP endpoint (SPEC §17); absent or null when tracing is off. */
  tracing?: Tracing | null;
  /** Extra routes a provider needs (the Moove webhook receiver), registered with the others. */
  registerProviderRoutes?: (app: FastifyInstance, settler: Settler) => void;
  /** The x402 rail (SPEC §19), when payments.x402 is on; its owner closes it after the drain. */
  x402Rail?: X402Rail | null;
}

export interface Gateway {
  app: FastifyInstance;
  settler: Settler;
  /** Ends long-lived GET streams; fastify.close() then waits for calls in flight. */
  endStreams(): void;
}

export async function buildGateway(config: GatewayConfig, deps: GatewayDeps): Promise<Gateway> {
  const now = deps.now ?? Date.now;
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

  const pricing = pricingFromConfig(config);
  const settler = new Settler({ store: deps.store, provider: deps.provider, policy: config.payments.settlement, metrics: deps.metrics, logger: deps.logger, now });
  const paywall = new Paywall({
    settings: {
      argumentName: config.handles.argumentName,
      hashSecret: config.handles.hashSecret,
      handleTtlMs: config.handles.ttl,
      chargeTtlMs: config.payments.chargeTtl,
      callDeadlineMs: config.upstream.callDeadline,
      perHandle: config.limits.perHandle,
      challengesPerClient: config.limits.challengesPerClient,
      newChargesPerSecond: config.limits.newChargesPerSecond,
    },
    store: deps.store,
    provider: deps.provider,
    settler,
    metrics: deps.metrics,
    logger: deps.logger,
    now,
    x402: deps.x402Rail ? x402Calls(config, deps.x402Rail, deps) : null,
  });

  let resourceServer: ResourceServer | null = null;
  if (config.auth.mode === 'oauth') {
    resourceServer = createResourceServer(config.auth, { publicUrl: config.server.publicUrl, mcpPath: config.server.mcpPath, metrics: deps.metrics, clock: now });
    const metadata = protectedResourceMetadata(config.auth, config.server.publicUrl);
    for (const path of prmPaths(config.server.publicUrl)) app.get(path, async () => metadata);
    app.addHook('onClose', async () => resourceServer?.close());
  }

  const openStreams = new Set<ServerResponse>();
  closeUnusedConnectionsOnClose(app);
  await registerMcpEndpoint(app, {
    mcpPath: config.server.mcpPath,
    target: deps.upstream,
    upstreamHeaders: config.upstream.headers,
    guards: { publicUrl: config.server.publicUrl, allowedOrigins: config.server.allowedOrigins, allowedHosts: config.server.allowedHosts },
    pricing,
    visibility: visibilityFromConfig(config),
    anyPriced: Object.values(config.tools).some((tool) => tool.sku !== undefined && !tool.hidden),
    paywall,
    catalog: new ToolCatalog(deps.upstream, { upstreamHeaders: config.upstream.headers, now }),
    authenticator: resourceServer ? adaptAuthenticator(resourceServer) : null,
    sessions: resourceServer ? new SessionBindings({ store: deps.store, now }) : null,
    store: deps.store,
    callDeadlineMs: config.upstream.callDeadline,
    maxResponseBytes: config.upstream.maxResponseBytes,
    bodyLimit: config.server.bodyLimit,
    metrics: deps.metrics,
    logger: deps.logger,
    now,
    openStreams,
    tracing: deps.tracing ?? null,
  });
  registerOpsRoutes(app, { store: deps.store, upstream: deps.upstream, metrics: deps.metrics, metricsConfig: config.metrics });
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

function x402Calls(config: GatewayConfig, rail: X402Rail, deps: GatewayDeps): X402Calls {
  const x402Prices = Object.fromEntries(Object.entries(config.skus).map(([sku, { x402Price }]) => [sku, x402Price]));
  return new X402Calls({
    rail,
    store: deps.store,
    // A paid retry per client is throttled like paid calls per handle, in a bucket of its own.
    settings: { endpointUrl: config.server.publicUrl, x402Prices, perClient: config.limits.perHandle, argumentName: config.handles.argumentName },
    metrics: deps.metrics,
    logger: deps.logger,
  });
}

/** One call for the whole request, batch or not: the resource server needs every tool's scopes at once (auth/scopes.ts). */
function adaptAuthenticator(server: ResourceServer): Authenticator {
  return { authenticate: (authorization, needs) => server.authenticate(authorization, needs) };
}
