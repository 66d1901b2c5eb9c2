// The single-process store (SPEC §8). Every method body runs to completion without an `await`, so
// each call is one atomic step with respect to every other call in this process: the same promise
// the Redis store gets from one Lua script per method. Time: handle expiry, token buckets, leases
// and dev links read the injected clock; charge operations use the `now` their caller passes.
// Memory stays bounded by a lazy sweep (at most once a minute, inside calls, on the injected clock)
// of expired handles, charges past retention, dev links past retention, expired leases and
// buckets that have refilled (deleting a full bucket is the same as keeping it), and ledgers past
// their retention. A handle that expires is ended in the same step that first sees it expired (an
// access or the sweep): its `expire` ledger entries and the loss of its credits happen together.

import { GatewayError } from '../errors.js';
import { TASK_RECORD_GRACE_MS, taskHash } from './task-keys.js';
import {
  HANDLE_GRACE_MS,
  LEDGER_RETENTION_MS,
  OP_RECORD_TTL_MS,
  RETENTION_MS,
  chargeRecordEnd,
  chargeShareable,
  checkGrant,
  checkHandleTtl,
  devLinkEnd,
  newBucket,
  newChargeRecord,
  newPaymentNonceRecord,
  takeToken,
  type BucketParams,
  type TokenBucket,
} from './policy.js';
import { entryHash, GENESIS_HASH } from './ledger-chain.js';
import type { QuotaCounter, QuotaDecision, QuotaRequest, QuotaUsage } from './store.js';
import { MemoryQuotas } from './memory/quotas.js';
import type { Attempt, OrphanPayment, BeginChargeResult, ChargeRecord, ChargeStatus, ClaimResult, DevLink, HandleState, LedgerAccount, LedgerCheckpoint, LedgerEntry, LedgerHolding, LedgerRange,
  NewHandle, OpenChargeRequest, PricedRequestKey, PricedRequestRecord, TaskKey, TaskRecord, PaymentNonceClaim, PaymentNonceKey, PaymentNonceOutcome, PaymentNonceRecord, SettlementClaim, X402SettlementRecord,
  SpendDecision, SpendRequest, Store } from './store.js';

const SWEEP_INTERVAL_MS = 60_000;
/** §7.5: a charge money can still land on (a late payment is never ignored). */
const CLAIMABLE: ReadonlySet<ChargeStatus> = new Set(['pending', 'abandoned', 'expired']);
interface Reservation {
  sku: string;
  cost: number;
  deadline: number;
}

interface HandleRecord {
  fingerprint: string;
  principal: string | null;
  balances: Map<string, number>;
  funded: Set<string>;
  expiresAt: number;
  bucket: TokenBucket | null;
  reservations: Map<string, Reservation>;
  pendingCharge: Map<string, string>; // sku → nonce of the charge challenges show (opening or pending)
  lastCharge: Map<string, string>; // sku → nonce of the charge that most recently left 'pending'
}

interface MemoryLedger {
  fingerprint: string;
  entries: LedgerEntry[]; // seq = index + 1
  endsAt: number; // when the whole ledger may go
}

/** What a handle owns in one SKU: its available balance plus what its reservations hold. */
function ownedOf(handle: HandleRecord, sku: string): number {
  let owned = handle.balances.get(sku) ?? 0;
  for (const reservation of handle.reservations.values()) if (reservation.sku === sku) owned += reservation.cost;
  return owned;
}

/**
 * `entry` is the caller's fresh object: it is numbered and chained (ledger-chain.ts) in place and kept
 * (one object per spend, not three).
 */
function pushEntry(ledger: MemoryLedger, entry: LedgerEntry, endsAt: number): void {
  const last = ledger.entries.at(-1);
  entry.seq = (last?.seq ?? 0) + 1;
  entry.at = Math.max(entry.at, last?.at ?? 0);
  entry.prev = last ? entryHash(last) : GENESIS_HASH;
  ledger.entries.push(entry);
  ledger.endsAt = Math.max(ledger.endsAt, endsAt);
}

/** Charges and reservations are addressed by (handle, id), as the Redis keys are. */
const scopedKey = (handleHash: string, id: string): string => `${handleHash}\n${id}`;

export class MemoryStore implements Store {
  readonly kind = 'memory' as const;

  private readonly clock: () => number;
  private readonly handles = new Map<string, HandleRecord>();
  private readonly byFingerprint = new Map<string, Set<string>>();
  /** Every live reservation, for the reconciler's stale sweep (the deadline lives on the handle's record). */
  private readonly reservationIndex = new Map<string, { handleHash: string; reservationId: string }>();
  private readonly charges = new Map<string, ChargeRecord>();
  private readonly chargeByRef = new Map<string, string>();
  /** The reconciler's due index: keys of charges in status 'pending' or 'abandoned' (§7.6 late payments). */
  private readonly polledCharges = new Set<string>();
  private readonly challengeBuckets = new Map<string, TokenBucket>();
  private readonly leases = new Map<string, { owner: string; expiresAt: number }>();
  /** Claimed provider events: "source\nid" → when it is forgotten. */
  private readonly events = new Map<string, number>();
  private readonly devLinks = new Map<string, DevLink>();
  /** Priced-request registry: session hash → its forwarded priced requests (one lifetime per session). */
  private readonly pricedRequests = new Map<string, { expiresAt: number; requests: Map<string, PricedRequestRecord> }>();
  private readonly tasks = new Map<string, { record: TaskRecord; expiresAt: number }>();
  private nextSweepAt: number;
  private readonly orphans = new Map<string, OrphanPayment>();
  /** Replies of money operations by operation, for a re-run of the same attempt (SPEC §21; Store's `Attempt`). */
  private readonly operations = new Map<string, { attempt: Attempt; reply: unknown; until: number }>();
  /** Budget and allowance counters (SPEC §23). */
  private readonly quotas: MemoryQuotas;

