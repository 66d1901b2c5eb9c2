// The single-process store (SPEC §8): one MemoryCore (memory/core.ts: the maps, the injected clock,
// the lazy sweep) shared by one class per concern (memory/<concern>.ts), and this class, the Store
// they make together, which only delegates. Every method body runs to completion without an
// `await`, so each call is one atomic step with respect to every other call in this process: the
// same promise the Redis store gets from one Lua script per method. Time: handle expiry, token
// buckets, leases and dev links read the injected clock; charge operations use the `now` their
// caller passes. Memory stays bounded by a lazy sweep (at most once a minute, inside calls, on the
// injected clock) of expired handles, charges past retention, dev links past retention, expired
// leases and buckets that have refilled (deleting a full bucket is the same as keeping it), and
// ledgers past their retention. A handle that expires is ended in the same step that first sees it
// expired (an access or the sweep): its `expire` ledger entries and the loss of its credits happen together.

import type { BucketParams } from './policy.js';
import type { HeldQuotas, QuotaCounter, QuotaDecision, QuotaRequest, QuotaUsage } from './store.js';
import { MemoryQuotas } from './memory/quotas.js';
import { MemoryIdempotency } from './memory/idempotency.js';
import type { IdempotentBegin, IdempotentClaim } from './store.js';
import type { Attempt, OrphanPayment, BeginChargeResult, ChargeRecord, ChargeStatus, ClaimResult, DevLink, HandleState, LedgerAccount, LedgerCheckpoint, LedgerEntry, LedgerRange,
  NewHandle, OpenChargeRequest, PricedRequestKey, PricedRequestRecord, TaskKey, TaskRecord, PaymentNonceClaim, PaymentNonceKey, PaymentNonceOutcome, PaymentNonceRecord, SettlementClaim, X402SettlementRecord,
  SpendDecision, SpendRequest, Store } from './store.js';
import { MemoryHandles } from './memory/handles.js';
import { MemoryCharges } from './memory/charges.js';
import { MemoryCoordination } from './memory/coordination.js';
import { MemoryLedgerReads } from './memory/ledger.js';
import { MemoryX402 } from './memory/x402.js';
import { MemoryRequests } from './memory/requests.js';
import { MemoryCore } from './memory/core.js';

export class MemoryStore implements Store {
  readonly kind = 'memory' as const;

  private readonly core: MemoryCore;
  private readonly handleOps: MemoryHandles;
  private readonly chargeOps: MemoryCharges;
  private readonly coordination: MemoryCoordination;
  private readonly ledgerReads: MemoryLedgerReads;
  private readonly x402: MemoryX402;
  private readonly requests: MemoryRequests;
  /** Budget and allowance counters (SPEC §23). */
  private readonly quotas: MemoryQuotas;
  /** Idempotent results (SPEC §24). */
  private readonly idempotency: MemoryIdempotency;

  constructor(options: { now?: () => number; ledgerRetentionMs?: number } = {}) {
    this.core = new MemoryCore(options);
    this.quotas = new MemoryQuotas(this.core.clock);
    this.handleOps = new MemoryHandles(this.core, this.quotas);
    this.chargeOps = new MemoryCharges(this.core);
    this.coordination = new MemoryCoordination(this.core);
    this.ledgerReads = new MemoryLedgerReads(this.core);
    this.x402 = new MemoryX402(this.core);
    this.requests = new MemoryRequests(this.core);
    this.idempotency = new MemoryIdempotency(() => this.core.now());
    this.core.sweepers.push((now) => this.idempotency.sweep(now));
  }

  // ── handles, reservations, grants (memory/handles.ts) ──────────────────────────────────────────

  createHandle(handle: NewHandle): Promise<void> {
    return this.handleOps.createHandle(handle);
  }

  getHandle(handleHash: string): Promise<HandleState | null> {
    return this.handleOps.getHandle(handleHash);
  }

  findHandlesByFingerprint(fingerprint: string): Promise<string[]> {
    return this.handleOps.findHandlesByFingerprint(fingerprint);
  }

  /** One process holds everything: a call's budget draws go in its credit's own step. */
  readonly quotasWithCredits: boolean = true;

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

  // ── charges, settlement, dev links, orphan payments (memory/charges.ts) ────────────────────────

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

  // ── challenge tokens, lease, provider events, sessions (memory/coordination.ts) ────────────────

  takeChallengeToken(clientKey: string, bucket: BucketParams): Promise<{ allowed: boolean; retryAfterMs: number }> {
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

  // ── ledger reads and the expiry step (memory/ledger.ts) ────────────────────────────────────────

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

  // ── x402 authorizations and outbox settlements (memory/x402.ts) ────────────────────────────────

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

  // ── priced requests and tasks (memory/requests.ts) ─────────────────────────────────────────────

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

  // ── the store itself ────────────────────────────────────────────────────────────────────────────

  async ping(): Promise<void> {}

  // Budgets and allowances (SPEC §23): memory/quotas.ts.
  reserveQuotas(request: QuotaRequest): Promise<QuotaDecision> { return this.quotas.reserveQuotas(request); }
  concludeQuotas(holdId: string, counters: QuotaCounter[], outcome: 'commit' | 'release', attempt?: Attempt): Promise<void> { return this.quotas.concludeQuotas(holdId, counters, outcome, attempt); }
  holdQuotas(holdId: string, counters: QuotaCounter[], deadline: number): Promise<boolean> { return this.quotas.holdQuotas(holdId, counters, deadline); }
  releaseStaleQuotas(now: number, limit: number): Promise<number> { return this.quotas.releaseStaleQuotas(now, limit); }
  quotaUsage(counters: QuotaCounter[]): Promise<QuotaUsage[]> { return this.quotas.quotaUsage(counters); }

  // Idempotent results (SPEC §24): memory/idempotency.ts.
  async beginIdempotent(slot: string, claim: IdempotentClaim): Promise<IdempotentBegin> { return this.idempotency.begin(slot, claim); }
  async finishIdempotent(slot: string, owner: string, result: string, ttlMs: number): Promise<boolean> { return this.idempotency.finish(slot, owner, result, ttlMs); }
  async abandonIdempotent(slot: string, owner: string): Promise<void> { this.idempotency.abandon(slot, owner); }

  async close(): Promise<void> {}

  /** Sizes of every map, for tests and debugging (not part of Store). */
  stats(): ReturnType<MemoryCore['stats']> {
    return this.core.stats();
  }

  /** Drops everything that can no longer matter at `now`. Runs by itself at most once a minute. */
  sweep(now: number): void {
    this.core.sweep(now);
  }
}
