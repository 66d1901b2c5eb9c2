// x402 authorizations in the memory store (SPEC §19): one record per authorization nonce; no await
// between the look-up and the write, so the first claim wins. Expired records are dropped on access
// and by a sweep at most once a minute. Settlements through the durable outbox (store/outbox.ts) are
// idempotent by a marker kept as long as the ledger entry.
import { newPaymentNonceRecord } from '../policy.js';
import type { Attempt, LedgerEntry, PaymentNonceClaim, PaymentNonceKey, PaymentNonceOutcome, PaymentNonceRecord, X402SettlementRecord } from '../store.js';
import { MemoryCore, pushEntry, SWEEP_INTERVAL_MS } from './core.js';

export class MemoryX402 {
  private readonly paymentNonces = new Map<string, PaymentNonceRecord>();
  private nextPaymentNonceSweepAt = 0;
  private readonly settledPayments = new Map<string, number>();

  constructor(private readonly core: MemoryCore) {}

  async claimPaymentNonce(claim: PaymentNonceClaim): Promise<boolean> {
    return this.core.once(`x:${paymentNonceId(claim)}`, claim.attempt, () => this.claimPaymentNonceNow(claim));
  }

  private async claimPaymentNonceNow(claim: PaymentNonceClaim): Promise<boolean> {
    const now = this.core.clock();
    this.sweepPaymentNonces(now);
    const key = paymentNonceId(claim);
    if (this.livePaymentNonce(key, now)) return false;
    this.paymentNonces.set(key, newPaymentNonceRecord(claim, now));
    return true;
  }

  async finishPaymentNonce(key: PaymentNonceKey, outcome: PaymentNonceOutcome, attempt?: Attempt): Promise<boolean> {
    return this.core.once(`f:${paymentNonceId(key)}`, attempt, () => this.finishPaymentNonceNow(key, outcome));
  }

  private async finishPaymentNonceNow(key: PaymentNonceKey, outcome: PaymentNonceOutcome): Promise<boolean> {
    const record = this.livePaymentNonce(paymentNonceId(key), this.core.clock());
    if (!record || record.state !== 'claimed') return false;
    record.state = outcome.state;
    record.transaction = outcome.transaction;
    record.finishedAt = outcome.at;
    if (outcome.state === 'settled') this.appendPaymentEntry(record, outcome);
    return true;
  }

  async recordX402Settlement(record: X402SettlementRecord): Promise<boolean> {
    const id = paymentNonceId(record);
    const now = this.core.clock();
    const markedUntil = this.settledPayments.get(id);
    if (markedUntil !== undefined && markedUntil > now) return false;
    const outcome = { state: 'settled' as const, transaction: record.transaction, at: record.at };
    this.settledPayments.set(id, now + this.core.ledgerRetentionMs);
    const claim = this.livePaymentNonce(id, now);
    if (claim?.state === 'settled') return false;
    if (claim) Object.assign(claim, { state: 'settled', transaction: record.transaction, finishedAt: record.at });
    this.appendPaymentEntry({ ...record, expiresAt: 0, claimedAt: record.at, state: 'settled', finishedAt: record.at }, outcome);
    return true;
  }

  async getPaymentNonce(key: PaymentNonceKey): Promise<PaymentNonceRecord | null> {
    const record = this.livePaymentNonce(paymentNonceId(key), this.core.clock());
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

  private appendPaymentEntry(record: PaymentNonceRecord, outcome: PaymentNonceOutcome): void {
    let ledger = this.core.paymentLedgers.get(record.payer);
    if (!ledger) this.core.paymentLedgers.set(record.payer, (ledger = { fingerprint: '', entries: [], endsAt: 0 }));
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
    pushEntry(ledger, entry, outcome.at + this.core.ledgerRetentionMs);
  }
}

/** Letter case never makes two keys of one authorization (addresses and hex nonces are case-insensitive). */
const copyNonceKey = (key: PaymentNonceKey): PaymentNonceKey => ({ network: key.network.toLowerCase(), asset: key.asset.toLowerCase(), payer: key.payer.toLowerCase(), nonce: key.nonce.toLowerCase() });
const paymentNonceId = (key: PaymentNonceKey): string => Object.values(copyNonceKey(key)).join('\n');