  constructor(options: { now?: () => number; ledgerRetentionMs?: number } = {}) {
    this.clock = options.now ?? Date.now;
    this.nextSweepAt = this.clock() + SWEEP_INTERVAL_MS;
    this.ledgerRetentionMs = options.ledgerRetentionMs ?? LEDGER_RETENTION_MS;
    this.quotas = new MemoryQuotas(this.clock);
  }

  async createHandle(handle: NewHandle): Promise<void> {
    checkHandleTtl(handle.ttlMs);
    const now = this.now();
    const previous = this.handles.get(handle.handleHash);
    if (previous) this.deleteHandle(handle.handleHash, previous);
    // A hash is never reused in production (16 random bytes); a re-created one starts with no history.
    this.ledgers.delete(handle.handleHash);
    this.retired.delete(handle.handleHash);
    this.handles.set(handle.handleHash, {
      fingerprint: handle.fingerprint,
      principal: handle.principal,
      balances: new Map(),
      funded: new Set(),
      expiresAt: now + handle.ttlMs,
      bucket: null,
      reservations: new Map(),
      pendingCharge: new Map(),
      lastCharge: new Map(),
    });
    let hashes = this.byFingerprint.get(handle.fingerprint);
    if (!hashes) this.byFingerprint.set(handle.fingerprint, (hashes = new Set()));
    hashes.add(handle.handleHash);
  }

  async getHandle(handleHash: string): Promise<HandleState | null> {
    const handle = this.liveHandle(handleHash, this.now());
    if (!handle) return null;
    return {
      principal: handle.principal,
      balances: Object.fromEntries(handle.balances),
      funded: Object.fromEntries([...handle.funded].map((sku) => [sku, true])),
      expiresAt: handle.expiresAt,
      fingerprint: handle.fingerprint,
    };
  }

  async findHandlesByFingerprint(fingerprint: string): Promise<string[]> {
    const now = this.now();
    return [...(this.byFingerprint.get(fingerprint) ?? [])].filter((hash) => this.liveHandle(hash, now) !== null);
  }

  async reserve(request: SpendRequest): Promise<SpendDecision> {
    return this.once(`r:${scopedKey(request.handleHash, request.reservationId)}`, request.attempt, () => this.reserveNow(request));
  }

  private async reserveNow(request: SpendRequest): Promise<SpendDecision> {
    const now = this.now();
    const handle = this.liveHandle(request.handleHash, now);
    if (!handle) return { kind: 'unknown_handle' };
    if (handle.principal !== null && handle.principal !== request.principal) return { kind: 'bound_to_other_principal' };

    // The token is taken whatever the balance: rate limiting is decided before any credit moves.
    if (request.bucket) {
      handle.bucket ??= newBucket(request.bucket.burst, now);
      const retryAfterMs = takeToken(handle.bucket, request.bucket, now);
      if (retryAfterMs > 0) return { kind: 'rate_limited', retryAfterMs };
    }

    const balance = handle.balances.get(request.sku) ?? 0;
    if (balance < request.cost) {
      return {
        kind: 'insufficient',
        balance,
        funded: handle.funded.has(request.sku),
        pending: this.copyCharge(this.pendingChargeOf(request.handleHash, handle, request.sku)),
        lastCharge: this.copyCharge(this.chargeOf(request.handleHash, handle.lastCharge.get(request.sku))),
      };
    }
    const remaining = balance - request.cost;
    handle.balances.set(request.sku, remaining);
    handle.reservations.set(request.reservationId, { sku: request.sku, cost: request.cost, deadline: request.reservationDeadline });
    this.reservationIndex.set(scopedKey(request.handleHash, request.reservationId), { handleHash: request.handleHash, reservationId: request.reservationId });
    handle.expiresAt = now + request.ttlMs;
    this.extendLedger(request.handleHash, handle.expiresAt);
    return { kind: 'reserved', remaining };
  }

  async commit(handleHash: string, reservationId: string, tool = '', attempt?: Attempt): Promise<number | null> {
    return this.once(`c:${scopedKey(handleHash, reservationId)}`, attempt, () => this.commitNow(handleHash, reservationId, tool));
  }

  private async commitNow(handleHash: string, reservationId: string, tool: string): Promise<number | null> {
    const now = this.now();
    const handle = this.liveHandle(handleHash, now);
    const reservation = this.takeReservation(handleHash, handle, reservationId);
    if (!handle || !reservation) return null;
    this.appendEntry(handleHash, handle.fingerprint, now, handle.expiresAt, {
      kind: 'spend',
      sku: reservation.sku,
      credits: -reservation.cost,
      balanceAfter: ownedOf(handle, reservation.sku),
      ref: null,
      ...(tool ? { tool } : {}),
    });
    return handle.balances.get(reservation.sku) ?? 0;
  }

  async release(handleHash: string, reservationId: string, attempt?: Attempt): Promise<number | null> {
    return this.once(`l:${scopedKey(handleHash, reservationId)}`, attempt, async () => this.releaseReservation(handleHash, reservationId, this.now()));
  }

