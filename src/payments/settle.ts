// Applies what the provider says about a charge (SPEC §7.4–7.6). Every observer goes through here:
// the agent's retry, the reconciler and webhooks. The store's claimSettlement makes it exactly once.
// The charge lifecycle the observers drive lives here too, so a retry and the reconciler agree:
// - a completed link is claimed (pending, abandoned or expired: money that arrived is never ignored);
// - a pending charge is abandoned when its link is dead (Moove `inactive` or 404 before our TTL,
//   §7.2) or when it is past its TTL and not completed, readable or not (§7.6); an abandoned charge
//   stays on the reconciler's schedule, slower, for the retention window, so a late payment on any
//   abandoned charge is found without webhooks;
// - at its last look, a charge the provider still will not let us read is marked expired.
import { sleep, type Clock } from '../clock.js';
import type { Logger } from '../observability/logger.js';
import type { Metrics } from '../observability/metrics.js';
import { RETENTION_MS } from '../store/policy.js';
import type { ChargeRecord, Store } from '../store/store.js';
import { ProviderError, type ChargeReading, type PaymentProvider } from './provider.js';
import { decideSettlement, type SettlementPolicy } from './settlement.js';

/** §6.2 step 6: the retry path reads a charge at most once per 2 s. */
export const POLL_FLOOR_MS = 2_000;
const FIRST_POLL_MS = 3_000;
const MAX_POLL_INTERVAL_MS = 60_000;
/** Abandoned charges: the gap grows with the time since the link expired, from 1 min to at most 1 h. */
const ABANDONED_MIN_INTERVAL_MS = 60_000;
const ABANDONED_MAX_INTERVAL_MS = 3_600_000;
/** The last look at an abandoned charge happens in the last hour of its retention window, before its record ends. */
export const FINAL_LOOK_MS = 3_600_000;

export type Observation =
  | 'granted'
  | 'underpaid'
  | 'still_pending' // active, not paid
  | 'expired' // the link can no longer be paid (nothing changed on our side)
  | 'abandoned' // this observation abandoned the pending charge: challenges open a new link
  | 'unreadable' // this observation marked the charge expired (never readable by the end of retention)
  | 'skipped'
  | 'already_settled';

export interface SettlerDeps {
  store: Store;
  provider: PaymentProvider;
  policy: SettlementPolicy;
  metrics: Metrics;
  logger: Logger;
  /** Wall time for charge records and poll schedules; monotonic time and a timer for waiting on another replica. */
  clock: Clock;
  random?: () => number;
}

/** How often a retry that waits for another replica's read looks at the charge again. */
const WAIT_POLL_MS = 50;

export class Settler {
  readonly #deps: SettlerDeps;
  /** Reads in flight in this process, by charge: a second observer joins the first instead of waiting on the store. */
  readonly #reading = new Map<string, Promise<Observation>>();

  constructor(deps: SettlerDeps) {
    this.#deps = deps;
  }

