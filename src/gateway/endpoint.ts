// One MCP endpoint from its config (SPEC §18): its pricing, paywall, OAuth resource server and PRM, and
// the proxied route in front of its upstream. The gateway (server.ts) registers one per endpoint on the
// same fastify app; store, provider, settler, metrics and the x402 rail are shared, so SKUs and handles
// are too: a handle pays at every endpoint that prices tools in its SKU.
import type { ServerResponse } from 'node:http';
import type { FastifyInstance } from 'fastify';
import type { GatewayConfig } from '../config/schema.js';
import { createResourceServer, type ResourceServer } from '../auth/resource-server.js';
import { SessionBindings } from '../auth/session-bindings.js';
import { prmPaths, PRM_WELL_KNOWN, protectedResourceMetadata } from '../auth/metadata.js';
import { registerMcpEndpoint } from '../http/mcp-endpoint.js';
import type { Authenticator } from '../http/mcp-policy.js';
import { pricingFromConfig } from '../mcp/tools-list.js';
import { visibilityFromConfig } from '../mcp/visibility.js';
import type { Logger } from '../observability/logger.js';
import type { Metrics } from '../observability/metrics.js';
import type { Tracing } from '../observability/tracing.js';
import type { PaymentProvider } from '../payments/provider.js';
import type { Settler } from '../payments/settle.js';
import type { DeadlineQueue } from '../proxy/deadlines.js';
import type { PricedRequests } from '../proxy/priced-requests.js';
import type { X402Rail } from '../payments/x402/rail.js';
import { Paywall } from '../paywall/decide.js';
import { Quotas } from '../paywall/quotas.js';
import { CallerPriceList } from '../paywall/price-list.js';
import { X402Calls } from '../paywall/x402-calls.js';
import { ToolCatalog } from '../proxy/tool-catalog.js';
import type { UpstreamTarget } from '../proxy/upstream-target.js';
import type { Store } from '../store/store.js';
import { DEFAULT_ENDPOINT, type EndpointConfig } from './endpoints.js';

export interface EndpointDeps {
  store: Store;
  provider: PaymentProvider;
  settler: Settler;
  target: UpstreamTarget;
  metrics: Metrics;
  logger: Logger;
  now: () => number;
  /** The gateway's one deadline queue (server.ts), shared by its endpoints. */
  deadlines: DeadlineQueue;
  /** The process's priced-request registry (gateway/memory.ts), shared by its endpoints and generations. */
  registry: PricedRequests;
  tracing: Tracing | null;
  x402Rail: X402Rail | null;
  openStreams: Set<ServerResponse>;
}

