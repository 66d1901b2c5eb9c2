// Wires the configured parts together and runs the gateway until SIGTERM/SIGINT (SPEC §2):
// stop accepting, finish calls in flight (up to the call deadline), close the store, exit 0.
import { createServer, type Server } from 'node:http';
import { dirname, resolve } from 'node:path';
import { systemClock, type Clock } from './clock.js';
import type { GatewayConfig } from './config/schema.js';
import { maskSecrets } from './config/mask.js';
import { createLogger, flushLogs, type Logger } from './observability/logger.js';
import { createMetrics } from './observability/metrics.js';
import { startTracing, type SpanExporter } from './observability/tracing.js';
import { DevProvider } from './payments/dev.js';
import { MooveProvider } from './payments/moove.js';
import type { PaymentProvider } from './payments/provider.js';
import { X402Rail } from './payments/x402/rail.js';
import { Reconciler } from './payments/reconciler.js';
import { listen, probePort, withBoundPort, type BoundAddress } from './http/listen.js';
import { registerMooveWebhookRoute } from './http/moove-webhook.js';
import { MOOVE_WEBHOOK_EVENT_MEMORY_MS } from './payments/webhook.js';
import { configSha, maxCallDeadline, prepareReload } from './gateway/reload.js';
import { GatewaySwitch } from './gateway/switch.js';
import { createRequestMemory } from './gateway/memory.js';
import { UpstreamPool, type EndpointUpstreams } from './gateway/upstreams.js';
import type { ReloadResult } from './observability/metrics.js';
import { buildGateway, type Gateway } from './server.js';
import { createStore } from './store/create.js';
import { Outbox } from './store/outbox.js';
import { outboxDirFor } from './store/outbox-file.js';
import { openAdminChannel } from './admin-channel.js';
import type { Store } from './store/store.js';

export interface RunningGateway {
  /** The gateway serving new requests (a reload replaces it). */
  readonly gateway: Gateway;
  /** The effective config (a reload replaces it). */
  readonly config: GatewayConfig;
  /** SPEC §18: re-read and apply the config file (what SIGHUP does); resolves with the result. */
  reload(): Promise<ReloadResult>;
  /** The MCP endpoint on the bound address (server.port 0: the port the OS gave). */
  url: string;
  store: Store;
  reconciler: Reconciler;
  close(): Promise<void>;
}

/**
 * Builds and listens; resolves once the gateway accepts connections. Used by the CLI and by tests.
 * `clock` replaces the system clock of the store, paywall, settlement, deadlines and reconciler (tests move
 * time forward with test/helpers/clock.ts).
 */
export async function runGateway(given: GatewayConfig, options: { logger?: Logger; configPath?: string; clock?: Clock; spanExporter?: SpanExporter; adminSocket?: string; adjust?: (config: GatewayConfig) => GatewayConfig } = {}): Promise<RunningGateway> {
  const logger = options.logger ?? createLogger(given.logging.level);
  const clock = options.clock ?? systemClock;
  // server.port 0 (tests): bound first, so a public URL derived from the port names the bound one; no
  // request can wait meanwhile, since nobody knows the port yet. A configured port is bound last, so it
  // accepts connections only once the gateway can answer them.
  const listener = createServer();
  let bound: BoundAddress | null = null;
  if (given.server.port === 0) bound = await listen(listener, given.server.host, 0);
  const config = bound ? withBoundPort(given, bound.port) : given;
  try {
    return await assemble(config, { logger, clock, listener, bound, configPath: options.configPath, spanExporter: options.spanExporter, adminSocket: options.adminSocket, adjust: options.adjust });
  } catch (error) {
    listener.close();
    throw error;
  }
}

async function assemble(
  config: GatewayConfig,
  options: { logger: Logger; clock: Clock; listener: Server; bound: BoundAddress | null; configPath?: string | undefined; spanExporter?: SpanExporter | undefined; adminSocket?: string | undefined; adjust?: ((config: GatewayConfig) => GatewayConfig) | undefined },
): Promise<RunningGateway> {
  // SPEC §22: a start that fails leaves nothing behind — each part started is stopped again, last first
  // (children and the bridge's socket directory included), and the error names the cause in one line.
  const undo: (() => Promise<unknown> | undefined)[] = [];
  try {
    return await assembleParts(config, options, undo);
  } catch (error) {
    for (const step of undo.reverse()) await Promise.resolve(step()).catch(() => undefined);
    throw new StartError(startFailure(error, config), { cause: error });
  }
}

