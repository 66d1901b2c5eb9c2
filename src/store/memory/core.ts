// The memory store's shared state (SPEC §8): every map the concerns read and write, the injected
// clock, the lazy sweep, the record of money operations' replies, and the helpers more than one
// concern uses (a live handle, the ledger append, the charge pointers). The concerns (handles.ts,
// charges.ts, …) hold one MemoryCore between them; ../memory.ts is the Store they make together.
// Every method body runs to completion without an `await`, so each call is one atomic step with
// respect to every other call in this process: the same promise the Redis store gets from one Lua
// script per method.
import { entryHash, GENESIS_HASH } from '../ledger-chain.js';
import { chargeRecordEnd, devLinkEnd, HANDLE_GRACE_MS, LEDGER_RETENTION_MS, OP_RECORD_TTL_MS, type TokenBucket } from '../policy.js';
import type { Attempt, ChargeRecord, DevLink, LedgerEntry, OrphanPayment, PricedRequestRecord, TaskRecord } from '../store.js';

export const SWEEP_INTERVAL_MS = 60_000;

export interface Reservation {
  sku: string;
  cost: number;
  deadline: number;
}

export interface HandleRecord {
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

export interface MemoryLedger {
  fingerprint: string;
  entries: LedgerEntry[]; // seq = index + 1
  endsAt: number; // when the whole ledger may go
}

/** What a handle owns in one SKU: its available balance plus what its reservations hold. */
export function ownedOf(handle: HandleRecord, sku: string): number {
  let owned = handle.balances.get(sku) ?? 0;
  for (const reservation of handle.reservations.values()) if (reservation.sku === sku) owned += reservation.cost;
  return owned;
}

/**
 * `entry` is the caller's fresh object: it is numbered and chained (ledger-chain.ts) in place and kept
 * (one object per spend, not three).
 */
export function pushEntry(ledger: MemoryLedger, entry: LedgerEntry, endsAt: number): void {
  const last = ledger.entries.at(-1);
  entry.seq = (last?.seq ?? 0) + 1;
  entry.at = Math.max(entry.at, last?.at ?? 0);
  entry.prev = last ? entryHash(last) : GENESIS_HASH;
  ledger.entries.push(entry);
  ledger.endsAt = Math.max(ledger.endsAt, endsAt);
}

/** Charges and reservations are addressed by (handle, id), as the Redis keys are. */
export const scopedKey = (handleHash: string, id: string): string => `${handleHash}\n${id}`;

export class MemoryCore {
  readonly clock: () => number;
  readonly ledgerRetentionMs: number;
  readonly handles = new Map<string, HandleRecord>();
  readonly byFingerprint = new Map<string, Set<string>>();
  /** Every live reservation, for the reconciler's stale sweep (the deadline lives on the handle's record). */
  readonly reservationIndex = new Map<string, { handleHash: string; reservationId: string }>();
  readonly charges = new Map<string, ChargeRecord>();
  readonly chargeByRef = new Map<string, string>();
  /** The reconciler's due index: keys of charges in status 'pending' or 'abandoned' (§7.6 late payments). */
  readonly polledCharges = new Set<string>();
  readonly challengeBuckets = new Map<string, TokenBucket>();
  readonly leases = new Map<string, { owner: string; expiresAt: number }>();
  /** Claimed provider events: "source\nid" → when it is forgotten. */
  readonly events = new Map<string, number>();
  readonly devLinks = new Map<string, DevLink>();
  /** Priced-request registry: session hash → its forwarded priced requests (one lifetime per session). */
  readonly pricedRequests = new Map<string, { expiresAt: number; requests: Map<string, PricedRequestRecord> }>();
  readonly tasks = new Map<string, { record: TaskRecord; expiresAt: number }>();
  readonly orphans = new Map<string, OrphanPayment>();
  /** Replies of money operations by operation, for a re-run of the same attempt (SPEC §21; Store's `Attempt`). */
  readonly operations = new Map<string, { attempt: Attempt; reply: unknown; until: number }>();
  /** Session hash → the principal it is bound to (SPEC §20). */
  readonly sessionOwners = new Map<string, { principal: string; expiresAt: number }>();
  /** Ledgers (SPEC §17): by handle hash, and x402 ledgers by payer. */
  readonly ledgers = new Map<string, MemoryLedger>();
  readonly paymentLedgers = new Map<string, MemoryLedger>();
  /** Ended handles' fingerprints, kept HANDLE_GRACE_MS for the grant entry of a late payment. */
  readonly retired = new Map<string, { fingerprint: string; until: number }>();
  private nextSweepAt: number;

  constructor(options: { now?: () => number; ledgerRetentionMs?: number } = {}) {
    this.clock = options.now ?? Date.now;
    this.nextSweepAt = this.clock() + SWEEP_INTERVAL_MS;
    this.ledgerRetentionMs = options.ledgerRetentionMs ?? LEDGER_RETENTION_MS;
  }

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
    for (const sweep of this.sweepers) sweep(now);
  }

  /** Concerns that keep their own maps (idempotent results) join the lazy sweep here. */
  readonly sweepers: ((now: number) => void)[] = [];

  /**
   * Runs one money operation, or answers a re-run of the same attempt with the first run's reply. The
   * memory store never loses a reply; this keeps its answers the same as the Redis store's.
   */
  async once<T>(operation: string, attempt: Attempt | undefined, run: () => Promise<T>): Promise<T> {
    if (attempt === undefined) return run();
    const now = this.clock();
    const recorded = this.operations.get(operation);
    if (recorded && recorded.attempt === attempt && recorded.until > now) return structuredClone(recorded.reply) as T;
    const reply = await run();
    this.operations.set(operation, { attempt, reply: structuredClone(reply), until: now + OP_RECORD_TTL_MS });
    return reply;
  }

