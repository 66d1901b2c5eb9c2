// Charges in the memory store (SPEC §7): open, link, poll, claim (exactly once, with its grant entry),
// abandon, expire, and the reconciler's listings; the dev provider's links and orphan payments,
// which live as long as charges do.
import { chargeShareable, newChargeRecord, RETENTION_MS } from '../policy.js';
import type { Attempt, BeginChargeResult, ChargeRecord, ChargeStatus, ClaimResult, DevLink, OpenChargeRequest, OrphanPayment, SettlementClaim } from '../store.js';
import { MemoryCore, ownedOf, scopedKey } from './core.js';

/** §7.5: a charge money can still land on (a late payment is never ignored). */
const CLAIMABLE: ReadonlySet<ChargeStatus> = new Set(['pending', 'abandoned', 'expired']);

export class MemoryCharges {
  constructor(private readonly core: MemoryCore) {}

  async beginCharge(request: OpenChargeRequest): Promise<BeginChargeResult> {
    return this.core.once(`b:${scopedKey(request.handleHash, request.nonce)}`, request.attempt, () => this.beginChargeNow(request));
  }

  private async beginChargeNow(request: OpenChargeRequest): Promise<BeginChargeResult> {
    const { handleHash, sku, now } = request;
    const handle = this.core.liveHandle(handleHash, this.core.now());
    const current = handle ? this.core.pendingChargeOf(handleHash, handle, sku) : null;
    if (current) {
      if (chargeShareable(current, now)) return { kind: 'existing', charge: { ...current } };
      // Otherwise a new charge takes over. The old one stays as it is (a pending one stays in the
      // due index, a stale opening one may still get its link) so a late payment can be claimed.
    }
    const charge = newChargeRecord(request);
    this.core.charges.set(scopedKey(handleHash, request.nonce), charge);
    // Without a live handle the charge is still recorded (an operator can see it); nothing points at it.
    handle?.pendingCharge.set(sku, request.nonce);
    return { kind: 'begun', charge: { ...charge } };
  }

  async attachLink(handleHash: string, nonce: string, link: { providerRef: string; checkoutUrl: string }, attempt?: Attempt): Promise<ChargeRecord | null> {
    return this.core.once(`a:${scopedKey(handleHash, nonce)}`, attempt, () => this.attachLinkNow(handleHash, nonce, link));
  }

  private async attachLinkNow(handleHash: string, nonce: string, link: { providerRef: string; checkoutUrl: string }): Promise<ChargeRecord | null> {
    const key = scopedKey(handleHash, nonce);
    const charge = this.core.charges.get(key);
    // A link is shown only for credits on a handle the store holds (see redis/charges.lua.ts, ATTACH_LINK).
    if (!charge || charge.status !== 'opening' || !this.core.liveHandle(handleHash, this.core.now())) return null;
    charge.providerRef = link.providerRef;
    charge.checkoutUrl = link.checkoutUrl;
    charge.status = 'pending';
    this.core.chargeByRef.set(link.providerRef, key);
    this.core.polledCharges.add(key);
    return { ...charge };
  }

  async abortCharge(handleHash: string, nonce: string): Promise<void> {
    const charge = this.core.charges.get(scopedKey(handleHash, nonce));
    if (charge?.status === 'opening') this.core.deleteCharge(scopedKey(handleHash, nonce), charge);
  }

  async getCharge(handleHash: string, nonce: string): Promise<ChargeRecord | null> {
    return this.core.copyCharge(this.core.charges.get(scopedKey(handleHash, nonce)) ?? null);
  }

  async findChargeByRef(providerRef: string): Promise<ChargeRecord | null> {
    const key = this.core.chargeByRef.get(providerRef);
    return this.core.copyCharge(key === undefined ? null : (this.core.charges.get(key) ?? null));
  }

  async takePollSlot(handleHash: string, nonce: string, now: number, minIntervalMs: number, nextPollAt: number): Promise<boolean> {
    const charge = this.core.charges.get(scopedKey(handleHash, nonce));
    if (!charge) return false;
    if (charge.pollCount > 0 && charge.lastPolledAt > now - minIntervalMs) return false;
    charge.lastPolledAt = now;
    charge.pollCount++;
    charge.nextPollAt = nextPollAt;
    return true;
  }

  async markChargeRead(handleHash: string, nonce: string, polledAt: number): Promise<void> {
    const charge = this.core.charges.get(scopedKey(handleHash, nonce));
    if (charge && charge.lastPolledAt === polledAt) charge.lastReadAt = polledAt;
  }

  /**
   * Exactly once (§7.5): only a 'pending', 'abandoned' or 'expired' charge can be claimed (a late
   * payment is still granted). If the handle expired meanwhile the claim still records the outcome (status,
   * receivedAmount) so the operator sees the money, but there is nothing to credit: grantedCredits
   * is 0 and the balance returned is 0.
   */
  async claimSettlement(claim: SettlementClaim): Promise<ClaimResult> {
    return this.core.once(`s:${scopedKey(claim.handleHash, claim.nonce)}`, claim.attempt, () => this.claimSettlementNow(claim));
  }