/** A start-up failure, its message one line naming the cause (SPEC §22). */
export class StartError extends Error {}

function startFailure(error: unknown, config: GatewayConfig): string {
  const code = (error as NodeJS.ErrnoException).code;
  const where = `${config.server.host}:${config.server.port}`;
  if (code === 'EADDRINUSE') return `cannot listen on ${where}: the port is in use (EADDRINUSE)`;
  if (code === 'EACCES') return `cannot listen on ${where}: permission denied (EACCES)`;
  if (code === 'EADDRNOTAVAIL') return `cannot listen on ${where}: no such local address (EADDRNOTAVAIL)`;
  const message = (error as Error)?.message ?? String(error);
  return message.split('\n')[0] ?? message;
}

async function assembleParts(
  config: GatewayConfig,
  options: { logger: Logger; clock: Clock; listener: Server; bound: BoundAddress | null; configPath?: string | undefined; spanExporter?: SpanExporter | undefined; adminSocket?: string | undefined; adjust?: ((config: GatewayConfig) => GatewayConfig) | undefined },
  undo: (() => Promise<unknown> | undefined)[],
): Promise<RunningGateway> {
  const { logger, clock } = options;
  // SPEC §22: a port in use fails the start at once, before the store or any stdio child is started.
  if (!options.bound) await probePort(config.server.host, config.server.port);
  const store = await createStore(config, { logger, clock });
  undo.push(() => store.close());
  await store.reportReplicaCoverage?.();
  // Off (no otlpEndpoint, no console exporter): null, and nothing of OpenTelemetry is loaded.
  const tracing = await startTracing(config.tracing, logger, options.spanExporter);
  undo.push(() => tracing?.shutdown());
  const metrics = createMetrics(() => store.countPendingCharges(), () => store.ping(), () => store.unreplicatedWrites?.() ?? {}, () => store.ledgerLinks?.() ?? {});
  // Every endpoint's upstream (SPEC §16, §18): an HTTP agent, or a stdio bridge on a private socket the proxy reaches like any HTTP upstream.
  // SPEC §22: relative paths in upstream.command resolve against the config file's directory.
  const upstreams = new UpstreamPool({ logger, cwd: options.configPath === undefined ? undefined : dirname(resolve(options.configPath)) });
  undo.push(() => upstreams.closeAll());
  metrics.stdioChildrenSource.read = () => upstreams.stdioChildren();
  const targets = await upstreams.acquire(config);
  const provider: PaymentProvider =
    config.payments.provider === 'moove'
      ? new MooveProvider({ apiKey: config.payments.moove.apiKey, baseUrl: config.payments.moove.baseUrl, logger, metrics })
      : new DevProvider({ store, publicUrl: config.server.publicUrl });
  undo.push(() => provider.close?.());
  // SPEC §21: records whose money already moved wait here while the store is down (a memory store has no file: it dies with the process).
  const outbox = new Outbox({ store, dir: config.store.type === 'redis' ? outboxDirFor(config.store) : null, logger, clock, onDepth: (pending) => metrics.outboxPending.set(pending) });
  await outbox.start();
  undo.push(() => {
    outbox.close();
    return undefined;
  });
  const x402Rail = X402Rail.fromConfig(config, { store, outbox, logger, metrics, clock: clock.now }); // null when payments.x402 is off
  undo.push(() => x402Rail?.close());
  // SPEC §21: paid and released request ids per session, and pending call deadlines, outlive a reload.
  const memory = createRequestMemory(tracing ? tracing.traceStore(store) : store, clock);
  undo.push(() => {
    memory.close();
    return undefined;
  });

  const build = (next: GatewayConfig, nextTargets: EndpointUpstreams): Promise<Gateway> => buildGateway(next, {
    // Traced: store and provider calls made for a request become children of its span (elsewhere they run as they are).
    store: tracing ? tracing.traceStore(store) : store,
    provider: tracing ? tracing.traceProvider(provider) : provider,
    upstream: nextTargets.upstream,
    servers: nextTargets.servers,
    logger,
    metrics,
    clock,
    x402Rail,
    tracing,
    memory,
    registerProviderRoutes: (app, settler) =>
      registerMooveWebhookRoute(app, {
        secret: next.payments.provider === 'moove' ? next.payments.moove.webhookSecret : '',
        logger,
        metrics,
        onLink: async (linkId) => {
          await settler.observeByRef(linkId);
        },
        claimEvent: (eventId) => store.claimEvent('moove', eventId, MOOVE_WEBHOOK_EVENT_MEMORY_MS),
      }),
  });
  const gateway = await build(config, targets);
  undo.push(() => gateway.app.close());
  await gateway.app.ready();
  const front = new GatewaySwitch(gateway, options.listener);
  const reconciler = new Reconciler({ store, provider, settler: gateway.settler, metrics, logger, intervalMs: config.payments.reconcile.interval, clock });

  const { port, origin } = options.bound ?? (await listen(front.server, config.server.host, config.server.port));
  reconciler.start();
  logger.info({ evt: 'start', config: maskSecrets(config), configPath: options.configPath, port }, 'tollbooth gateway listening');
  if (provider.name === 'dev') {
    logger.warn({ evt: 'dev_provider' }, 'payments.provider is "dev": checkout links are local test pages and no real money moves. Do not use in production.');
  }

  // SPEC §18: the config this process runs; a reload replaces it (and the gateway built from it) as a whole.
  let effective = config;
  metrics.configInfo.set({ sha: configSha(config) }, 1);
  // A memory store lives in this process only: the admin verbs reach it through a Unix socket (admin-channel.ts).
  // Not fatal: without it the gateway still serves, and the CLI says how to reach the store.
  const adminChannel =
    options.adminSocket && config.store.type === 'memory'
      ? await openAdminChannel(options.adminSocket, { store, config: () => effective, peer: { pid: process.pid, url: `${origin}${config.server.mcpPath}`, configPath: options.configPath ?? null }, logger }).catch((error: unknown) => {
          logger.warn({ evt: 'admin_channel', path: options.adminSocket, code: (error as { code?: string }).code }, `no admin socket, so the admin verbs cannot reach this gateway's memory store: ${(error as Error).message}`);
          return null;
        })
      : null;
  const drainMs = (running: GatewayConfig): number => maxCallDeadline(running) + 1_000;

  let closing: Promise<void> | null = null;
  // The upstreams each gateway still serving requests uses: one no gateway uses any more is closed.
  const inUse = new Map<Gateway, Set<string>>([[gateway, targets.keys]]);
  const releaseUnused = (): Promise<void> => upstreams.retainOnly(new Set([...inUse.values()].flatMap((keys) => [...keys])));
  let reloading: Promise<ReloadResult> = Promise.resolve('success');
  const reload = (): Promise<ReloadResult> => {
    reloading = reloading.then(async () => {
      if (!options.configPath) throw new Error('reload needs the config file the gateway was started from');
      if (closing) return 'refused';
      const outcome = prepareReload(effective, options.configPath, process.env, options.adjust);
      if (outcome.result !== 'success') {
        metrics.configReloads.inc({ result: outcome.result });
        logger.error({ evt: 'config_reload', result: outcome.result, file: options.configPath, path: outcome.path, line: outcome.line }, outcome.message);
        return outcome.result;
      }
      // A reloaded file still says port 0: its derived public URL names the port this process bound.
      const next = options.bound ? withBoundPort(outcome.config, options.bound.port) : outcome.config;
      let nextTargets: EndpointUpstreams;
      let nextGateway: Gateway;
      try {
        nextTargets = await upstreams.acquire(next);
        nextGateway = await build(next, nextTargets);
        await nextGateway.app.ready();
      } catch (error) {
        await releaseUnused();
        metrics.configReloads.inc({ result: 'invalid' });
        logger.error({ evt: 'config_reload', result: 'invalid', file: options.configPath, code: (error as { code?: string }).code }, `${options.configPath}: the new config could not be started: ${(error as Error).message}`);
        return 'invalid';
      }
      const previous = effective;
      const previousGateway = front.current;
      effective = next;
      inUse.set(nextGateway, nextTargets.keys);
      metrics.configInfo.reset();
      metrics.configInfo.set({ sha: configSha(next) }, 1);
      metrics.configReloads.inc({ result: 'success' });
      // Atomic for new requests; the previous gateway drains in the background, then upstreams no config uses close.
      const drained = front.swap(nextGateway, drainMs(previous));
      logger.info({ evt: 'config_reload', result: 'success', file: options.configPath, sha: configSha(next), servers: Object.keys(next.servers) }, 'config reloaded');
      void drained
        .then(() => {
          inUse.delete(previousGateway);
          return closing ? undefined : releaseUnused();
        })
        .catch(() => undefined);
      return 'success';
    });
    return reloading;
  };

  const close = (): Promise<void> => {
    closing ??= (async () => {
      await adminChannel?.close().catch(() => undefined);
      await reconciler.stop();
      // SPEC §22: calls in flight get up to server.drainTimeout, then the children are stopped.
      await front.close(effective.server.drainTimeout);
      memory.close();
      outbox.close();
      await upstreams.closeAll().catch(() => undefined);
      await provider.close?.().catch(() => undefined);
      await x402Rail?.close().catch(() => undefined);
      await store.close().catch(() => undefined);
      await tracing?.shutdown(); // the last spans (bounded: a collector that is down does not hold the exit)
    })();
    return closing;
  };
  return {
    get gateway() {
      return front.current;
    },
    get config() {
      return effective;
    },
    url: `${origin}${config.server.mcpPath}`,
    store,
    reconciler,
    reload,
    close,
  };
}

