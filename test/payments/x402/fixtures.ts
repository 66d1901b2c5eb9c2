// Shared set-up of the x402 rail tests: Base Sepolia USDC terms (a token @x402/evm knows, so the
// x402 client's default spend controls accept it), one priced call, and a rail wired to the fake
// facilitator over real HTTP with a log that tests can read.
import { randomBytes } from 'node:crypto';
import { Writable } from 'node:stream';
import type { PaymentRequired } from '@x402/core/types';
import { createLogger } from '../../../src/observability/logger.js';
import { createMetrics, type Metrics } from '../../../src/observability/metrics.js';
import { FacilitatorClient, type FacilitatorClientOptions } from '../../../src/payments/x402/facilitator.js';
import { X402Rail } from '../../../src/payments/x402/rail.js';
import type { X402Call, X402Terms } from '../../../src/payments/x402/requirements.js';
import type { PriceTag } from '../../../src/mcp/tools-list.js';
import type { JsonObject } from '../../../src/mcp/jsonrpc.js';
import type { Store } from '../../../src/store/store.js';
import { challengeResult } from '../../../src/mcp/challenge.js';

export const TERMS: X402Terms = {
  network: 'eip155:84532',
  asset: '0x036CbD53842c5426634e7929541eC2318f3dCF7e',
  assetDecimals: 6,
  currency: 'USDC',
  payTo: '0x209693Bc6afc0C5328bA36FaF03C514EF312287C',
  maxTimeoutSeconds: 120,
  extra: { name: 'USDC', version: '2' },
};

export const PRICE: PriceTag = { sku: 'research', cost: 1, amount: '5.00', currency: 'USDC', credits: 250, label: 'Research tools', charge: 'success' };

export const call = (overrides: Partial<X402Call> = {}): X402Call => ({
  tool: 'fetch_readable',
  price: PRICE,
  endpointUrl: 'http://127.0.0.1:8080/mcp',
  shape: { era: 'legacy', structuredContentAllowed: true },
  ...overrides,
});

/** The §6.3 challenge the paywall builds today for this call. */
export const plainChallenge = (c: X402Call = call()): JsonObject =>
  challengeResult(
    { reason: 'payment_required', tool: c.tool, price: c.price, checkoutUrl: 'http://127.0.0.1:8080/tollbooth/checkout/abc', expiresAt: Date.UTC(2030, 0, 1), handle: 'tb_s_AAAAAAAAAAAAAAAAAAAAAA', argumentName: 'tollboothToken' },
    c.shape,
  );

/** PaymentRequired as an x402 client reads it from a challenge (structuredContent, else the second text item). */
export function paymentRequiredOf(result: JsonObject): PaymentRequired {
  const content = result.content as { type: string; text: string }[];
  return JSON.parse((content[1] as { text: string }).text) as PaymentRequired;
}

export class LogCapture {
  readonly lines: string[] = [];
  readonly stream = new Writable({
    write: (chunk: Buffer, _encoding, done) => {
      this.lines.push(...chunk.toString('utf8').split('\n').filter(Boolean));
      done();
    },
  });
  readonly logger = createLogger('debug', this.stream);
  entries(): Record<string, unknown>[] {
    return this.lines.map((line) => JSON.parse(line) as Record<string, unknown>);
  }
}

export interface RailFixture {
  rail: X402Rail;
  log: LogCapture;
  metrics: Metrics;
  facilitator: FacilitatorClient;
}

export function makeRail(store: Store, facilitatorUrl: string, options: Partial<FacilitatorClientOptions> = {}): RailFixture {
  const log = new LogCapture();
  const metrics = createMetrics(async () => 0);
  const facilitator = new FacilitatorClient({ url: facilitatorUrl, logger: log.logger, metrics, ...options });
  const rail = new X402Rail({ terms: TERMS, facilitator, store, logger: log.logger, metrics });
  return { rail, log, metrics, facilitator };
}

/** tools/call params as an agent sends them, with the payment in _meta. */
export const paidParams = (payment: unknown, extraMeta: JsonObject = {}): JsonObject => ({
  name: 'fetch_readable',
  arguments: { url: 'https://example.com/' },
  _meta: { ...extraMeta, 'x402/payment': payment },
});

export async function metricValue(metrics: Metrics, result: string): Promise<number> {
  const values = (await metrics.x402Payments.get()).values;
  return values.filter((v) => v.labels.result === result).reduce((sum, v) => sum + v.value, 0);
}

export const randomAddress = (): string => `0x${randomBytes(20).toString('hex')}`;