  async releaseStaleReservations(now: number, limit: number): Promise<number> {
    const clockNow = this.now();
    const stale: { handleHash: string; reservationId: string; deadline: number }[] = [];
    for (const { handleHash, reservationId } of this.reservationIndex.values()) {
      const deadline = this.liveHandle(handleHash, clockNow)?.reservations.get(reservationId)?.deadline;
      if (deadline !== undefined && deadline < now) stale.push({ handleHash, reservationId, deadline });
    }
    stale.sort((a, b) => a.deadline - b.deadline);
    const released = stale.slice(0, Math.max(0, limit));
    for (const { handleHash, reservationId } of released) this.releaseReservation(handleHash, reservationId, clockNow);
    return released.length;
  }

  async grantCredits(handleHash: string, sku: string, credits: number, reason = '', attempt?: Attempt): Promise<number> {
    return this.once(`g:${scopedKey(handleHash, attempt ?? '')}`, attempt, () => this.grantCreditsNow(handleHash, sku, credits, reason));
  }

  private async grantCreditsNow(handleHash: string, sku: string, credits: number, reason: string): Promise<number> {
    checkGrant(credits);
    const now = this.now();
    const handle = this.liveHandle(handleHash, now);
    if (!handle) throw new GatewayError('TB_ERR_NOT_FOUND', 'no live handle with that hash: it never existed or has expired');
    const balance = (handle.balances.get(sku) ?? 0) + credits;
    handle.balances.set(sku, balance);
    this.appendEntry(handleHash, handle.fingerprint, now, handle.expiresAt, { kind: 'adjust', sku, credits, balanceAfter: ownedOf(handle, sku), ref: null, ...(reason ? { reason } : {}) });
    return balance;
  }

  async beginCharge(request: OpenChargeRequest): Promise<BeginChargeResult> {
    return this.once(`b:${scopedKey(request.handleHash, request.nonce)}`, request.attempt, () => this.beginChargeNow(request));
  }

  private async beginChargeNow(request: OpenChargeRequest): Promise<BeginChargeResult> {
    const { handleHash, sku, now } = request;
    const handle = this.liveHandle(handleHash, this.now());
    const current = handle ? this.pendingChargeOf(handleHash, handle, sku) : null;
    if (current) {
      if (chargeShareable(current, now)) return { kind: 'existing', charge: { ...current } };
      // Otherwise a new charge takes over. The old one stays as it is (a pending one stays in the
      // due index, a stale opening one may still get its link) so a late payment can be claimed.
    }
    const charge = newChargeRecord(request);
    this.charges.set(scopedKey(handleHash, request.nonce), charge);
    // Without a live handle the charge is still recorded (an operator can see it); nothing points at it.
    handle?.pendingCharge.set(sku, request.nonce);
    return { kind: 'begun', charge: { ...charge } };
  }

  async attachLink(handleHash: string, nonce: string, link: { providerRef: string; checkoutUrl: string }, attempt?: Attempt): Promise<ChargeRecord | null> {
    return this.once(`a:${scopedKey(handleHash, nonce)}`, attempt, () => this.attachLinkNow(handleHash, nonce, link));
  }

  private async attachLinkNow(handleHash: string, nonce: string, link: { providerRef: string; checkoutUrl: string }): Promise<ChargeRecord | null> {
    const key = scopedKey(handleHash, nonce);
    const charge = this.charges.get(key);
    if (!charge || charge.status !== 'opening') return null;
    charge.providerRef = link.providerRef;
    charge.checkoutUrl = link.checkoutUrl;
    charge.status = 'pending';
    this.chargeByRef.set(link.providerRef, key);
    this.polledCharges.add(key);
    return { ...charge };
  }

  async abortCharge(handleHash: string, nonce: string): Promise<void> {
    const charge = this.charges.get(scopedKey(handleHash, nonce));
    if (charge?.status === 'opening') this.deleteCharge(scopedKey(handleHash, nonce), charge);
  }

  async getCharge(handleHash: string, nonce: string): Promise<ChargeRecord | null> {
    return this.copyCharge(this.charges.get(scopedKey(handleHash, nonce)) ?? null);
  }

  async findChargeByRef(providerRef: string): Promise<ChargeRecord | null> {
    const key = this.chargeByRef.get(providerRef);
    return this.copyCharge(key === undefined ? null : (this.charges.get(key) ?? null));
  }

  async takePollSlot(handleHash: string, nonce: string, now: number, minIntervalMs: number, nextPollAt: number): Promise<boolean> {
    const charge = this.charges.get(scopedKey(handleHash, nonce));
    if (!charge) return false;
    if (charge.pollCount > 0 && charge.lastPolledAt > now - minIntervalMs) return false;
    charge.lastPolledAt = now;
    charge.pollCount++;
    charge.nextPollAt = nextPollAt;
    return true;
  }

  async markChargeRead(handleHash: string, nonce: string, polledAt: number): Promise<void> {
    const charge = this.charges.get(scopedKey(handleHash, nonce));
    if (charge && charge.lastPolledAt === polledAt) charge.lastReadAt = polledAt;
  }

  /**
   * Exactly once (§7.5): only a 'pending', 'abandoned' or 'expired' charge can be claimed (a late
   * payment is still granted). If the handle expired meanwhile the claim still records the outcome (status,
   * receivedAmount) so the operator sees the money, but there is nothing to credit: grantedCredits
   * is 0 and the balance returned is 0.
   */
  async claimSettlement(claim: SettlementClaim): Promise<ClaimResult> {
    return this.once(`s:${scopedKey(claim.handleHash, claim.nonce)}`, claim.attempt, () => this.claimSettlementNow(claim));
  }

