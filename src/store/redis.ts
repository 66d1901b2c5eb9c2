// The Redis store (SPEC §8): standalone, Sentinel or Cluster through ioredis. Every decision is one
// Lua script (registered once, EVALSHA) on the keys of one handle (keys.ts). One RedisCore
// (redis/core.ts: the client, the call budget, re-runs, WAIT) is shared by one class per concern
// (redis/<concern>.ts, its scripts beside it in redis/<concern>.lua.ts); this class, the Store they
// make together, only connects and delegates. README.md beside this file explains the key layout,
// the indexes and how Cluster mode writes them.
// Failure behaviour is fail-closed and bounded: the client (redis-connection.ts) has no offline queue
// and a 500 ms command timeout, and each call here has a 1 s budget, so with Redis gone every call
// rejects with TB_ERR_STORE_UNAVAILABLE quickly.
import type { GatewayConfig } from '../config/schema.js';
import { GatewayError } from '../errors.js';
import { withBudget } from '../io/budget.js';
import type { Logger } from '../observability/logger.js';
import { KeySpace } from './keys.js';
import { LEDGER_RETENTION_MS } from './policy.js';
import { openRedisClient } from './redis-connection.js';
import { slotTags } from './slots.js';
import type { HeldQuotas, QuotaCounter, QuotaDecision, QuotaRequest, QuotaUsage } from './store.js';
import { RedisQuotas } from './redis/quotas.js';
import { RedisIdempotency } from './redis/idempotency.js';
import type { IdempotentBegin, IdempotentClaim } from './store.js';
import type { Attempt, OrphanPayment, BeginChargeResult, ChargeRecord, ChargeStatus, ClaimResult, DevLink, HandleState, LedgerAccount, LedgerCheckpoint, LedgerEntry, LedgerRange,
  NewHandle, OpenChargeRequest, PricedRequestKey, PricedRequestRecord, TaskKey, TaskRecord, PaymentNonceClaim, PaymentNonceKey, PaymentNonceOutcome, PaymentNonceRecord, SettlementClaim, X402SettlementRecord,
  SpendDecision, SpendRequest, Store } from './store.js';
import { RedisCharges } from './redis/charges.js';
import { RedisCoordination } from './redis/coordination.js';
import { CALL_BUDGET_MS, RedisCore } from './redis/core.js';
import { RedisHandles } from './redis/handles.js';
import { RedisLedgerReads } from './redis/ledger.js';
import { RedisRequests } from './redis/requests.js';
import { RedisX402 } from './redis/x402.js';

export type { Durability, ReplicatedWrite } from './redis/core.js';

export interface RedisStoreDeps {
  logger: Logger;
  /** Clock for handle and charge times (tests inject one); token buckets use Redis TIME. */
  now?: () => number;
  /** Monotonic ms for the connection's log throttle (default performance.now). */
  monotonic?: () => number;
  /** `ledger.retention`: how long ledger entries outlive their handle (default LEDGER_RETENTION_MS). */
  ledgerRetentionMs?: number;
}

type RedisSection = NonNullable<GatewayConfig['store']['redis']>;
type DurabilityKeys = 'durability' | 'waitReplicas' | 'waitTimeout';
/** `store` as the config gives it; the durability keys may be left out (durability none). */
export interface RedisStoreConfig {
  type: GatewayConfig['store']['type'];
  redis?: Omit<RedisSection, DurabilityKeys> & Partial<Pick<RedisSection, DurabilityKeys>>;
}

export class RedisStore implements Store {
  readonly kind = 'redis' as const;
  private readonly handleOps: RedisHandles;
  private readonly chargeOps: RedisCharges;
  private readonly coordination: RedisCoordination;
  private readonly ledgerReads: RedisLedgerReads;
  private readonly x402: RedisX402;
  private readonly requests: RedisRequests;
  /** Budget and allowance counters (SPEC §23). */
  private readonly quotas: RedisQuotas;
  /** Idempotent results (SPEC §24). */
  private readonly idempotency: RedisIdempotency;