export async function registerEndpoint(app: FastifyInstance, config: GatewayConfig, endpoint: EndpointConfig, deps: EndpointDeps): Promise<void> {
  const { now } = deps;
  // The endpoint's own tools and scopes in place of the top level's; everything else (SKUs, handles) shared.
  const pricing = pricingFromConfig({ ...config, tools: endpoint.tools });
  const quotas = new Quotas({ budgets: config.budgets, allowances: config.allowances }, endpoint.name, { store: deps.store, now });
  const pricedTools = Object.keys(endpoint.tools).flatMap((tool) => {
    const price = pricing.priceOf(tool);
    return price ? [[tool, price] as [string, typeof price]] : [];
  });
  const paywall = new Paywall({
    settings: {
      argumentName: config.handles.argumentName,
      hashSecret: config.handles.hashSecret,
      handleTtlMs: config.handles.ttl,
      chargeTtlMs: config.payments.chargeTtl,
      callDeadlineMs: endpoint.upstream.callDeadline,
      taskDeadlineMs: endpoint.upstream.taskDeadline,
      perHandle: config.limits.perHandle,
      challengesPerClient: config.limits.challengesPerClient,
      newChargesPerSecond: config.limits.newChargesPerSecond,
      idempotency: { ttlMs: config.idempotency.ttl, maxResultBytes: config.idempotency.maxResultBytes },
    },
    store: deps.store,
    provider: deps.provider,
    settler: deps.settler,
    metrics: deps.metrics,
    logger: deps.logger,
    now,
    x402: deps.x402Rail ? x402Calls(config, endpoint, deps.x402Rail, deps) : null,
    server: endpoint.name,
    quotas,
  });

  let resourceServer: ResourceServer | null = null;
  if (config.auth.mode === 'oauth') {
    const auth = { ...config.auth, audience: endpoint.audience, toolScopes: endpoint.toolScopes };
    resourceServer = createResourceServer(auth, { publicUrl: endpoint.publicUrl, mcpPath: endpoint.path, metrics: deps.metrics, clock: now });
    const metadata = protectedResourceMetadata(auth, endpoint.publicUrl);
    // The bare well-known path answers for the default endpoint only; every endpoint has its path-inserted one.
    const paths = prmPaths(endpoint.publicUrl).filter((path) => endpoint.name === DEFAULT_ENDPOINT || path !== PRM_WELL_KNOWN);
    for (const path of paths) app.get(path, async () => metadata);
    const closing = resourceServer;
    app.addHook('onClose', async () => closing.close());
  }

  // SPEC §22: a stdio upstream's catalog is read off the request path (a read costs a child).
  const catalog = new ToolCatalog(deps.target, { upstreamHeaders: endpoint.upstream.headers, now, background: deps.target.capacity !== undefined });
  catalog.start();
  app.addHook('onClose', async () => catalog.close());

  await registerMcpEndpoint(app, {
    server: endpoint.name,
    mcpPath: endpoint.path,
    target: deps.target,
    upstreamHeaders: endpoint.upstream.headers,
    guards: { publicUrl: config.server.publicUrl, allowedOrigins: config.server.allowedOrigins, allowedHosts: config.server.allowedHosts },
    pricing,
    // The endpoint's own hidden tools and toolScopes decide what its callers see (visibility is per endpoint).
    visibility: visibilityFromConfig({ tools: endpoint.tools, auth: { mode: config.auth.mode, toolScopes: endpoint.toolScopes, hideUnauthorisedTools: config.auth.hideUnauthorisedTools } }),
    anyPriced: Object.values(endpoint.tools).some((tool) => tool.sku !== undefined && !tool.hidden),
    paywall,
    priceList: new CallerPriceList({ store: deps.store, quotas, hashSecret: config.handles.hashSecret, tools: pricedTools }),
    catalog,
    authenticator: resourceServer ? adaptAuthenticator(resourceServer) : null,
    sessions: resourceServer ? new SessionBindings({ store: deps.store, now }, { endpoint: endpoint.name }) : null,
    store: deps.store,
    callDeadlineMs: endpoint.upstream.callDeadline,
    maxResponseBytes: endpoint.upstream.maxResponseBytes,
    bodyLimit: config.server.bodyLimit,
    metrics: deps.metrics,
    logger: deps.logger,
    now,
    deadlines: deps.deadlines,
    registry: deps.registry,
    openStreams: deps.openStreams,
    tracing: deps.tracing,
  });
}

function x402Calls(config: GatewayConfig, endpoint: EndpointConfig, rail: X402Rail, deps: EndpointDeps): X402Calls {
  const x402Prices = Object.fromEntries(Object.entries(config.skus).map(([sku, { x402Price }]) => [sku, x402Price]));
  return new X402Calls({
    rail,
    store: deps.store,
    // The resource a paid retry pays for is this endpoint's URL. A paid retry per client is throttled like paid calls per handle, in a bucket of its own.
    settings: { endpointUrl: endpoint.publicUrl, x402Prices, perClient: config.limits.perHandle, argumentName: config.handles.argumentName, server: endpoint.name },
    metrics: deps.metrics,
    logger: deps.logger,
  });
}

/** One call for the whole request, batch or not: the resource server needs every tool's scopes at once (auth/scopes.ts). */
function adaptAuthenticator(server: ResourceServer): Authenticator {
  return { authenticate: (authorization, needs) => server.authenticate(authorization, needs) };
}