  private async claimSettlementNow(claim: SettlementClaim): Promise<ClaimResult> {
    const key = scopedKey(claim.handleHash, claim.nonce);
    const charge = this.charges.get(key) ?? null;
    const now = this.now();
    const handle = this.liveHandle(claim.handleHash, now);
    const balanceOf = (): number => (handle && charge ? (handle.balances.get(charge.sku) ?? 0) : 0);
    if (!charge || !CLAIMABLE.has(charge.status)) {
      return { claimed: false, charge: this.copyCharge(charge), balance: balanceOf() };
    }
    charge.status = claim.outcome;
    charge.receivedAmount = claim.receivedAmount;
    charge.grantedCredits = handle ? claim.credits : 0;
    this.polledCharges.delete(key);
    if (handle) {
      if (claim.credits > 0) {
        handle.balances.set(charge.sku, (handle.balances.get(charge.sku) ?? 0) + claim.credits);
        handle.funded.add(charge.sku);
      }
      this.chargeLeftPending(handle, charge);
    }
    // One grant entry per claim (SPEC §17), credits 0 when nothing was granted: every payment has its line.
    const fingerprint = handle?.fingerprint ?? this.retired.get(claim.handleHash)?.fingerprint ?? this.ledgers.get(claim.handleHash)?.fingerprint ?? '';
    this.appendEntry(claim.handleHash, fingerprint, now, handle?.expiresAt ?? now, {
      kind: 'grant',
      sku: charge.sku,
      credits: charge.grantedCredits,
      balanceAfter: handle ? ownedOf(handle, charge.sku) : 0,
      ref: charge.nonce,
      currency: charge.currency,
      ...(claim.receivedAmount !== null ? { amount: claim.receivedAmount } : {}),
    });
    return { claimed: true, charge: { ...charge }, balance: balanceOf() };
  }

  async abandonCharge(handleHash: string, nonce: string, nextPollAt: number): Promise<boolean> {
    const charge = this.charges.get(scopedKey(handleHash, nonce));
    if (charge?.status !== 'pending') return false;
    charge.status = 'abandoned';
    charge.nextPollAt = nextPollAt; // still polled: a late payment on it is granted (§7.6)
    const handle = this.handles.get(handleHash);
    if (handle) this.chargeLeftPending(handle, charge);
    return true;
  }

  async expireCharge(handleHash: string, nonce: string, now: number): Promise<boolean> {
    const key = scopedKey(handleHash, nonce);
    const charge = this.charges.get(key);
    if (charge?.status !== 'pending' && charge?.status !== 'abandoned') return false;
    charge.status = 'expired';
    charge.expiredAt = now;
    this.polledCharges.delete(key);
    const handle = this.handles.get(handleHash);
    if (handle) this.chargeLeftPending(handle, charge);
    return true;
  }

  async dueCharges(now: number, limit: number): Promise<ChargeRecord[]> {
    this.sweepIfDue(this.now());
    const due: ChargeRecord[] = [];
    for (const key of this.polledCharges) {
      const charge = this.charges.get(key);
      if (charge && charge.nextPollAt <= now) due.push(charge);
    }
    due.sort((a, b) => a.nextPollAt - b.nextPollAt);
    return due.slice(0, Math.max(0, limit)).map((charge) => ({ ...charge }));
  }

  async listCharges(status?: ChargeStatus): Promise<ChargeRecord[]> {
    this.sweepIfDue(this.now());
    return [...this.charges.values()]
      .filter((charge) => status === undefined || charge.status === status)
      .sort((a, b) => a.openedAt - b.openedAt)
      .map((charge) => ({ ...charge }));
  }

  async countPendingCharges(): Promise<number> {
    let count = 0;
    for (const charge of this.charges.values()) if (charge.status === 'pending' || charge.status === 'opening') count++;
    return count;
  }

  async takeChallengeToken(clientKey: string, bucket: BucketParams): Promise<{ allowed: boolean; retryAfterMs: number }> {
    const now = this.now();
    let state = this.challengeBuckets.get(clientKey);
    if (!state) this.challengeBuckets.set(clientKey, (state = newBucket(bucket.burst, now)));
    const retryAfterMs = takeToken(state, bucket, now);
    return { allowed: retryAfterMs === 0, retryAfterMs };
  }

  async acquireLease(name: string, owner: string, ttlMs: number): Promise<boolean> {
    const now = this.now();
    const lease = this.leases.get(name);
    if (lease && lease.owner !== owner && lease.expiresAt > now) return false;
    this.leases.set(name, { owner, expiresAt: now + ttlMs });
    return true;
  }

  async claimEvent(source: string, eventId: string, ttlMs: number): Promise<boolean> {
    const now = this.now();
    const key = `${source}\n${eventId}`;
    const forgetAt = this.events.get(key);
    if (forgetAt !== undefined && forgetAt > now) return false;
    this.events.set(key, now + ttlMs);
    return true;
  }

  async putDevLink(link: DevLink): Promise<void> {
    this.sweepIfDue(this.now());
    this.devLinks.set(link.id, { ...link });
  }

  async getDevLink(id: string): Promise<DevLink | null> {
    const link = this.devLinks.get(id);
    return link ? { ...link } : null;
  }

  async payDevLink(id: string, receivedAmount: string): Promise<boolean> {
    const link = this.devLinks.get(id);
    if (!link || link.status !== 'active' || link.expiresAt <= this.now()) return false;
    link.status = 'completed';
    link.receivedAmount = receivedAmount;
    return true;
  }