  private async claimSettlementNow(claim: SettlementClaim): Promise<ClaimResult> {
    const key = scopedKey(claim.handleHash, claim.nonce);
    const charge = this.core.charges.get(key) ?? null;
    const now = this.core.now();
    const handle = this.core.liveHandle(claim.handleHash, now);
    const balanceOf = (): number => (handle && charge ? (handle.balances.get(charge.sku) ?? 0) : 0);
    if (!charge || !CLAIMABLE.has(charge.status)) {
      return { claimed: false, charge: this.core.copyCharge(charge), balance: balanceOf() };
    }
    charge.status = claim.outcome;
    charge.receivedAmount = claim.receivedAmount;
    charge.grantedCredits = handle ? claim.credits : 0;
    this.core.polledCharges.delete(key);
    if (handle) {
      if (claim.credits > 0) {
        handle.balances.set(charge.sku, (handle.balances.get(charge.sku) ?? 0) + claim.credits);
        handle.funded.add(charge.sku);
      }
      this.core.chargeLeftPending(handle, charge);
    }
    // One grant entry per claim (SPEC §17), credits 0 when nothing was granted: every payment has its line.
    const fingerprint = handle?.fingerprint ?? this.core.retired.get(claim.handleHash)?.fingerprint ?? this.core.ledgers.get(claim.handleHash)?.fingerprint ?? '';
    this.core.appendEntry(claim.handleHash, fingerprint, now, handle?.expiresAt ?? now, {
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
    const charge = this.core.charges.get(scopedKey(handleHash, nonce));
    if (charge?.status !== 'pending') return false;
    charge.status = 'abandoned';
    charge.nextPollAt = nextPollAt; // still polled: a late payment on it is granted (§7.6)
    const handle = this.core.handles.get(handleHash);
    if (handle) this.core.chargeLeftPending(handle, charge);
    return true;
  }

  async expireCharge(handleHash: string, nonce: string, now: number): Promise<boolean> {
    const key = scopedKey(handleHash, nonce);
    const charge = this.core.charges.get(key);
    if (charge?.status !== 'pending' && charge?.status !== 'abandoned') return false;
    charge.status = 'expired';
    charge.expiredAt = now;
    this.core.polledCharges.delete(key);
    const handle = this.core.handles.get(handleHash);
    if (handle) this.core.chargeLeftPending(handle, charge);
    return true;
  }

  async dueCharges(now: number, limit: number): Promise<ChargeRecord[]> {
    this.core.sweepIfDue(this.core.now());
    const due: ChargeRecord[] = [];
    for (const key of this.core.polledCharges) {
      const charge = this.core.charges.get(key);
      if (charge && charge.nextPollAt <= now) due.push(charge);
    }
    due.sort((a, b) => a.nextPollAt - b.nextPollAt);
    return due.slice(0, Math.max(0, limit)).map((charge) => ({ ...charge }));
  }

  async listCharges(status?: ChargeStatus): Promise<ChargeRecord[]> {
    this.core.sweepIfDue(this.core.now());
    return [...this.core.charges.values()]
      .filter((charge) => status === undefined || charge.status === status)
      .sort((a, b) => a.openedAt - b.openedAt)
      .map((charge) => ({ ...charge }));
  }

  async countPendingCharges(): Promise<number> {
    let count = 0;
    for (const charge of this.core.charges.values()) if (charge.status === 'pending' || charge.status === 'opening') count++;
    return count;
  }

  async putDevLink(link: DevLink): Promise<void> {
    this.core.sweepIfDue(this.core.now());
    this.core.devLinks.set(link.id, { ...link });
  }

  async getDevLink(id: string): Promise<DevLink | null> {
    const link = this.core.devLinks.get(id);
    return link ? { ...link } : null;
  }

  async payDevLink(id: string, receivedAmount: string): Promise<boolean> {
    const link = this.core.devLinks.get(id);
    if (!link || link.status !== 'active' || link.expiresAt <= this.core.now()) return false;
    link.status = 'completed';
    link.receivedAmount = receivedAmount;
    return true;
  }

  async recordOrphanPayment(orphan: OrphanPayment): Promise<boolean> {
    if (this.core.orphans.has(orphan.providerRef)) return false;
    this.core.orphans.set(orphan.providerRef, { ...orphan });
    return true;
  }

  async listOrphanPayments(): Promise<OrphanPayment[]> {
    const now = this.core.now();
    return [...this.core.orphans.values()].filter((orphan) => orphan.noticedAt + RETENTION_MS > now).sort((a, b) => a.noticedAt - b.noticedAt).map((orphan) => ({ ...orphan }));
  }
}