  private constructor(private readonly core: RedisCore) {
    this.handleOps = new RedisHandles(core);
    this.chargeOps = new RedisCharges(core);
    this.coordination = new RedisCoordination(core);
    this.ledgerReads = new RedisLedgerReads(core);
    this.x402 = new RedisX402(core);
    this.requests = new RedisRequests(core);
    this.quotas = new RedisQuotas({ client: core.client, keys: core.keys, clustered: core.clustered, now: core.now, once: (...a) => core.once(...a), run: (...a) => core.run(...a), call: (op, work, budgetMs) => core.call(op, work, budgetMs) });
    this.idempotency = new RedisIdempotency({ key: (slot) => core.keys.idempotentResult(slot), run: (script, keys, args) => core.run(script, keys, args), call: (op, work) => core.call(op, work) });
  }

  /** Connects (standalone/Sentinel via `url`, Cluster via `cluster`) or fails clearly: there is no fallback store. */
  static async connect(storeConfig: RedisStoreConfig, deps: RedisStoreDeps): Promise<RedisStore> {
    const redis = storeConfig.redis;
    if (!redis || (redis.url === undefined) === (redis.cluster === undefined)) {
      throw new GatewayError('TB_ERR_CONFIG_INVALID', 'store.type redis needs exactly one of store.redis.url or store.redis.cluster');
    }
    const keys = new KeySpace(redis.keyPrefix);
    if (redis.cluster !== undefined) slotTags(); // the shard names, computed once before the first call needs them
    const client = await openRedisClient(redis, deps.logger, deps.monotonic);
    const durability = redis.durability === 'replicated' ? { replicas: redis.waitReplicas ?? 1, timeoutMs: redis.waitTimeout ?? 100 } : null;
    return new RedisStore(new RedisCore(client, keys, redis.cluster !== undefined, deps.now ?? Date.now, deps.logger, deps.ledgerRetentionMs ?? LEDGER_RETENTION_MS, durability));
  }

  // ── handles, reservations, grants (redis/handles.ts) ─────────────────────────────────────────────

  createHandle(handle: NewHandle): Promise<void> {
    return this.handleOps.createHandle(handle);
  }

  getHandle(handleHash: string): Promise<HandleState | null> {
    return this.handleOps.getHandle(handleHash);
  }

  findHandlesByFingerprint(fingerprint: string): Promise<string[]> {
    return this.handleOps.findHandlesByFingerprint(fingerprint);
  }

  /** Outside Cluster every key is on the one primary, so the credit scripts carry the budget parts too. */
  get quotasWithCredits(): boolean {
    return !this.core.clustered;
  }

  reserve(request: SpendRequest): Promise<SpendDecision> {
    return this.handleOps.reserve(request);
  }

  commit(handleHash: string, reservationId: string, tool = '', attempt?: Attempt, quotas?: HeldQuotas): Promise<number | null> {
    return this.handleOps.commit(handleHash, reservationId, tool, attempt, quotas);
  }

  release(handleHash: string, reservationId: string, attempt?: Attempt, quotas?: HeldQuotas): Promise<number | null> {
    return this.handleOps.release(handleHash, reservationId, attempt, quotas);
  }

  releaseStaleReservations(now: number, limit: number): Promise<number> {
    return this.handleOps.releaseStaleReservations(now, limit);
  }

  grantCredits(handleHash: string, sku: string, credits: number, reason = '', attempt?: Attempt): Promise<number> {
    return this.handleOps.grantCredits(handleHash, sku, credits, reason, attempt);
  }

  // ── charges, settlement, dev links, orphan payments (redis/charges.ts) ───────────────────────────

  beginCharge(request: OpenChargeRequest): Promise<BeginChargeResult> {
    return this.chargeOps.beginCharge(request);
  }

  attachLink(handleHash: string, nonce: string, link: { providerRef: string; checkoutUrl: string }, attempt?: Attempt): Promise<ChargeRecord | null> {
    return this.chargeOps.attachLink(handleHash, nonce, link, attempt);
  }

  abortCharge(handleHash: string, nonce: string): Promise<void> {
    return this.chargeOps.abortCharge(handleHash, nonce);
  }

