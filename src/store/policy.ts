// The store's rules, once (SPEC §8): how long records live, which requests a store refuses, what a
// new record holds, and the token bucket. store.ts is the interface; memory.ts applies these rules
// directly, redis.ts builds its records and checks its arguments with them, and its Lua scripts
// (lua/prelude.ts, lua/ledger.ts) take their numbers from here; lua/prelude.ts's take_token and
// charge_end are this file's takeToken and chargeRecordEnd in Lua.
import { GatewayError } from '../errors.js';
import type { ChargeRecord, DevLink, OpenChargeRequest, PaymentNonceClaim, PaymentNonceRecord } from './store.js';

// ── how long things live ─────────────────────────────────────────────────────────────────────────

/** The shortest handle TTL a store accepts (handles.ttl in the config). */
export const HANDLE_TTL_FLOOR_MS = 3_600_000;
/**
 * Redis keeps a handle's keys this long past its expiry, so the reconciler's expiry step can write
 * its `expire` entries before the keys vanish (and a late payment still finds its fingerprint).
 */
export const HANDLE_GRACE_MS = 7 * 24 * 3_600_000;
/** Default `ledger.retention`: entries outlive their handle by this much. */
export const LEDGER_RETENTION_MS = 400 * 24 * 3_600_000;
/** An 'opening' charge younger than this belongs to whoever is calling the provider: share it. */
export const OPENING_GRACE_MS = 15_000;
/** A pending link this close to its end is not shown again: the payer might not finish in time. */
export const PENDING_REUSE_MARGIN_MS = 60_000;
/** How long a charge (and a dev link) stays readable after its link expired, for operators and late payments. */
export const RETENTION_MS = 7 * 24 * 3_600_000;
/** A claim lives at least this long, whatever expiresAt says (an authorization already past its window). */
export const PAYMENT_NONCE_MIN_TTL_MS = 60_000;
/** How long a money operation's reply is kept for a re-run of the same attempt (a retry after a lost reply, SPEC §21). */
export const OP_RECORD_TTL_MS = 60_000;

/**
 * When a charge record ends (and reads as gone): an opening one (its opener never got a link) when
 * its link would have expired; any other RETENTION_MS after its link expired, or after it was
 * marked expired if that is later. Mirrored by charge_end in lua/prelude.ts.
 */
export function chargeRecordEnd(charge: Pick<ChargeRecord, 'status' | 'expiresAt' | 'expiredAt'>): number {
  if (charge.status === 'opening') return charge.expiresAt;
  return Math.max(charge.expiresAt, charge.expiredAt ?? 0) + RETENTION_MS;
}

/** A dev link is kept as long as its charge: the reconciler reads it after expiry. */
export const devLinkEnd = (link: Pick<DevLink, 'expiresAt'>): number => link.expiresAt + RETENTION_MS;

// ── what a store refuses ─────────────────────────────────────────────────────────────────────────

export function checkHandleTtl(ttlMs: number): void {
  if (!(ttlMs >= HANDLE_TTL_FLOOR_MS)) {
    throw new GatewayError('TB_ERR_STORE_TTL_FLOOR', `handle TTL ${ttlMs} ms is under the 1 h floor: raise handles.ttl in the config`);
  }
}

export function checkGrant(credits: number): void {
  if (!Number.isSafeInteger(credits) || credits <= 0) {
    throw new GatewayError('TB_ERR_INVALID_PARAMS', `credits to grant must be a positive integer, got ${credits}`);
  }
}

// ── new records ──────────────────────────────────────────────────────────────────────────────────

/** The charge beginCharge writes: 'opening', no link yet, its first poll due after firstPollDelayMs. */
export function newChargeRecord(request: OpenChargeRequest): ChargeRecord {
  const { now } = request;
  return {
    nonce: request.nonce,
    handleHash: request.handleHash,
    sku: request.sku,
    ...request.snapshot,
    status: 'opening',
    providerRef: null,
    checkoutUrl: null,
    openedAt: now,
    expiresAt: now + request.ttlMs,
    lastPolledAt: 0,
    nextPollAt: now + request.firstPollDelayMs,
    pollCount: 0,
    grantedCredits: 0,
    receivedAmount: null,
  };
}

/** beginCharge shares a charge still being opened, or a pending one with time left to pay (lua BEGIN_CHARGE alike). */
export function chargeShareable(charge: Pick<ChargeRecord, 'status' | 'openedAt' | 'expiresAt'>, now: number): boolean {
  if (charge.status === 'opening') return charge.openedAt > now - OPENING_GRACE_MS;
  return charge.status === 'pending' && charge.expiresAt > now + PENDING_REUSE_MARGIN_MS;
}

/** A claimed authorization: its key in lower case, kept at least PAYMENT_NONCE_MIN_TTL_MS. */
export function newPaymentNonceRecord(claim: PaymentNonceClaim, now: number): PaymentNonceRecord {
  return {
    network: claim.network.toLowerCase(),
    asset: claim.asset.toLowerCase(),
    payer: claim.payer.toLowerCase(),
    nonce: claim.nonce.toLowerCase(),
    expiresAt: Math.max(claim.expiresAt, now + PAYMENT_NONCE_MIN_TTL_MS),
    claimedAt: claim.claimedAt,
    sku: claim.sku,
    tool: claim.tool,
    amount: claim.amount,
    state: 'claimed',
    transaction: null,
    finishedAt: null,
  };
}

// ── the token bucket (per handle, per challenging client) ────────────────────────────────────────

export interface BucketParams {
  ratePerSecond: number;
  burst: number;
}

export interface TokenBucket {
  tokens: number;
  at: number; // when `tokens` was computed
  fullAt: number; // from then on the bucket is indistinguishable from a new one
}

/** retryAfterMs reported by a bucket that never refills (ratePerSecond ≤ 0). */
export const NEVER_REFILLS_RETRY_MS = 3_600_000;

export const newBucket = (burst: number, now: number): TokenBucket => ({ tokens: burst, at: now, fullAt: now });

/** Continuous refill, then takes one token if a whole one is there. Returns 0 if taken, else the wait in ms. */
export function takeToken(bucket: TokenBucket, { ratePerSecond, burst }: BucketParams, now: number): number {
  const refilled = bucket.tokens + (Math.max(0, now - bucket.at) * ratePerSecond) / 1000;
  const tokens = Math.min(burst, refilled);
  const taken = tokens >= 1;
  bucket.tokens = taken ? tokens - 1 : tokens;
  bucket.at = now;
  bucket.fullAt = ratePerSecond > 0 ? now + Math.ceil(((burst - bucket.tokens) * 1000) / ratePerSecond) : Number.POSITIVE_INFINITY;
  if (taken) return 0;
  if (ratePerSecond <= 0) return NEVER_REFILLS_RETRY_MS;
  return Math.max(1, Math.ceil(((1 - tokens) * 1000) / ratePerSecond));
}
