// The background reconciler (SPEC §7.6): on one replica at a time (a store lease), it polls charges
// that are due (a due-time index, never a scan of every charge) — pending ones, and abandoned ones on
// a slow backoff for the retention window, so a late payment on any of them is granted without
// webhooks — releases reservations a crashed gateway left behind (§6.5), and ends handles whose life
// is over, writing their `expire` ledger entries (§17) before Redis drops their keys. What a reading means
// for a charge (grant, abandon, expire) is decided by the Settler, the same for a retry.
// Gentle on the provider: at most BATCH reads per tick, each due on its own backoff schedule, and a
// tick stops early when the provider still answers 429 after the provider's own retries.
import { randomUUID } from 'node:crypto';
import { systemClock, type Clock, type ClockTimer } from '../clock.js';
import type { Logger } from '../observability/logger.js';
import type { Metrics } from '../observability/metrics.js';
import type { Store } from '../store/store.js';
import { ProviderError, type PaymentProvider } from './provider.js';
import type { Settler } from './settle.js';

const BATCH = 50; // charges per tick: bounded so one tick never floods the provider
const STALE_BATCH = 200;
const MAX_TICK_MS = 3_000; // due polls start ~3 s after opening, so look at least this often

export interface ReconcilerDeps {
  store: Store;
  provider: PaymentProvider;
  settler: Settler;
  metrics: Metrics;
  logger: Logger;
  intervalMs: number;
  /** Wall time for due charges and stale reservations; its timer paces the ticks. */
  clock?: Clock;
}

export interface TickReport {
  leader: boolean;
  polled: number;
  granted: number;
  abandoned: number;
  /** Charges marked expired: never readable by the end of their retention window. */
  expired: number;
  released: number;
  /** Budget and allowance hold parts given back (SPEC §23): a call that never finished keeps no budget. */
  quotaHoldsReleased: number;
  /** Handles ended by the expiry step (their remaining credits written off in the ledger). */
  handlesEnded: number;
}

export class Reconciler {
  readonly #deps: ReconcilerDeps;
  readonly #owner = randomUUID();
  readonly #tickMs: number;
  readonly #clock: Clock;
  #timer: ClockTimer | null = null;
  #running: Promise<TickReport> | null = null;

  constructor(deps: ReconcilerDeps) {
    this.#deps = deps;
    this.#tickMs = Math.min(deps.intervalMs, MAX_TICK_MS);
    this.#clock = deps.clock ?? systemClock;
  }

  start(): void {
    const loop = (): void => {
      this.#timer = this.#clock.setTimeout(() => {
        void this.tick().finally(() => {
          if (this.#timer) loop();
        });
      }, this.#tickMs);
      this.#timer.unref();
    };
    loop();
  }

  async stop(): Promise<void> {
    if (this.#timer) this.#clock.clearTimeout(this.#timer);
    this.#timer = null;
    await this.#running?.catch(() => undefined);
  }

  /** One pass; public so tests and operators can drive it directly. */
  tick(): Promise<TickReport> {
    this.#running ??= this.#tick().finally(() => {
      this.#running = null;
    });
    return this.#running;
  }

  async #tick(): Promise<TickReport> {
    const { store, settler, metrics, logger } = this.#deps;
    const now = this.#clock.now();
    const report: TickReport = { leader: false, polled: 0, granted: 0, abandoned: 0, expired: 0, released: 0, quotaHoldsReleased: 0, handlesEnded: 0 };
    try {
      if (!(await store.acquireLease('reconciler', this.#owner, this.#tickMs * 3))) return report;
      report.leader = true;
      for (const charge of await store.dueCharges(now, BATCH)) {
        try {
          const observation = await settler.observe(charge);
          if (observation !== 'skipped') report.polled++;
          if (observation === 'granted') report.granted++;
          if (observation === 'abandoned') report.abandoned++;
          if (observation === 'unreadable') report.expired++;
        } catch (error) {
          // Still rate limited after the provider's own backoff: polling the rest now would only dig deeper.
          if (error instanceof ProviderError && error.kind === 'rate_limited') {
            logger.warn({ evt: 'reconcile_rate_limited', provider: this.#deps.provider.name, polled: report.polled }, 'the payment provider is rate limiting us: polling paused until the next pass');
            break;
          }
          logger.warn({ evt: 'reconcile_error', sku: charge.sku, code: (error as { code?: string }).code ?? 'unknown' }, 'a charge could not be reconciled; it will be retried');
        }
      }
      report.released = await store.releaseStaleReservations(now, STALE_BATCH);
      if (report.released > 0) logger.warn({ evt: 'reservations_released', count: report.released }, 'released reservations left by calls that never finished');
      report.quotaHoldsReleased = await store.releaseStaleQuotas(now, STALE_BATCH);
      if (report.quotaHoldsReleased > 0) logger.warn({ evt: 'quota_holds_released', count: report.quotaHoldsReleased }, 'gave back budget and allowance draws held by calls that never finished');
      report.handlesEnded = await store.expireHandles(now, STALE_BATCH);
      if (report.handlesEnded > 0) logger.info({ evt: 'handles_ended', count: report.handlesEnded }, 'ended handles whose life was over; their remaining credits are written off in the ledger');
      metrics.reconcilerLastRun.set(now / 1000);
    } catch (error) {
      logger.warn({ evt: 'reconcile_error', code: (error as { code?: string }).code ?? 'unknown' }, 'reconciler pass failed; the next one retries');
    }
    return report;
  }
}