  getCharge(handleHash: string, nonce: string): Promise<ChargeRecord | null> {
    return this.chargeOps.getCharge(handleHash, nonce);
  }

  findChargeByRef(providerRef: string): Promise<ChargeRecord | null> {
    return this.chargeOps.findChargeByRef(providerRef);
  }

  takePollSlot(handleHash: string, nonce: string, now: number, minIntervalMs: number, nextPollAt: number): Promise<boolean> {
    return this.chargeOps.takePollSlot(handleHash, nonce, now, minIntervalMs, nextPollAt);
  }

  markChargeRead(handleHash: string, nonce: string, polledAt: number): Promise<void> {
    return this.chargeOps.markChargeRead(handleHash, nonce, polledAt);
  }

  claimSettlement(claim: SettlementClaim): Promise<ClaimResult> {
    return this.chargeOps.claimSettlement(claim);
  }

  abandonCharge(handleHash: string, nonce: string, nextPollAt: number): Promise<boolean> {
    return this.chargeOps.abandonCharge(handleHash, nonce, nextPollAt);
  }

  expireCharge(handleHash: string, nonce: string, now: number): Promise<boolean> {
    return this.chargeOps.expireCharge(handleHash, nonce, now);
  }

  dueCharges(now: number, limit: number): Promise<ChargeRecord[]> {
    return this.chargeOps.dueCharges(now, limit);
  }

  listCharges(status?: ChargeStatus): Promise<ChargeRecord[]> {
    return this.chargeOps.listCharges(status);
  }

  countPendingCharges(): Promise<number> {
    return this.chargeOps.countPendingCharges();
  }

  putDevLink(link: DevLink): Promise<void> {
    return this.chargeOps.putDevLink(link);
  }

  getDevLink(id: string): Promise<DevLink | null> {
    return this.chargeOps.getDevLink(id);
  }

  payDevLink(id: string, receivedAmount: string): Promise<boolean> {
    return this.chargeOps.payDevLink(id, receivedAmount);
  }

  recordOrphanPayment(orphan: OrphanPayment): Promise<boolean> {
    return this.chargeOps.recordOrphanPayment(orphan);
  }

  listOrphanPayments(): Promise<OrphanPayment[]> {
    return this.chargeOps.listOrphanPayments();
  }

  // ── challenge tokens, lease, provider events, sessions (redis/coordination.ts) ───────────────────

  takeChallengeToken(clientKey: string, bucket: { ratePerSecond: number; burst: number }): Promise<{ allowed: boolean; retryAfterMs: number }> {
    return this.coordination.takeChallengeToken(clientKey, bucket);
  }

  acquireLease(name: string, owner: string, ttlMs: number): Promise<boolean> {
    return this.coordination.acquireLease(name, owner, ttlMs);
  }

  claimEvent(source: string, eventId: string, ttlMs: number): Promise<boolean> {
    return this.coordination.claimEvent(source, eventId, ttlMs);
  }

  bindSession(sessionHash: string, principal: string, ttlMs: number): Promise<string> {
    return this.coordination.bindSession(sessionHash, principal, ttlMs);
  }

  sessionPrincipal(sessionHash: string, ttlMs: number): Promise<string | null> {
    return this.coordination.sessionPrincipal(sessionHash, ttlMs);
  }

  // ── ledger reads and the expiry step (redis/ledger.ts) ───────────────────────────────────────────

  expireHandles(now: number, limit: number): Promise<number> {
    return this.ledgerReads.expireHandles(now, limit);
  }

  ledgerTail(handleHash: string, count: number): Promise<LedgerEntry[]> {
    return this.ledgerReads.ledgerTail(handleHash, count);
  }

  ledgerAccounts(options: { unledgeredHandles?: boolean } = {}): AsyncIterable<LedgerAccount> {
    return this.ledgerReads.ledgerAccounts(options);
  }

  ledgerCheckpoint(account: LedgerAccount): Promise<LedgerCheckpoint | null> {
    return this.ledgerReads.ledgerCheckpoint(account);
  }

  readLedger(account: LedgerAccount, range: LedgerRange): Promise<LedgerEntry[]> {
    return this.ledgerReads.readLedger(account, range);
  }