  now(): number {
    const now = this.clock();
    this.sweepIfDue(now);
    return now;
  }

  sweepIfDue(now: number): void {
    if (now >= this.nextSweepAt) this.sweep(now);
  }

  liveHandle(handleHash: string, now: number): HandleRecord | null {
    const handle = this.handles.get(handleHash);
    if (!handle) return null;
    if (handle.expiresAt > now) return handle;
    this.endHandle(handleHash, handle, now);
    return null;
  }

  deleteHandle(handleHash: string, handle: HandleRecord): void {
    this.handles.delete(handleHash);
    for (const reservationId of handle.reservations.keys()) this.reservationIndex.delete(scopedKey(handleHash, reservationId));
    const hashes = this.byFingerprint.get(handle.fingerprint);
    hashes?.delete(handleHash);
    if (hashes?.size === 0) this.byFingerprint.delete(handle.fingerprint);
  }

  releaseReservation(handleHash: string, reservationId: string, now: number): number | null {
    const handle = this.liveHandle(handleHash, now);
    const reservation = this.takeReservation(handleHash, handle, reservationId);
    if (!handle || !reservation) return null;
    const balance = (handle.balances.get(reservation.sku) ?? 0) + reservation.cost;
    handle.balances.set(reservation.sku, balance);
    return balance;
  }

  takeReservation(handleHash: string, handle: HandleRecord | null, reservationId: string): Reservation | null {
    const reservation = handle?.reservations.get(reservationId);
    if (!handle || !reservation) return null;
    handle.reservations.delete(reservationId);
    this.reservationIndex.delete(scopedKey(handleHash, reservationId));
    return reservation;
  }

  chargeOf(handleHash: string, nonce: string | undefined): ChargeRecord | null {
    return nonce === undefined ? null : (this.charges.get(scopedKey(handleHash, nonce)) ?? null);
  }

  /** The charge challenges for this SKU show, if it is still opening or pending. */
  pendingChargeOf(handleHash: string, handle: HandleRecord, sku: string): ChargeRecord | null {
    const charge = this.chargeOf(handleHash, handle.pendingCharge.get(sku));
    return charge && (charge.status === 'opening' || charge.status === 'pending') ? charge : null;
  }

  chargeLeftPending(handle: HandleRecord, charge: ChargeRecord): void {
    if (handle.pendingCharge.get(charge.sku) === charge.nonce) handle.pendingCharge.delete(charge.sku);
    handle.lastCharge.set(charge.sku, charge.nonce);
  }

  deleteCharge(key: string, charge: ChargeRecord): void {
    this.charges.delete(key);
    this.polledCharges.delete(key);
    if (charge.providerRef !== null && this.chargeByRef.get(charge.providerRef) === key) this.chargeByRef.delete(charge.providerRef);
    const handle = this.handles.get(charge.handleHash);
    if (handle?.pendingCharge.get(charge.sku) === charge.nonce) handle.pendingCharge.delete(charge.sku);
    if (handle?.lastCharge.get(charge.sku) === charge.nonce) handle.lastCharge.delete(charge.sku);
  }

  copyCharge(charge: ChargeRecord | null): ChargeRecord | null {
    return charge ? { ...charge } : null;
  }

  /**
   * A handle whose life is over, in one step: an `expire` entry per SKU for what it held (balance
   * and reservations, dated at its expiry), then it and its reservations go.
   */
  endHandle(handleHash: string, handle: HandleRecord, now: number): void {
    const held = new Map(handle.balances);
    for (const { sku, cost } of handle.reservations.values()) held.set(sku, (held.get(sku) ?? 0) + cost);
    for (const [sku, credits] of held) {
      if (credits !== 0) this.appendEntry(handleHash, handle.fingerprint, handle.expiresAt, now, { kind: 'expire', sku, credits: -credits, balanceAfter: 0, ref: null });
    }
    this.deleteHandle(handleHash, handle);
    this.retired.set(handleHash, { fingerprint: handle.fingerprint, until: handle.expiresAt + HANDLE_GRACE_MS });
  }

  /** Appends one entry: seq = last + 1, at = max(at, last at); the ledger lives ledgerRetentionMs past max(handleExpiresAt, at). */
  appendEntry(handleHash: string, fingerprint: string, at: number, handleExpiresAt: number, entry: Omit<LedgerEntry, 'seq' | 'at' | 'fingerprint'>): void {
    let ledger = this.ledgers.get(handleHash);
    if (!ledger) this.ledgers.set(handleHash, (ledger = { fingerprint, entries: [], endsAt: 0 }));
    if (fingerprint !== '') ledger.fingerprint = fingerprint;
    const numbered = entry as LedgerEntry; // the caller's fresh literal, completed in place
    numbered.seq = 0;
    numbered.at = at;
    numbered.fingerprint = ledger.fingerprint;
    pushEntry(ledger, numbered, Math.max(handleExpiresAt, at) + this.ledgerRetentionMs);
  }

  /** A slide moves the handle's end, and with it its ledger's. */
  extendLedger(handleHash: string, handleExpiresAt: number): void {
    const ledger = this.ledgers.get(handleHash);
    if (ledger) ledger.endsAt = Math.max(ledger.endsAt, handleExpiresAt + this.ledgerRetentionMs);
  }
}