  /**
   * When the reconciler should look at a charge next, ±30% jitter. A pending charge inside its TTL:
   * 3 s, 6 s, 12 s … capped at 60 s. Past its TTL or abandoned: the gap is the time since the link
   * expired, between 1 min and 1 h (a slow backoff), never past the last look; after the last look,
   * never again (the record's end).
   */
  nextPollAt(charge: ChargeRecord, now: number): number {
    const lastLookAt = charge.expiresAt + RETENTION_MS - FINAL_LOOK_MS;
    if (now >= lastLookAt) return charge.expiresAt + RETENTION_MS;
    const jitter = 0.7 + 0.6 * (this.#deps.random ?? Math.random)();
    if (charge.status === 'pending' && charge.expiresAt > now) {
      const base = Math.min(FIRST_POLL_MS * 2 ** (charge.pollCount + 1), MAX_POLL_INTERVAL_MS);
      return now + Math.round(base * jitter);
    }
    const base = Math.min(Math.max(now - charge.expiresAt, ABANDONED_MIN_INTERVAL_MS), ABANDONED_MAX_INTERVAL_MS);
    return Math.min(now + Math.round(base * jitter), lastLookAt);
  }

  /**
   * Reads the charge from the provider (unless someone did within the poll floor), settles it, and
   * moves its lifecycle on (see the top of this file). A read failure is rethrown unless this
   * observation abandoned the charge (the caller then shows a new link) or it was a 404 (a dead link).
   * @param bypassPollFloor webhooks re-read at once: their payload is a trigger, never evidence
   * @param awaitOtherRead the agent's retry (§6.5 last rule): when another observer holds the poll
   *   slot, wait for its read (at most the poll floor) and answer with its outcome, instead of 'skipped'
   */
  async observe(charge: ChargeRecord, options: { bypassPollFloor?: boolean; awaitOtherRead?: boolean } = {}): Promise<Observation> {
    if (charge.status === 'settled' || charge.status === 'underpaid') return 'already_settled';
    const providerRef = charge.providerRef;
    if (!providerRef) return 'skipped';
    const key = `${charge.handleHash}\n${charge.nonce}`;
    const inFlight = this.#reading.get(key);
    let observation: Observation;
    if (inFlight && !options.bypassPollFloor) {
      observation = joined(await inFlight); // the same outcome (or failure) as the read already under way
    } else {
      const reading = this.#observeOnce(charge, providerRef, options.bypassPollFloor === true);
      this.#reading.set(key, reading);
      try {
        observation = await reading;
      } finally {
        if (this.#reading.get(key) === reading) this.#reading.delete(key);
      }
    }
    return observation === 'skipped' && options.awaitOtherRead ? this.#awaitOtherRead(charge) : observation;
  }

  /** A provider told us a link changed (webhook, dev pay action): re-read it now. Unknown links change nothing. */
  async observeByRef(providerRef: string): Promise<Observation> {
    const charge = await this.#deps.store.findChargeByRef(providerRef);
    return charge ? this.observe(charge, { bypassPollFloor: true }) : 'skipped';
  }

  async #observeOnce(charge: ChargeRecord, providerRef: string, bypassPollFloor: boolean): Promise<Observation> {
    const { store, provider, clock } = this.#deps;
    const at = clock.now();
    const floor = bypassPollFloor ? 0 : POLL_FLOOR_MS;
    if (!(await store.takePollSlot(charge.handleHash, charge.nonce, at, floor, this.nextPollAt(charge, at)))) return 'skipped';
    // Provider requests are counted by the provider itself (tollbooth_provider_requests_total).
    let reading: ChargeReading;
    try {
      reading = await provider.readCharge(providerRef);
    } catch (error) {
      // 404 before our TTL: a dead link (§7.2). Any other failure: unknown, but a link past its TTL
      // is not shown again whatever the provider says, and the charge stays polled.
      const dead = error instanceof ProviderError && error.kind === 'not_found';
      const outcome = await this.#afterUnpaidReading(charge, at, dead, true);
      if (dead) return outcome ?? 'expired';
      // Still rate limited after the provider's own backoff: the reconciler needs to know, to pause.
      if (outcome !== null && !(error instanceof ProviderError && error.kind === 'rate_limited')) return outcome;
      throw error;
    }
    if (reading.status === 'completed') return this.apply(charge, reading);
    const observation = (await this.#afterUnpaidReading(charge, at, reading.status === 'expired', false)) ?? (reading.status === 'active' ? 'still_pending' : 'expired');
    await this.#markRead(charge, at);
    return observation;
  }

  /**
   * Tells waiting retries on other replicas that this slot's read is done (still unpaid). Best effort:
   * if the write is lost they wait for the floor, as they would without it.
   */
  async #markRead(charge: ChargeRecord, polledAt: number): Promise<void> {
    try {
      await this.#deps.store.markChargeRead(charge.handleHash, charge.nonce, polledAt);
    } catch (error) {
      this.#deps.logger.debug({ evt: 'charge_read_unmarked', code: (error as { code?: string }).code }, 'the end of a provider read could not be recorded; retries wait for the poll floor instead');
    }
  }

  /**
   * Another replica holds the poll slot: watch the charge in the store until that read has changed it
   * (claimed or abandoned), has ended with the link still unpaid (lastReadAt: answered at once, no
   * second read inside the floor), or the slot's floor has passed (at most POLL_FLOOR_MS of real time),
   * then take one more look ourselves if the slot is free again.
   */
  async #awaitOtherRead(charge: ChargeRecord): Promise<Observation> {
    const { store, clock } = this.#deps;
    const started = clock.monotonic();
    const first = await store.getCharge(charge.handleHash, charge.nonce);
    const waitMs = Math.min(POLL_FLOOR_MS, Math.max(0, (first?.lastPolledAt ?? 0) + POLL_FLOOR_MS - clock.now()));
    let current = first;
    while (current && current.status === charge.status && !readDone(current) && clock.monotonic() - started < waitMs) {
      await sleep(clock, WAIT_POLL_MS);
      current = await store.getCharge(charge.handleHash, charge.nonce);
    }
    if (!current) return 'skipped';
    if (current.status === 'settled') return 'already_settled';
    if (current.status === 'underpaid') return 'underpaid';
    if (current.status !== charge.status) return current.status === 'abandoned' ? 'abandoned' : 'skipped';
    if (readDone(current)) return 'still_pending';
    return current.providerRef ? this.#observeOnce(current, current.providerRef, false) : 'skipped';
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

  /**
   * A reading that shows no payment (active, dead, or unreadable): abandon a pending charge whose link
   * is dead or past its TTL; at the last look, mark a charge the provider would not let us read expired.
   * Returns what changed, or null.
   */
  async #afterUnpaidReading(charge: ChargeRecord, at: number, dead: boolean, unreadable: boolean): Promise<Observation | null> {
    const { store, metrics, logger } = this.#deps;
    if (unreadable && at >= charge.expiresAt + RETENTION_MS - FINAL_LOOK_MS && (charge.status === 'pending' || charge.status === 'abandoned')) {
      if (!(await store.expireCharge(charge.handleHash, charge.nonce, at))) return null;
      logger.warn(
        { evt: 'charge_expired', sku: charge.sku, amount: charge.amount, currency: charge.currency },
        'the payment provider never let us read a charge before its retention window ended: it is listed as expired (tollbooth charges list --status expired); check it with the provider',
      );
      return 'unreadable';
    }
    if (charge.status !== 'pending' || !(dead || charge.expiresAt <= at)) return null;
    const abandoned = { ...charge, status: 'abandoned' as const };
    if (!(await store.abandonCharge(charge.handleHash, charge.nonce, this.nextPollAt(abandoned, at)))) return null;
    metrics.settlements.inc({ sku: charge.sku, result: 'expired' });
    return 'abandoned';
  }
}

/** The read that took the charge's current poll slot has ended with a reading (markChargeRead). */
function readDone(charge: ChargeRecord): boolean {
  return charge.lastReadAt !== undefined && charge.lastReadAt >= charge.lastPolledAt;
}

/** What an observer that joined another's read in this process answers: a grant is someone else's. */
function joined(observation: Observation): Observation {
  return observation === 'granted' ? 'already_settled' : observation;
}
