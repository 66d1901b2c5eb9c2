// Wires the configured parts together and runs the gateway until SIGTERM/SIGINT (SPEC §2):
// stop accepting, finish calls in flight (up to the call deadline), close the store, exit 0.
import type { GatewayConfig } from './config/schema.js';
import { maskSecrets } from './config/mask.js';
import { createLogger, type Logger } from './observability/logger.js';
import { createMetrics } from './observability/metrics.js';
import { startTracing } from './observability/tracing.js';
import { DevProvider } from './payments/dev.js';
import { MooveProvider } from './payments/moove.js';
import type { PaymentProvider } from './payments/provider.js';
import { X402Rail } from './payments/x402/rail.js';
import { Reconciler } from './payments/reconciler.js';
import { registerMooveWebhookRoute } from './http/moove-webhook.js';
import { MOOVE_WEBHOOK_EVENT_MEMORY_MS } from './payments/webhook.js';
import { startBridge } from './bridge/index.js';
import { httpUpstreamTarget, type UpstreamTarget } from './proxy/upstream-target.js';
import { buildGateway, type Gateway } from './server.js';
import { createStore } from './store/create.js';
import type { Store } from './store/store.js';

export interface RunningGateway {
  gateway: Gateway;
  url: string;
  store: Store;
  reconciler: Reconciler;
  close(): Promise<void>;
}

/**
 * Builds and listens; resolves once the gateway accepts connections. Used by the CLI and by tests.
 * `now` (epoch ms) replaces the wall clock of the paywall, settlement and reconciler (tests move time forward).
 */
export async function runGateway(config: GatewayConfig, options: { logger?: Logger; configPath?: string; now?: () => number } = {}): Promise<RunningGateway> {
  const logger = options.logger ?? createLogger(config.logging.level);
  const now = options.now ?? Date.now;
  const store = await createStore(config, { logger });
  // Off (no otlpEndpoint): null, and nothing of OpenTelemetry is loaded.
  const tracing = await startTracing(config.tracing, logger);
  const metrics = createMetrics(() => store.countPendingCharges());
  // A stdio upstream is served by the bridge on a private socket; the proxy reaches it like any HTTP upstream (SPEC §16).
  const stdio = config.upstream.stdio;
  const upstream: UpstreamTarget =
    config.upstream.command && stdio
      ? await startBridge({
          command: config.upstream.command,
          sessions: stdio.sessions,
          maxChildren: stdio.maxChildren,
          idleTimeoutMs: stdio.idleTimeout,
          maxLineBytes: config.upstream.maxResponseBytes,
          maxBodyBytes: config.server.bodyLimit,
          logger,
        })
      : httpUpstreamTarget(config.upstream.url as string);
  const provider: PaymentProvider =
    config.payments.provider === 'moove'
      ? new MooveProvider({ apiKey: config.payments.moove.apiKey, baseUrl: config.payments.moove.baseUrl, logger, metrics })
      : new DevProvider({ store, publicUrl: config.server.publicUrl });
  const x402Rail = X402Rail.fromConfig(config, { store, logger, metrics, clock: now }); // null when payments.x402 is off

  const gateway = await buildGateway(config, {
    // Traced: store and provider calls made for a request become children of its span (elsewhere they run as they are).
    store: tracing ? tracing.traceStore(store) : store,
    provider: tracing ? tracing.traceProvider(provider) : provider,
    upstream,
    logger,
    metrics,
    now,
    x402Rail,
    tracing,
    registerProviderRoutes: (app, settler) =>
      registerMooveWebhookRoute(app, {
        secret: config.payments.provider === 'moove' ? config.payments.moove.webhookSecret : '',
        logger,
        onLink: async (linkId) => {
          await settler.observeByRef(linkId);
        },
        claimEvent: (eventId) => store.claimEvent('moove', eventId, MOOVE_WEBHOOK_EVENT_MEMORY_MS),
      }),
  });
  const reconciler = new Reconciler({ store, provider, settler: gateway.settler, metrics, logger, intervalMs: config.payments.reconcile.interval, now });

  await gateway.app.listen({ host: config.server.host, port: config.server.port });
  reconciler.start();
  const address = gateway.app.server.address();
  const port = typeof address === 'object' && address ? address.port : config.server.port;
  logger.info({ evt: 'start', config: maskSecrets(config), configPath: options.configPath, port }, 'tollbooth gateway listening');
  if (provider.name === 'dev') {
    logger.warn({ evt: 'dev_provider' }, 'payments.provider is "dev": checkout links are local test pages and no real money moves. Do not use in production.');
  }

  let closing: Promise<void> | null = null;
  const close = (): Promise<void> => {
    closing ??= (async () => {
      await reconciler.stop();
      gateway.endStreams();
      const drained = gateway.app.close();
      // Keep-alive connections that finish their last call while we drain would hold close() open.
      const sweeper = setInterval(() => gateway.app.server.closeIdleConnections(), 100);
      const deadline = new Promise<void>((resolve) => setTimeout(resolve, config.upstream.callDeadline + 1_000).unref());
      await Promise.race([drained, deadline]);
      clearInterval(sweeper);
      gateway.app.server.closeAllConnections();
      await upstream.close().catch(() => undefined);
      await provider.close?.().catch(() => undefined);
      await x402Rail?.close().catch(() => undefined);
      await store.close().catch(() => undefined);
      await tracing?.shutdown(); // the last spans (bounded: a collector that is down does not hold the exit)
    })();
    return closing;
  };
  return { gateway, url: `http://${config.server.host}:${port}${config.server.mcpPath}`, store, reconciler, close };
}

/** The CLI's `start`: run until a signal, then drain and exit 0. */
export async function startGateway(config: GatewayConfig, options: { configPath: string }): Promise<void> {
  const logger = createLogger(config.logging.level);
  const running = await runGateway(config, { logger, configPath: options.configPath });
  const stop = (signal: string): void => {
    logger.info({ evt: 'shutdown', signal }, 'finishing calls in flight, then exiting');
    running.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.once('SIGTERM', () => stop('SIGTERM'));
  process.once('SIGINT', () => stop('SIGINT'));
}