  async recordOrphanPayment(orphan: OrphanPayment): Promise<boolean> {
    if (this.orphans.has(orphan.providerRef)) return false;
    this.orphans.set(orphan.providerRef, { ...orphan });
    return true;
  }

  async listOrphanPayments(): Promise<OrphanPayment[]> {
    const now = this.now();
    return [...this.orphans.values()].filter((orphan) => orphan.noticedAt + RETENTION_MS > now).sort((a, b) => a.noticedAt - b.noticedAt).map((orphan) => ({ ...orphan }));
  }

  async ping(): Promise<void> {}

  // Budgets and allowances (SPEC §23): memory/quotas.ts.
  reserveQuotas(request: QuotaRequest): Promise<QuotaDecision> { return this.quotas.reserveQuotas(request); }
  concludeQuotas(holdId: string, counters: QuotaCounter[], outcome: 'commit' | 'release', attempt?: Attempt): Promise<void> { return this.quotas.concludeQuotas(holdId, counters, outcome, attempt); }
  holdQuotas(holdId: string, counters: QuotaCounter[], deadline: number): Promise<boolean> { return this.quotas.holdQuotas(holdId, counters, deadline); }
  releaseStaleQuotas(now: number, limit: number): Promise<number> { return this.quotas.releaseStaleQuotas(now, limit); }
  quotaUsage(counters: QuotaCounter[]): Promise<QuotaUsage[]> { return this.quotas.quotaUsage(counters); }

  async close(): Promise<void> {}

  // ── ledger (SPEC §17) ────────────────────────────────────────────────────────────────────────────
  // Entries are appended inside the method that moves the credits (no await in between). A handle's
  // ledger outlives it by ledgerRetentionMs; an ended handle's fingerprint is remembered for
  // HANDLE_GRACE_MS (as Redis keeps its hash), for the grant entry of a late payment.

  private readonly ledgerRetentionMs: number;
  private readonly ledgers = new Map<string, MemoryLedger>();
  private readonly paymentLedgers = new Map<string, MemoryLedger>();
  private readonly retired = new Map<string, { fingerprint: string; until: number }>();

  async expireHandles(now: number, limit: number): Promise<number> {
    let ended = 0;
    for (const [handleHash, handle] of this.handles) {
      if (ended >= limit) break;
      if (handle.expiresAt > now) continue;
      this.endHandle(handleHash, handle, Math.max(now, this.clock()));
      ended++;
    }
    return ended;
  }

  async ledgerTail(handleHash: string, count: number): Promise<LedgerEntry[]> {
    const entries = this.ledgers.get(handleHash)?.entries ?? [];
    return count <= 0 ? [] : entries.slice(-count).map((entry) => ({ ...entry }));
  }

  async *ledgerAccounts(options: { unledgeredHandles?: boolean } = {}): AsyncIterable<LedgerAccount> {
    for (const handleHash of this.ledgers.keys()) yield { kind: 'handle', handleHash };
    for (const payer of this.paymentLedgers.keys()) yield { kind: 'payer', payer };
    if (!options.unledgeredHandles) return;
    for (const handleHash of this.handles.keys()) if (!this.ledgers.has(handleHash)) yield { kind: 'handle', handleHash };
  }

  async ledgerCheckpoint(account: LedgerAccount): Promise<LedgerCheckpoint | null> {
    const ledger = account.kind === 'handle' ? this.ledgers.get(account.handleHash) : this.paymentLedgers.get(account.payer.toLowerCase());
    const last = ledger?.entries.at(-1);
    // Not liveHandle: a read must not end a handle; one past its life still holds what it held.
    const handle = account.kind === 'handle' ? this.handles.get(account.handleHash) : undefined;
    const holdings: Record<string, LedgerHolding> = {};
    if (handle) {
      for (const [sku, balance] of handle.balances) holdings[sku] = { balance, reserved: 0 };
      for (const { sku, cost } of handle.reservations.values()) holdings[sku] = { balance: holdings[sku]?.balance ?? 0, reserved: (holdings[sku]?.reserved ?? 0) + cost };
    }
    if (!last && Object.keys(holdings).length === 0) return null;
    return { account, fingerprint: handle?.fingerprint ?? ledger?.fingerprint ?? '', lastSeq: last?.seq ?? 0, lastAt: last?.at ?? 0, holdings };
  }

  async readLedger(account: LedgerAccount, range: LedgerRange): Promise<LedgerEntry[]> {
    const ledger = account.kind === 'handle' ? this.ledgers.get(account.handleHash) : this.paymentLedgers.get(account.payer.toLowerCase());
    if (!ledger || range.limit <= 0) return [];
    const { since, until, after, through } = range;
    // seq is the position + 1: start right after `after`.
    const out: LedgerEntry[] = [];
    for (let i = after ? after.seq : 0; i < ledger.entries.length && out.length < range.limit; i++) {
      const entry = ledger.entries[i] as LedgerEntry;
      if (through && entry.seq > through.seq) break;
      if (until !== undefined && entry.at >= until) break;
      if (since !== undefined && entry.at < since) continue;
      out.push({ ...entry });
    }
    return out;
  }