  // ── x402 authorizations and outbox settlements (redis/x402.ts) ───────────────────────────────────

  claimPaymentNonce(claim: PaymentNonceClaim): Promise<boolean> {
    return this.x402.claimPaymentNonce(claim);
  }

  finishPaymentNonce(key: PaymentNonceKey, outcome: PaymentNonceOutcome, attempt?: Attempt): Promise<boolean> {
    return this.x402.finishPaymentNonce(key, outcome, attempt);
  }

  recordX402Settlement(record: X402SettlementRecord): Promise<boolean> {
    return this.x402.recordX402Settlement(record);
  }

  getPaymentNonce(key: PaymentNonceKey): Promise<PaymentNonceRecord | null> {
    return this.x402.getPaymentNonce(key);
  }

  // ── priced requests and tasks (redis/requests.ts) ────────────────────────────────────────────────

  registerPricedRequest(key: PricedRequestKey, record: PricedRequestRecord, ttlMs: number): Promise<void> {
    return this.requests.registerPricedRequest(key, record, ttlMs);
  }

  getPricedRequest(key: PricedRequestKey): Promise<PricedRequestRecord | null> {
    return this.requests.getPricedRequest(key);
  }

  concludePricedRequest(key: PricedRequestKey, state: 'committed' | 'released', remaining: number | null): Promise<PricedRequestRecord | null> {
    return this.requests.concludePricedRequest(key, state, remaining);
  }

  holdTask(key: TaskKey, record: TaskRecord): Promise<boolean> {
    return this.requests.holdTask(key, record);
  }

  getTask(key: TaskKey): Promise<TaskRecord | null> {
    return this.requests.getTask(key);
  }

  concludeTask(key: TaskKey, concluded: TaskRecord): Promise<boolean> {
    return this.requests.concludeTask(key, concluded);
  }

  recordConcludedTask(key: TaskKey, concluded: TaskRecord): Promise<boolean> {
    return this.requests.recordConcludedTask(key, concluded);
  }

  // ── the store itself ───────────────────────────────────────────────────────────────────────────

  async ping(): Promise<void> {
    await this.core.call('ping', () => this.core.client.ping());
  }

  // Idempotent results (SPEC §24): redis/idempotency.ts.
  beginIdempotent(slot: string, claim: IdempotentClaim): Promise<IdempotentBegin> { return this.idempotency.begin(slot, claim); }
  finishIdempotent(slot: string, owner: string, result: string, ttlMs: number): Promise<boolean> { return this.idempotency.finish(slot, owner, result, ttlMs); }
  abandonIdempotent(slot: string, owner: string): Promise<void> { return this.idempotency.abandon(slot, owner); }

  // Budgets and allowances (SPEC §23): redis/quotas.ts.
  reserveQuotas(request: QuotaRequest): Promise<QuotaDecision> { return this.quotas.reserveQuotas(request); }
  concludeQuotas(holdId: string, counters: QuotaCounter[], outcome: 'commit' | 'release', attempt?: Attempt): Promise<void> { return this.quotas.concludeQuotas(holdId, counters, outcome, attempt); }
  holdQuotas(holdId: string, counters: QuotaCounter[], deadline: number): Promise<boolean> { return this.quotas.holdQuotas(holdId, counters, deadline); }
  releaseStaleQuotas(now: number, limit: number): Promise<number> { return this.quotas.releaseStaleQuotas(now, limit); }
  quotaUsage(counters: QuotaCounter[]): Promise<QuotaUsage[]> { return this.quotas.quotaUsage(counters); }

  async close(): Promise<void> {
    try {
      await withBudget(this.core.client.quit(), CALL_BUDGET_MS, 'QUIT unanswered');
    } catch {
      this.core.client.disconnect();
    }
  }

  /** Writes acted on without the replicas durability asked for, by kind, since this store was opened. */
  unreplicatedWrites(): Record<string, number> {
    return this.core.unreplicatedWrites();
  }

  ledgerLinks(): Record<string, number> {
    return this.handleOps.ledgerLinks();
  }

  reportReplicaCoverage(): Promise<void> {
    return this.core.reportReplicaCoverage();
  }
}