/** Signals that arrived before startGateway listened for them itself. */
export interface HeldSignals {
  stop?: string;
  reload: boolean;
}

/** How long `start` waits for buffered log lines to reach stdout before it exits anyway. */
const LOG_FLUSH_MS = 5_000;

/**
 * The CLI's `start`: run until a signal, then drain, flush the buffered log lines (observability/logger.ts)
 * and exit 0. The signals are listened for before anything starts (SPEC §22): a SIGHUP during start-up is
 * applied once the gateway serves, a SIGTERM/SIGINT stops it as soon as it can. A start that fails prints
 * one line naming the cause and exits 1, with nothing left running.
 */
export async function startGateway(config: GatewayConfig, options: { configPath: string; held?: HeldSignals; adminSocket?: string; adjust?: (config: GatewayConfig) => GatewayConfig }): Promise<void> {
  const logger = createLogger(config.logging.level);
  const exit = (code: number) => (): Promise<never> => flushLogs(logger, LOG_FLUSH_MS).then(() => process.exit(code));
  let running: RunningGateway | undefined;
  // Signals the CLI held while it read the config (cli.ts holdSignals), taken over here.
  let stopRequested: string | undefined = options.held?.stop;
  let reloadQueued = options.held?.reload ?? false;
  const stop = (signal: string): void => {
    if (stopRequested !== undefined) return;
    stopRequested = signal;
    if (!running) return; // applied once the start finishes (below)
    logger.info({ evt: 'shutdown', signal }, 'finishing calls in flight, then exiting');
    void running.close().then(exit(0), exit(1));
  };
  const reload = (): void => {
    if (!running) {
      reloadQueued = true;
      logger.info({ evt: 'config_reload_queued', signal: 'SIGHUP', file: options.configPath }, 'SIGHUP during start-up: the config is re-read once the gateway serves');
      return;
    }
    logger.info({ evt: 'config_reload_requested', signal: 'SIGHUP', file: options.configPath }, 're-reading the config file');
    running.reload().catch((error: unknown) => logger.error({ evt: 'config_reload', result: 'invalid', file: options.configPath, code: (error as { code?: string }).code }, 'config reload failed'));
  };
  process.once('SIGTERM', () => stop('SIGTERM'));
  process.once('SIGINT', () => stop('SIGINT'));
  process.on('SIGHUP', reload);
  try {
    running = await runGateway(config, { logger, configPath: options.configPath, adminSocket: options.adminSocket, adjust: options.adjust });
  } catch (error) {
    const line = error instanceof StartError ? error.message : startFailure(error, config);
    await flushLogs(logger, LOG_FLUSH_MS); // what was logged before the failure (info and below)
    process.stderr.write(`tollbooth: cannot start: ${line}\n`);
    process.exit(1);
  }
  if (stopRequested !== undefined) {
    const signal = stopRequested;
    stopRequested = undefined;
    stop(signal);
  } else if (reloadQueued) reload();
}