  /**
   * A handle whose life is over, in one step: an `expire` entry per SKU for what it held (balance
   * and reservations, dated at its expiry), then it and its reservations go.
   */
  private endHandle(handleHash: string, handle: HandleRecord, now: number): void {
    const held = new Map(handle.balances);
    for (const { sku, cost } of handle.reservations.values()) held.set(sku, (held.get(sku) ?? 0) + cost);
    for (const [sku, credits] of held) {
      if (credits !== 0) this.appendEntry(handleHash, handle.fingerprint, handle.expiresAt, now, { kind: 'expire', sku, credits: -credits, balanceAfter: 0, ref: null });
    }
    this.deleteHandle(handleHash, handle);
    this.retired.set(handleHash, { fingerprint: handle.fingerprint, until: handle.expiresAt + HANDLE_GRACE_MS });
  }

  /** Appends one entry: seq = last + 1, at = max(at, last at); the ledger lives ledgerRetentionMs past max(handleExpiresAt, at). */
  private appendEntry(handleHash: string, fingerprint: string, at: number, handleExpiresAt: number, entry: Omit<LedgerEntry, 'seq' | 'at' | 'fingerprint'>): void {
    let ledger = this.ledgers.get(handleHash);
    if (!ledger) this.ledgers.set(handleHash, (ledger = { fingerprint, entries: [], endsAt: 0 }));
    if (fingerprint !== '') ledger.fingerprint = fingerprint;
    const numbered = entry as LedgerEntry; // the caller's fresh literal, completed in place
    numbered.seq = 0;
    numbered.at = at;
    numbered.fingerprint = ledger.fingerprint;
    pushEntry(ledger, numbered, Math.max(handleExpiresAt, at) + this.ledgerRetentionMs);
  }

  private appendPaymentEntry(record: PaymentNonceRecord, outcome: PaymentNonceOutcome): void {
    let ledger = this.paymentLedgers.get(record.payer);
    if (!ledger) this.paymentLedgers.set(record.payer, (ledger = { fingerprint: '', entries: [], endsAt: 0 }));
    const entry: LedgerEntry = {
      seq: 0,
      at: outcome.at,
      kind: 'x402_settle',
      sku: record.sku,
      credits: 0,
      balanceAfter: 0,
      ref: record.nonce,
      fingerprint: '',
      tool: record.tool,
      amount: record.amount,
      network: record.network,
      asset: record.asset,
      payer: record.payer,
      ...(outcome.transaction ? { transaction: outcome.transaction } : {}),
    };
    pushEntry(ledger, entry, outcome.at + this.ledgerRetentionMs);
  }

  /** A slide moves the handle's end, and with it its ledger's. */
  private extendLedger(handleHash: string, handleExpiresAt: number): void {
    const ledger = this.ledgers.get(handleHash);
    if (ledger) ledger.endsAt = Math.max(ledger.endsAt, handleExpiresAt + this.ledgerRetentionMs);
  }


  // ── priced-request registry (SPEC §6.5) ────────────────────────────────────────────────────────────

  async registerPricedRequest(key: PricedRequestKey, record: PricedRequestRecord, ttlMs: number): Promise<void> {
    const now = this.now();
    let session = this.pricedRequests.get(key.session);
    if (!session || session.expiresAt <= now) this.pricedRequests.set(key.session, (session = { expiresAt: 0, requests: new Map() }));
    session.requests.set(key.requestId, { ...record });
    // One lifetime per session, as the Redis hash has: it is never shortened.
    session.expiresAt = Math.max(session.expiresAt, now + ttlMs);
  }

  async getPricedRequest(key: PricedRequestKey): Promise<PricedRequestRecord | null> {
    const record = this.pricedRequest(key);
    return record ? { ...record } : null;
  }

  async concludePricedRequest(key: PricedRequestKey, state: 'committed' | 'released', remaining: number | null): Promise<PricedRequestRecord | null> {
    const record = this.pricedRequest(key);
    if (!record) return null;
    if (record.state === 'in_flight') {
      record.state = state;
      record.remaining = state === 'committed' ? remaining : null;
    }
    return { ...record };
  }

  private pricedRequest(key: PricedRequestKey): PricedRequestRecord | null {
    const session = this.pricedRequests.get(key.session);
    if (!session) return null;
    if (session.expiresAt > this.now()) return session.requests.get(key.requestId) ?? null;
    this.pricedRequests.delete(key.session);
    return null;
  }

  // ── end of the priced-request registry ───────────────────────────────────────────────────────────
  // ── x402 authorizations (SPEC §19) ───────────────────────────────────────────────────────────────
  // One record per authorization nonce; no await between the look-up and the write, so the first
  // claim wins. Expired records are dropped on access and by a sweep at most once a minute.

  private readonly paymentNonces = new Map<string, PaymentNonceRecord>();
  private nextPaymentNonceSweepAt = 0;

  async claimPaymentNonce(claim: PaymentNonceClaim): Promise<boolean> {
    return this.once(`x:${paymentNonceId(claim)}`, claim.attempt, () => this.claimPaymentNonceNow(claim));
  }

  private async claimPaymentNonceNow(claim: PaymentNonceClaim): Promise<boolean> {
    const now = this.clock();
    this.sweepPaymentNonces(now);
    const key = paymentNonceId(claim);
    if (this.livePaymentNonce(key, now)) return false;
    this.paymentNonces.set(key, newPaymentNonceRecord(claim, now));
    return true;
  }

  async finishPaymentNonce(key: PaymentNonceKey, outcome: PaymentNonceOutcome, attempt?: Attempt): Promise<boolean> {
    return this.once(`f:${paymentNonceId(key)}`, attempt, () => this.finishPaymentNonceNow(key, outcome));
  }

