// Handles, reservations and grants in the memory store (SPEC §6, §8): create, read, reserve,
// commit, release (and the stale sweep's release), operator grants. A commit and a grant write their
// ledger entry in the same step (core.ts `appendEntry`), and a call's budget hold (SPEC §23) is
// checked, drawn and concluded in its credit's step (quotas.ts).
import { GatewayError } from '../../errors.js';
import { checkGrant, checkHandleTtl, newBucket, takeToken } from '../policy.js';
import type { Attempt, HandleState, HeldQuotas, NewHandle, SpendDecision, SpendRequest } from '../store.js';
import { MemoryCore, ownedOf, scopedKey } from './core.js';
import type { MemoryQuotas } from './quotas.js';

export class MemoryHandles {
  constructor(
    private readonly core: MemoryCore,
    private readonly quotas: MemoryQuotas,
  ) {}

  async createHandle(handle: NewHandle): Promise<void> {
    checkHandleTtl(handle.ttlMs);
    const now = this.core.now();
    const previous = this.core.handles.get(handle.handleHash);
    if (previous) this.core.deleteHandle(handle.handleHash, previous);
    // A hash is never reused in production (16 random bytes); a re-created one starts with no history.
    this.core.ledgers.delete(handle.handleHash);
    this.core.retired.delete(handle.handleHash);
    this.core.handles.set(handle.handleHash, {
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
    let hashes = this.core.byFingerprint.get(handle.fingerprint);
    if (!hashes) this.core.byFingerprint.set(handle.fingerprint, (hashes = new Set()));
    hashes.add(handle.handleHash);
  }

  async getHandle(handleHash: string): Promise<HandleState | null> {
    const handle = this.core.liveHandle(handleHash, this.core.now());
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
    const now = this.core.now();
    return [...(this.core.byFingerprint.get(fingerprint) ?? [])].filter((hash) => this.core.liveHandle(hash, now) !== null);
  }

  async reserve(request: SpendRequest): Promise<SpendDecision> {
    return this.core.once(`r:${scopedKey(request.handleHash, request.reservationId)}`, request.attempt, async () => this.reserveNow(request));
  }

  /** Synchronous, so the budget check, the reservation and the budget draw are one step. */
  private reserveNow(request: SpendRequest): SpendDecision {
    // A budget over its cap refuses first: no rate token is taken, no credit moves (§23).
    const quotas = request.quotas ? this.quotas.plan(request.quotas) : null;
    if (quotas?.kind === 'exceeded') {
      const { kind: _, ...refusal } = quotas;
      return { kind: 'quota_exceeded', ...refusal };
    }
    const now = this.core.now();
    const handle = this.core.liveHandle(request.handleHash, now);
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
        pending: this.core.copyCharge(this.core.pendingChargeOf(request.handleHash, handle, request.sku)),
        lastCharge: this.core.copyCharge(this.core.chargeOf(request.handleHash, handle.lastCharge.get(request.sku))),
      };
    }
    const remaining = balance - request.cost;
    handle.balances.set(request.sku, remaining);
    handle.reservations.set(request.reservationId, { sku: request.sku, cost: request.cost, deadline: request.reservationDeadline });
    this.core.reservationIndex.set(scopedKey(request.handleHash, request.reservationId), { handleHash: request.handleHash, reservationId: request.reservationId });
    handle.expiresAt = now + request.ttlMs;
    this.core.extendLedger(request.handleHash, handle.expiresAt);
    if (quotas) this.quotas.draw(quotas);
    return { kind: 'reserved', remaining };
  }

  async commit(handleHash: string, reservationId: string, tool = '', attempt?: Attempt, quotas?: HeldQuotas): Promise<number | null> {
    return this.core.once(`c:${scopedKey(handleHash, reservationId)}`, attempt, async () => {
      const balance = this.commitNow(handleHash, reservationId, tool);
      if (balance !== null && quotas) this.quotas.concludeNow(quotas, 'commit');
      return balance;
    });
  }

  private commitNow(handleHash: string, reservationId: string, tool: string): number | null {
    const now = this.core.now();
    const handle = this.core.liveHandle(handleHash, now);
    const reservation = this.core.takeReservation(handleHash, handle, reservationId);
    if (!handle || !reservation) return null;
    this.core.appendEntry(handleHash, handle.fingerprint, now, handle.expiresAt, {
      kind: 'spend',
      sku: reservation.sku,
      credits: -reservation.cost,
      balanceAfter: ownedOf(handle, reservation.sku),
      ref: reservationId, // matches the spend to its call's log lines (docs/decisions.md, "`ref` per kind")
      ...(tool ? { tool } : {}),
    });
    return handle.balances.get(reservation.sku) ?? 0;
  }

  async release(handleHash: string, reservationId: string, attempt?: Attempt, quotas?: HeldQuotas): Promise<number | null> {
    return this.core.once(`l:${scopedKey(handleHash, reservationId)}`, attempt, async () => {
      const balance = this.core.releaseReservation(handleHash, reservationId, this.core.now());
      if (balance !== null && quotas) this.quotas.concludeNow(quotas, 'release');
      return balance;
    });
  }

  async releaseStaleReservations(now: number, limit: number): Promise<number> {
    const clockNow = this.core.now();
    const stale: { handleHash: string; reservationId: string; deadline: number }[] = [];
    for (const { handleHash, reservationId } of this.core.reservationIndex.values()) {
      const deadline = this.core.liveHandle(handleHash, clockNow)?.reservations.get(reservationId)?.deadline;
      if (deadline !== undefined && deadline < now) stale.push({ handleHash, reservationId, deadline });
    }
    stale.sort((a, b) => a.deadline - b.deadline);
    const released = stale.slice(0, Math.max(0, limit));
    for (const { handleHash, reservationId } of released) this.core.releaseReservation(handleHash, reservationId, clockNow);
    return released.length;
  }

  async grantCredits(handleHash: string, sku: string, credits: number, reason = '', attempt?: Attempt): Promise<number> {
    return this.core.once(`g:${scopedKey(handleHash, attempt ?? '')}`, attempt, () => this.grantCreditsNow(handleHash, sku, credits, reason));
  }

  private async grantCreditsNow(handleHash: string, sku: string, credits: number, reason: string): Promise<number> {
    checkGrant(credits);
    const now = this.core.now();
    const handle = this.core.liveHandle(handleHash, now);
    if (!handle) throw new GatewayError('TB_ERR_NOT_FOUND', 'no live handle with that hash: it never existed or has expired');
    const balance = (handle.balances.get(sku) ?? 0) + credits;
    handle.balances.set(sku, balance);
    this.core.appendEntry(handleHash, handle.fingerprint, now, handle.expiresAt, { kind: 'adjust', sku, credits, balanceAfter: ownedOf(handle, sku), ref: null, ...(reason ? { reason } : {}) });
    return balance;
  }
}
