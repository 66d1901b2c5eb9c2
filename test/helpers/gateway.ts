// Runs a real gateway in this test process (runGateway: real fastify on a free port, real store,
// real providers) with its JSON log lines captured, so tests can assert on logs and metrics too.
import { Writable } from 'node:stream';
import type { Test } from 'tap';
import type { Clock } from '../../src/clock.js';
import { waitFor } from './clock.js';
import { configSchema, type ConfigInput, type GatewayConfig } from '../../src/config/schema.js';
import { createLogger } from '../../src/observability/logger.js';
import type { SpanExporter } from '../../src/observability/tracing.js';
import { runGateway, type RunningGateway } from '../../src/start.js';

export interface TestGateway extends RunningGateway {
  /** http://127.0.0.1:PORT/mcp */
  url: string;
  origin: string;
  config: GatewayConfig;
  /** Every log line so far, parsed. */
  logs(): Record<string, unknown>[];
  /** The raw log output, for secret scans. */
  logText(): string;
}

/** The config most tests start from: the research SKU (5.00 USDC, 3 credits), generous limits, port 0. */
export function testConfig(upstreamUrl: string, overrides: Partial<ConfigInput> = {}): ConfigInput {
  return {
    server: { host: '127.0.0.1', port: 0 },
    upstream: { url: upstreamUrl },
    store: { type: 'memory' },
    payments: { provider: 'dev' },
    skus: { research: { label: 'Research tools', amount: '5.00', currency: 'USDC', credits: 3 } },
    tools: {
      fetch_readable: { sku: 'research', cost: 1 },
      costly: { sku: 'research', cost: 2 },
      failing: { sku: 'research', cost: 1 },
      throwing: { sku: 'research', cost: 1 },
      slow: { sku: 'research', cost: 1 },
      with_schema: { sku: 'research', cost: 1 },
    },
    limits: { perHandle: { ratePerSecond: 100, burst: 100 }, challengesPerClient: { ratePerSecond: 100, burst: 100 }, newChargesPerSecond: 10_000 },
    logging: { level: 'info' },
    ...overrides,
  };
}

/**
 * Starts a gateway; it is closed when the test ends. Port 0 (the default) binds any free port; publicUrl
 * then follows the bound port unless the config sets one. `clock`: a test clock (helpers/clock.ts).
 * `spanExporter`: tracing on, finished spans there (an InMemorySpanExporter) instead of the configured exporter.
 */
export async function startTestGateway(t: Test, input: ConfigInput, options: { clock?: Clock; spanExporter?: SpanExporter; configPath?: string } = {}): Promise<TestGateway> {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(...chunk.toString('utf8').split('\n').filter(Boolean));
      done();
    },
  });
  const config = configSchema.parse({ ...input, server: { ...input.server, port: input.server?.port ?? 0 } });
  const logger = createLogger(config.logging.level, sink);
  // configPath: where the config came from (stdio children run in its directory, SPEC §22).
  const running = await runGateway(config, { logger, clock: options.clock, spanExporter: options.spanExporter, configPath: options.configPath });
  t.teardown(() => running.close());
  return {
    ...running,
    url: running.url,
    origin: new URL(running.url).origin,
    // The config the gateway runs (a port-0 publicUrl names the bound port).
    config: running.config,
    logs: () => lines.map((line) => JSON.parse(line) as Record<string, unknown>),
    logText: () => lines.join('\n'),
  };
}

/**
 * A port that was free a moment ago, for a process that cannot bind port 0 and report back (a CLI child
 * logging at warn, server-everything, prometheus). Racy by nature: callers retry on EADDRINUSE. Anything
 * in this process binds port 0 instead (startTestGateway, origins, SDK servers).
 */
export async function freePort(): Promise<number> {
  const net = await import('node:net');
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

type Json = Record<string, any>;
let nextRawId = 1;

/** A raw legacy tools/call over fetch (the paid upstream is stateless: no session needed); the parsed reply. */
export async function rawToolCall(gateway: { url: string }, name: string, args: Json): Promise<Json> {
  const response = await fetch(gateway.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' },
    body: JSON.stringify({ jsonrpc: '2.0', id: nextRawId++, method: 'tools/call', params: { name, arguments: args } }),
  });
  return (await response.json()) as Json;
}

/** A handle holding one pack of `research`, paid through the dev checkout like a payer would. */
export async function fundedHandle(gateway: { url: string }, tool = 'fetch_readable', args: Json = { url: 'fund' }): Promise<string> {
  const challenge = (await rawToolCall(gateway, tool, args)).result._meta['xyz.tollbooth/challenge'];
  const pay = await fetch(`${challenge.checkoutUrl}/pay`, { method: 'POST', redirect: 'manual' });
  if (pay.status !== 303) throw new Error(`pay failed: ${pay.status}`);
  return challenge.retry.value as string;
}

/** The handle's `research` balance, read from the gateway's own store. */
export async function researchBalance(gateway: TestGateway, handle: string): Promise<number> {
  const { hashHandle } = await import('../../src/paywall/handles.js');
  return (await gateway.store.getHandle(hashHandle(handle, gateway.config.handles.hashSecret)))?.balances.research ?? 0;
}

/**
 * Resolves once the handle's ledger holds `count` spend entries: a priced call read to its end and its
 * credit committed (for tests that wait for a call to conclude while nobody listens, instead of a sleep).
 */
export async function waitForSpends(gateway: TestGateway, handle: string, count = 1): Promise<void> {
  const { hashHandle } = await import('../../src/paywall/handles.js');
  const hash = hashHandle(handle, gateway.config.handles.hashSecret);
  await waitFor(async () => (await gateway.store.ledgerTail(hash, 100)).filter((entry) => entry.kind === 'spend').length >= count, `${count} spend(s) in the ledger`);
}