  private async finishPaymentNonceNow(key: PaymentNonceKey, outcome: PaymentNonceOutcome): Promise<boolean> {
    const record = this.livePaymentNonce(paymentNonceId(key), this.clock());
    if (!record || record.state !== 'claimed') return false;
    record.state = outcome.state;
    record.transaction = outcome.transaction;
    record.finishedAt = outcome.at;
    if (outcome.state === 'settled') this.appendPaymentEntry(record, outcome);
    return true;
  }

  private readonly settledPayments = new Map<string, number>();

  async recordX402Settlement(record: X402SettlementRecord): Promise<boolean> {
    const id = paymentNonceId(record);
    const now = this.clock();
    const markedUntil = this.settledPayments.get(id);
    if (markedUntil !== undefined && markedUntil > now) return false;
    const outcome = { state: 'settled' as const, transaction: record.transaction, at: record.at };
    this.settledPayments.set(id, now + this.ledgerRetentionMs);
    const claim = this.livePaymentNonce(id, now);
    if (claim?.state === 'settled') return false;
    if (claim) Object.assign(claim, { state: 'settled', transaction: record.transaction, finishedAt: record.at });
    this.appendPaymentEntry({ ...record, expiresAt: 0, claimedAt: record.at, state: 'settled', finishedAt: record.at }, outcome);
    return true;
  }

  async getPaymentNonce(key: PaymentNonceKey): Promise<PaymentNonceRecord | null> {
    const record = this.livePaymentNonce(paymentNonceId(key), this.clock());
    return record ? { ...record } : null;
  }

  private livePaymentNonce(key: string, now: number): PaymentNonceRecord | null {
    const record = this.paymentNonces.get(key);
    if (!record) return null;
    if (record.expiresAt > now) return record;
    this.paymentNonces.delete(key);
    return null;
  }

  private sweepPaymentNonces(now: number): void {
    if (now < this.nextPaymentNonceSweepAt) return;
    this.nextPaymentNonceSweepAt = now + SWEEP_INTERVAL_MS;
    for (const [key, record] of this.paymentNonces) if (record.expiresAt <= now) this.paymentNonces.delete(key);
    for (const [key, until] of this.settledPayments) if (until <= now) this.settledPayments.delete(key);
  }

  // ── sessions bound to principals (SPEC §20) ──────────────────────────────────────────────────────
  // session hash → owner; no await between the look-up and the write, so the first binding wins.
  // Expired bindings are dropped on access and by the periodic sweep.

  private readonly sessionOwners = new Map<string, { principal: string; expiresAt: number }>();

  async bindSession(sessionHash: string, principal: string, ttlMs: number): Promise<string> {
    const now = this.now();
    const bound = this.liveSessionOwner(sessionHash, now);
    if (bound) return bound.principal;
    this.sessionOwners.set(sessionHash, { principal, expiresAt: now + ttlMs });
    return principal;
  }

  async sessionPrincipal(sessionHash: string, ttlMs: number): Promise<string | null> {
    const now = this.now();
    const bound = this.liveSessionOwner(sessionHash, now);
    if (!bound) return null;
    bound.expiresAt = now + ttlMs;
    return bound.principal;
  }

  private liveSessionOwner(sessionHash: string, now: number): { principal: string; expiresAt: number } | null {
    const bound = this.sessionOwners.get(sessionHash);
    if (!bound) return null;
    if (bound.expiresAt > now) return bound;
    this.sessionOwners.delete(sessionHash);
    return null;
  }

  // ── end of sessions bound to principals ──────────────────────────────────────────────────────────

  // ── tasks holding a reservation ──────────────────────────────────────────────────────────────────

  async holdTask(key: TaskKey, record: TaskRecord): Promise<boolean> {
    const now = this.now();
    const reservation = this.liveHandle(record.handleHash, now)?.reservations.get(record.reservationId);
    if (!reservation) return false;
    reservation.deadline = record.deadline; // the stale sweep releases it at the task deadline
    this.tasks.set(taskHash(key), { record: { ...record }, expiresAt: record.deadline + TASK_RECORD_GRACE_MS });
    return true;
  }

  async getTask(key: TaskKey): Promise<TaskRecord | null> {
    const entry = this.tasks.get(taskHash(key));
    if (!entry) return null;
    if (entry.expiresAt > this.now()) return { ...entry.record };
    this.tasks.delete(taskHash(key));
    return null;
  }

  async endTask(key: TaskKey): Promise<void> {
    this.tasks.delete(taskHash(key));
  }

  // ── end of tasks ─────────────────────────────────────────────────────────────────────────────────

  /** Sizes of every map, for tests and debugging (not part of Store). */
  stats(): { handles: number; reservations: number; charges: number; challengeBuckets: number; leases: number; devLinks: number; ledgers: number } {
    return {
      ledgers: this.ledgers.size + this.paymentLedgers.size,
      handles: this.handles.size,
      reservations: this.reservationIndex.size,
      charges: this.charges.size,
      challengeBuckets: this.challengeBuckets.size,
      leases: this.leases.size,
      devLinks: this.devLinks.size,
    };
  }

