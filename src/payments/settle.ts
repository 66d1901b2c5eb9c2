// Applies what the provider says about a charge (SPEC §7.4–7.6). Every observer goes through here:
// the agent's retry, the reconciler and webhooks. The store's claimSettlement makes it exactly once.
import type { Logger } from '../observability/logger.js';
import type { Metrics } from '../observability/metrics.js';
import type { ChargeRecord, Store } from '../store/store.js';
import type { ChargeReading, PaymentProvider } from './provider.js';
import { decideSettlement, type SettlementPolicy } from './settlement.js';

/** §6.2 step 6: the retry path reads a charge at most once per 2 s. */
export const POLL_FLOOR_MS = 2_000;
const FIRST_POLL_MS = 3_000;
const MAX_POLL_INTERVAL_MS = 60_000;

export type Observation = 'granted' | 'underpaid' | 'still_pending' | 'expired' | 'skipped' | 'already_settled';

export interface SettlerDeps {
  store: Store;
  provider: PaymentProvider;
  policy: SettlementPolicy;
  metrics: Metrics;
  logger: Logger;
  now: () => number;
  random?: () => number;
}

export class Settler {
  readonly #deps: SettlerDeps;

  constructor(deps: SettlerDeps) {
    this.#deps = deps;
  }

  /** When the reconciler should look at a charge next: 3 s, 6 s, 12 s … capped at 60 s, ±30% jitter. */
  nextPollAt(charge: ChargeRecord, now: number): number {
    const base = Math.min(FIRST_POLL_MS * 2 ** (charge.pollCount + 1), MAX_POLL_INTERVAL_MS);
    const jitter = 0.7 + 0.6 * (this.#deps.random ?? Math.random)();
    return now + Math.round(base * jitter);
  }

  /**
   * Reads the charge from the provider (unless someone did within the poll floor) and settles it.
   * @param bypassPollFloor webhooks re-read at once: their payload is a trigger, never evidence
   */
  async observe(charge: ChargeRecord, options: { bypassPollFloor?: boolean } = {}): Promise<Observation> {
    const { store, provider, now } = this.#deps;
    if (charge.status === 'settled' || charge.status === 'underpaid') return 'already_settled';
    if (!charge.providerRef) return 'skipped';
    const at = now();
    const floor = options.bypassPollFloor ? 0 : POLL_FLOOR_MS;
    if (!(await store.takePollSlot(charge.handleHash, charge.nonce, at, floor, this.nextPollAt(charge, at)))) return 'skipped';
    // Provider requests are counted by the provider itself (tollbooth_provider_requests_total).
    const reading: ChargeReading = await provider.readCharge(charge.providerRef);
    return this.apply(charge, reading);
  }

  /** A provider told us a link changed (webhook, dev pay action): re-read it now. Unknown links change nothing. */
  async observeByRef(providerRef: string): Promise<Observation> {
    const charge = await this.#deps.store.findChargeByRef(providerRef);
    return charge ? this.observe(charge, { bypassPollFloor: true }) : 'skipped';
  }

  /** Settles a charge from a provider reading (exported for tests and the reconciler). */
  async apply(charge: ChargeRecord, reading: ChargeReading): Promise<Observation> {
    const { store, metrics, logger } = this.#deps;
    if (reading.status === 'active') return 'still_pending';
    if (reading.status === 'expired') return 'expired';
    const decision = decideSettlement(charge, reading.receivedAmount, this.#deps.policy);
    const claim = await store.claimSettlement({
      handleHash: charge.handleHash,
      nonce: charge.nonce,
      outcome: decision.outcome,
      credits: decision.credits,
      receivedAmount: reading.receivedAmount,
    });
    if (!claim.claimed) return claim.charge?.status === 'underpaid' ? 'underpaid' : 'already_settled';
    metrics.settlements.inc({ sku: charge.sku, result: decision.result });
    if (decision.credits > 0) metrics.credits.inc({ sku: charge.sku, kind: 'granted' }, decision.credits);
    logger.info({ evt: 'settlement', sku: charge.sku, result: decision.result, credits: decision.credits, amount: charge.amount, currency: charge.currency }, 'charge settled');
    return decision.outcome === 'underpaid' ? 'underpaid' : 'granted';
  }
}
