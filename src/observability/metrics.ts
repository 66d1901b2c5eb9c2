// Every metric name the gateway exports, declared once (SPEC §10). Labels are declared up front and
// carry only bounded values: method names from a fixed list, tool/SKU names from the config.
import client from 'prom-client';
import { withBudget } from '../io/budget.js';
import { BucketHistogram } from './bucket-histogram.js';

// 0.25 ms … 30 s
const LATENCY_BUCKETS = [0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

export type PaidOutcome = 'authorised' | 'challenged' | 'refused_rate_limited' | 'refused_bound' | 'refused_unavailable' | 'deadline_exceeded' | 'upstream_error' | 'input_required'
  // SPEC §24: answered with a kept result; refused idempotency_conflict.
  | 'replayed' | 'refused_conflict'
  // SPEC §23: refused by a budget; served free under an allowance (concluded; its free call used or not by the charge policy).
  | 'refused_budget' | 'allowance';
export type CreditKind = 'granted' | 'spent' | 'refunded';
export type SettlementResult = 'granted' | 'partial' | 'underpaid' | 'expired';
/** x402 (SPEC §19), one count per paid retry at each step it reached; docs/payments.md explains each. */
export type X402PaymentResult = 'verified' | 'invalid' | 'replayed' | 'unavailable' | 'settled' | 'settle_failed' | 'not_settled';

/** MCP method names as metric labels: known ones as they are, anything else `other` (bounded cardinality). */
const KNOWN_METHODS = new Set([
  'initialize', 'ping', 'tools/list', 'tools/call', 'resources/list', 'resources/read', 'resources/templates/list',
  'resources/subscribe', 'resources/unsubscribe', 'prompts/list', 'prompts/get', 'completion/complete', 'logging/setLevel',
  'server/discover', 'notifications/initialized', 'notifications/cancelled', 'notifications/progress', 'batch', 'GET', 'DELETE',
]);
export const methodLabel = (method: string): string => (KNOWN_METHODS.has(method) ? method : 'other');

export type StatusClass = '2xx' | '3xx' | '4xx' | '5xx';
/**
 * HTTP status codes as metric labels (SPEC §20): the class, never the raw code, which an upstream
 * chooses freely. A code that is no final status (1xx, 600+, not an integer) counts as 5xx: from the
 * client's side the exchange failed.
 */
export function statusClass(code: number): StatusClass {
  if (!Number.isInteger(code) || code < 200 || code > 599) return '5xx';
  return `${Math.floor(code / 100) as 2 | 3 | 4 | 5}xx`;
}

export interface Metrics {
  registry: client.Registry;
  /** `server` (SPEC §18): `default` for the top-level endpoint, else its `servers` key. */
  mcpRequests: client.Counter<'server' | 'method' | 'era' | 'status'>;
  mcpRequestDuration: BucketHistogram<'server' | 'method'>;
  paidCalls: client.Counter<'server' | 'tool' | 'sku' | 'outcome'>;
  credits: client.Counter<'sku' | 'kind'>;
  settlements: client.Counter<'sku' | 'result'>;
  chargesOpened: client.Counter<'sku'>;
  pendingCharges: client.Gauge;
  upstreamDuration: BucketHistogram<'server' | 'method' | 'outcome'>;
  providerRequests: client.Counter<'op' | 'status'>;
  storeErrors: client.Counter<'op'>;
  authFailures: client.Counter<'reason'>;
  /** Collected at scrape time: 1 when a store ping answers within STORE_UP_PING_MS, else 0 (alert TollboothRedisDown). */
  storeUp: client.Gauge;
  /** Set to the unix time (seconds) at the end of every reconciler pass this replica ran. */
  reconcilerLastRun: client.Gauge;
  x402Payments: client.Counter<'sku' | 'result'>;
  /** One per signed webhook delivery once its after-response work ends: `handled`, `replay` or `failed`. */
  webhookTriggers: client.Counter<'provider' | 'outcome'>;
  /** Triggers started (before the 2xx is sent) and not yet concluded: 0 means every acknowledged delivery's work is done. */
  webhookTriggersRunning: client.Gauge<'provider'>;
  /** SIGHUP reloads (SPEC §18), by result; the start is not one. */
  configReloads: client.Counter<'result'>;
  /** 1 for the sha256 prefix of the effective config this process runs (one series at a time). */
  configInfo: client.Gauge<'sha'>;
  /** SPEC §21: payment records waiting in this process's outbox file for the store (store/outbox.ts). */
  outboxPending: client.Gauge;
  /** SPEC §21: money writes acted on without the replicas `store.redis.durability: replicated` asked for, by kind (read from the store at scrape time). */
  storeUnreplicatedWrites: client.Counter<'op'>;
  /** Redis store: spend entries by who hashed the ledger entry before them (the gateway, or Lua inside Redis). */
  storeLedgerLinks: client.Counter<'by'>;
  /** SPEC §21: payments the provider reported for charges the store did not know, kept for the operator. */
  orphanPayments: client.Counter;
  /** SPEC §23: priced calls refused because they would go over a budget, by budget name. */
  budgetRefusals: client.Counter<'budget'>;
  /** SPEC §23: free calls used under an allowance (committed by the charge policy), by allowance name. */
  allowanceCalls: client.Counter<'allowance'>;
  /** SPEC §22: stdio children per endpoint by state (starting, active, idle, free), read at scrape time from `stdioChildrenSource`. */
  stdioChildren: client.Gauge<'server' | 'state'>;
  /** SPEC §24: retries answered with a kept result (no upstream call, no charge), by endpoint. */
  idempotentReplays: client.Counter<'server'>;
  /** SPEC §24: committed results of keyed calls that were not kept (`too_large`, `store_failed`), by endpoint. */
  idempotentNotKept: client.Counter<'server' | 'reason'>;
  /** What the scrape reads for tollbooth_stdio_children (start.ts points it at its running upstreams). */
  stdioChildrenSource: { read(): StdioChildrenReading[] };
}

/** One endpoint's stdio children by state, as tollbooth_stdio_children exports them. */
export interface StdioChildrenReading {
  server: string;
  starting: number;
  active: number;
  idle: number;
  free: number;
}

export type ReloadResult = 'success' | 'invalid' | 'refused';

/** The bound on tollbooth_store_up's scrape-time ping: as /readyz's, so a hung store cannot hold a scrape. */
export const STORE_UP_PING_MS = 500;

/**
 * One registry per gateway instance (tests build several in one process).
 * @param countPending read at scrape time for tollbooth_pending_charges
 * @param pingStore run at scrape time for tollbooth_store_up (default: countPending)
 * @param unreplicatedWrites read at scrape time: the store's running totals by kind (SPEC §21)
 * @param ledgerLinks read at scrape time: the store's running totals of spend entries by who hashed the ledger entry before them
 */
export function createMetrics(
  countPending: () => Promise<number>,
  pingStore: () => Promise<unknown> = countPending,
  unreplicatedWrites: () => Record<string, number> = () => ({}),
  ledgerLinks: () => Record<string, number> = () => ({}),
): Metrics {
  const registry = new client.Registry();
  client.collectDefaultMetrics({ register: registry });
  // promtool rejects the nodejs_active_*_total gauges (a _total suffix on a gauge).
  for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total']) {
    registry.removeSingleMetric(name);
  }
  const registers = [registry];
  // Collected by the scrape itself: the first scrape of a healthy gateway says 1, and an outage shows on the
  // scrape that follows it (a value set by another metric's collect would come out one scrape late).
  const storeUp = new client.Gauge({
    name: 'tollbooth_store_up',
    help: 'Whether the store answered a ping made by this scrape (1) or not (0).',
    registers,
    async collect() {
      try {
        await withBudget(pingStore(), STORE_UP_PING_MS, 'store ping timed out');
        this.set(1);
      } catch {
        this.set(0);
      }
    },
  });
  const stdioChildrenSource: Metrics['stdioChildrenSource'] = { read: () => [] };
  return {
    registry,
    mcpRequests: new client.Counter({ name: 'tollbooth_mcp_requests_total', help: 'MCP requests handled, by endpoint, method, era and HTTP status class (2xx … 5xx).', labelNames: ['server', 'method', 'era', 'status'], registers }),
    mcpRequestDuration: new BucketHistogram({ name: 'tollbooth_mcp_request_duration_seconds', help: 'Time to answer an MCP request (to response headers for streams).', labelNames: ['server', 'method'], buckets: LATENCY_BUCKETS, registers }),
    paidCalls: new client.Counter({ name: 'tollbooth_paid_calls_total', help: 'Calls of priced tools, by endpoint, tool, SKU and outcome.', labelNames: ['server', 'tool', 'sku', 'outcome'], registers }),
    credits: new client.Counter({ name: 'tollbooth_credits_total', help: 'Credits granted, spent and refunded.', labelNames: ['sku', 'kind'], registers }),
    settlements: new client.Counter({ name: 'tollbooth_settlements_total', help: 'Charges settled, by result.', labelNames: ['sku', 'result'], registers }),
    chargesOpened: new client.Counter({ name: 'tollbooth_charges_opened_total', help: 'Checkout links opened.', labelNames: ['sku'], registers }),
    pendingCharges: new client.Gauge({
      name: 'tollbooth_pending_charges',
      help: 'Charges waiting for payment (read from the store at scrape time).',
      registers,
      async collect() {
        try {
          this.set(await countPending());
        } catch {
          // keep the last pending count; tollbooth_store_up says the store is down
        }
      },
    }),
    upstreamDuration: new BucketHistogram({ name: 'tollbooth_upstream_duration_seconds', help: 'Upstream request time, by endpoint, method and outcome.', labelNames: ['server', 'method', 'outcome'], buckets: LATENCY_BUCKETS, registers }),
    providerRequests: new client.Counter({ name: 'tollbooth_provider_requests_total', help: 'Payment provider API requests, by operation and status.', labelNames: ['op', 'status'], registers }),
    storeErrors: new client.Counter({ name: 'tollbooth_store_errors_total', help: 'Store operations that failed, by operation.', labelNames: ['op'], registers }),
    authFailures: new client.Counter({ name: 'tollbooth_auth_failures_total', help: 'Requests refused by the OAuth resource server, by reason.', labelNames: ['reason'], registers }),
    storeUp,
    reconcilerLastRun: new client.Gauge({ name: 'tollbooth_reconciler_last_run_timestamp_seconds', help: 'Unix time of the last reconciler pass this replica completed (only the lease holder runs it).', registers }),
    webhookTriggers: new client.Counter({ name: 'tollbooth_webhook_triggers_total', help: 'Signed payment webhooks whose after-response work has ended, by outcome (handled, replay, failed).', labelNames: ['provider', 'outcome'], registers }),
    webhookTriggersRunning: new client.Gauge({ name: 'tollbooth_webhook_triggers_running', help: 'Signed payment webhooks acknowledged whose after-response work is still running.', labelNames: ['provider'], registers }),
    x402Payments: new client.Counter({ name: 'tollbooth_x402_payments_total', help: 'x402 payments on priced calls, by SKU and step reached (verified, invalid, replayed, unavailable, settled, settle_failed, not_settled).', labelNames: ['sku', 'result'], registers }),
    configReloads: new client.Counter({ name: 'tollbooth_config_reloads_total', help: 'Config reloads on SIGHUP, by result (success, invalid, refused).', labelNames: ['result'], registers }),
    configInfo: new client.Gauge({ name: 'tollbooth_config_info', help: 'Always 1, labelled with the sha256 prefix of the effective config this process runs.', labelNames: ['sha'], registers }),
    outboxPending: new client.Gauge({ name: 'tollbooth_outbox_pending', help: 'Payment records (x402 settlements) waiting in this process\'s outbox file because the store could not take them.', registers }),
    orphanPayments: new client.Counter({ name: 'tollbooth_orphan_payments_total', help: 'Payments the provider reported for a charge the store does not know, kept for the operator (tollbooth charges orphans).', registers }),
    storeUnreplicatedWrites: runningTotals(
      'tollbooth_store_unreplicated_writes_total',
      'Money writes WAIT did not see on enough replicas (store.redis.durability: replicated), by kind: charge, claim, commit, adjust, expire, x402_claim, x402_settle.',
      'op',
      unreplicatedWrites,
      registers,
    ),
    storeLedgerLinks: runningTotals(
      'tollbooth_store_ledger_links_total',
      "Spend entries appended by the Redis store, by who hashed the previous entry for the chain link: gateway (this replica appended it and hashed it with node:crypto) or script (SHA-256 in Lua inside Redis, the dearer way).",
      'by',
      ledgerLinks,
      registers,
    ),
    budgetRefusals: new client.Counter({ name: 'tollbooth_budget_refusals_total', help: 'Priced calls refused because they would go over a budget (budget_exceeded), by budget.', labelNames: ['budget'], registers }),
    allowanceCalls: new client.Counter({ name: 'tollbooth_allowance_calls_total', help: 'Free calls used under an allowance (the upstream carried them out, by the tool\'s charge policy), by allowance.', labelNames: ['allowance'], registers }),
    stdioChildren: new client.Gauge({
      name: 'tollbooth_stdio_children',
      help: 'stdio children of each endpoint by state: starting (client not initialised yet), active, idle (may be stopped for a new client), free (slots left of maxChildren).',
      labelNames: ['server', 'state'],
      registers,
      collect() {
        this.reset();
        for (const reading of stdioChildrenSource.read()) {
          for (const state of ['starting', 'active', 'idle', 'free'] as const) this.inc({ server: reading.server, state }, reading[state]);
        }
      },
    }),
    idempotentReplays: new client.Counter({ name: 'tollbooth_idempotent_replays_total', help: 'Retries with an idempotency key answered with the kept result of their first call (no upstream call, no charge).', labelNames: ['server'], registers }),
    idempotentNotKept: new client.Counter({ name: 'tollbooth_idempotent_results_not_kept_total', help: 'Committed results of calls with an idempotency key that were not kept for retries, by reason.', labelNames: ['server', 'reason'], registers }),
    stdioChildrenSource,
  };
}

/** A counter of totals the store keeps itself (it has no registry): it catches up with them at each scrape. */
function runningTotals<L extends string>(name: string, help: string, label: L, read: () => Record<string, number>, registers: client.Registry[]): client.Counter<L> {
  const counted = new Map<string, number>();
  return new client.Counter({
    name,
    help,
    labelNames: [label],
    registers,
    collect() {
      for (const [value, total] of Object.entries(read())) {
        const before = counted.get(value) ?? 0;
        if (total > before) this.inc({ [label]: value } as Partial<Record<L, string>>, total - before);
        counted.set(value, Math.max(total, before));
      }
    },
  });
}