  /** Drops everything that can no longer matter at `now`. Runs by itself at most once a minute. */
  sweep(now: number): void {
    this.nextSweepAt = now + SWEEP_INTERVAL_MS;
    for (const [hash, handle] of this.handles) if (handle.expiresAt <= now) this.endHandle(hash, handle, now);
    for (const ledgers of [this.ledgers, this.paymentLedgers]) for (const [id, ledger] of ledgers) if (ledger.endsAt <= now) ledgers.delete(id);
    for (const [hash, retired] of this.retired) if (retired.until <= now) this.retired.delete(hash);
    for (const [key, charge] of this.charges) {
      // An opening charge never got its link (its opener died): nobody can pay it once it expired.
      if (chargeRecordEnd(charge) <= now) this.deleteCharge(key, charge);
    }
    // A dev link is kept as long as its charge: the reconciler reads it after expiry.
    for (const [id, link] of this.devLinks) if (devLinkEnd(link) <= now) this.devLinks.delete(id);
    for (const [key, bucket] of this.challengeBuckets) if (bucket.fullAt <= now) this.challengeBuckets.delete(key);
    for (const [name, lease] of this.leases) if (lease.expiresAt <= now) this.leases.delete(name);
    for (const [session, entry] of this.pricedRequests) if (entry.expiresAt <= now) this.pricedRequests.delete(session);
    for (const [key, forgetAt] of this.events) if (forgetAt <= now) this.events.delete(key);
    for (const [hash, bound] of this.sessionOwners) if (bound.expiresAt <= now) this.sessionOwners.delete(hash);
    for (const [operation, recorded] of this.operations) if (recorded.until <= now) this.operations.delete(operation);
  }

  /**
   * Runs one money operation, or answers a re-run of the same attempt with the first run's reply. The
   * memory store never loses a reply; this keeps its answers the same as the Redis store's.
   */
  private async once<T>(operation: string, attempt: Attempt | undefined, run: () => Promise<T>): Promise<T> {
    if (attempt === undefined) return run();
    const now = this.clock();
    const recorded = this.operations.get(operation);
    if (recorded && recorded.attempt === attempt && recorded.until > now) return structuredClone(recorded.reply) as T;
    const reply = await run();
    this.operations.set(operation, { attempt, reply: structuredClone(reply), until: now + OP_RECORD_TTL_MS });
    return reply;
  }

  private now(): number {
    const now = this.clock();
    this.sweepIfDue(now);
    return now;
  }

  private sweepIfDue(now: number): void {
    if (now >= this.nextSweepAt) this.sweep(now);
  }

  private liveHandle(handleHash: string, now: number): HandleRecord | null {
    const handle = this.handles.get(handleHash);
    if (!handle) return null;
    if (handle.expiresAt > now) return handle;
    this.endHandle(handleHash, handle, now);
    return null;
  }

  private deleteHandle(handleHash: string, handle: HandleRecord): void {
    this.handles.delete(handleHash);
    for (const reservationId of handle.reservations.keys()) this.reservationIndex.delete(scopedKey(handleHash, reservationId));
    const hashes = this.byFingerprint.get(handle.fingerprint);
    hashes?.delete(handleHash);
    if (hashes?.size === 0) this.byFingerprint.delete(handle.fingerprint);
  }

  private releaseReservation(handleHash: string, reservationId: string, now: number): number | null {
    const handle = this.liveHandle(handleHash, now);
    const reservation = this.takeReservation(handleHash, handle, reservationId);
    if (!handle || !reservation) return null;
    const balance = (handle.balances.get(reservation.sku) ?? 0) + reservation.cost;
    handle.balances.set(reservation.sku, balance);
    return balance;
  }

  private takeReservation(handleHash: string, handle: HandleRecord | null, reservationId: string): Reservation | null {
    const reservation = handle?.reservations.get(reservationId);
    if (!handle || !reservation) return null;
    handle.reservations.delete(reservationId);
    this.reservationIndex.delete(scopedKey(handleHash, reservationId));
    return reservation;
  }

  private chargeOf(handleHash: string, nonce: string | undefined): ChargeRecord | null {
    return nonce === undefined ? null : (this.charges.get(scopedKey(handleHash, nonce)) ?? null);
  }

  /** The charge challenges for this SKU show, if it is still opening or pending. */
  private pendingChargeOf(handleHash: string, handle: HandleRecord, sku: string): ChargeRecord | null {
    const charge = this.chargeOf(handleHash, handle.pendingCharge.get(sku));
    return charge && (charge.status === 'opening' || charge.status === 'pending') ? charge : null;
  }

  private chargeLeftPending(handle: HandleRecord, charge: ChargeRecord): void {
    if (handle.pendingCharge.get(charge.sku) === charge.nonce) handle.pendingCharge.delete(charge.sku);
    handle.lastCharge.set(charge.sku, charge.nonce);
  }

  private deleteCharge(key: string, charge: ChargeRecord): void {
    this.charges.delete(key);
    this.polledCharges.delete(key);
    if (charge.providerRef !== null && this.chargeByRef.get(charge.providerRef) === key) this.chargeByRef.delete(charge.providerRef);
    const handle = this.handles.get(charge.handleHash);
    if (handle?.pendingCharge.get(charge.sku) === charge.nonce) handle.pendingCharge.delete(charge.sku);
    if (handle?.lastCharge.get(charge.sku) === charge.nonce) handle.lastCharge.delete(charge.sku);
  }

  private copyCharge(charge: ChargeRecord | null): ChargeRecord | null {
    return charge ? { ...charge } : null;
  }
}

// ── x402 authorizations ────────────────────────────────────────────────────────────────────────────

/** Letter case never makes two keys of one authorization (addresses and hex nonces are case-insensitive). */
const copyNonceKey = (key: PaymentNonceKey): PaymentNonceKey => ({ network: key.network.toLowerCase(), asset: key.asset.toLowerCase(), payer: key.payer.toLowerCase(), nonce: key.nonce.toLowerCase() });
const paymentNonceId = (key: PaymentNonceKey): string => Object.values(copyNonceKey(key)).join('\n');
