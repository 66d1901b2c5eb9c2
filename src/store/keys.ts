// Every Redis key the store uses, derived in one place (README.md beside this file explains the
// layout). All keys of one handle share the hash tag `{h:<handleHash>}`, so every per-handle script
// touches one Cluster slot. Global keys (indexes, buckets, lease, dev links) carry their own tags.
import { createHash } from 'node:crypto';
import { GatewayError } from '../errors.js';
import { keySlot, slotTags } from './slots.js';

/** The keys of one handle, computed once per store call. */
export interface HandleKeys {
  /** Hash: principal, fingerprint, expiry, token bucket, and per SKU balance/funded/charge pointers. */
  handle: string;
  /** Hash: reservationId → "deadline cost sku". */
  reservations: string;
  /** Hash: nonce → charge record (JSON). */
  charges: string;
  /** Stream: the handle's ledger, entry id "<at>-<seq>" (SPEC §17); outlives the handle by ledger.retention. */
  ledger: string;
}

export class KeySpace {
  /** Zset of open reservations ("handleHash:reservationId", score = deadline) for the stale sweep (standalone/Sentinel; Cluster shards it per slot). */
  readonly reservationIndex: string;
  /** Zset of pending charges ("handleHash:nonce", score = nextPollAt) for the reconciler. */
  readonly dueCharges: string;
  /** Zset of every retained charge (score = when its record expires) for `charges list`. */
  readonly allCharges: string;
  /** Zset of opening and pending charges (score = when its record expires), for the pending gauge. */
  readonly liveCharges: string;
  /** Zset of handles that held credits (member = handleHash, score = expiresAt) for the expiry step (standalone/Sentinel; Cluster shards it per slot). */
  readonly handleExpiry: string;

  constructor(private readonly prefix: string) {
    // A brace in the prefix would become every key's hash tag and put all keys in one slot.
    if (/[{}]/.test(prefix)) {
      throw new GatewayError('TB_ERR_CONFIG_INVALID', `store.redis.keyPrefix "${prefix}" must not contain "{" or "}": the store uses hash tags after the prefix`);
    }
    this.reservationIndex = `${prefix}{reservations}`;
    this.dueCharges = `${prefix}{charges:due}`;
    this.allCharges = `${prefix}{charges:all}`;
    this.liveCharges = `${prefix}{charges:live}`;
    this.handleExpiry = `${prefix}{handle-expiry}`;
  }

  /**
   * The reservation index a handle's reservations go in. Standalone/Sentinel: the one global zset.
   * Cluster: the shard of the handle's slot (`{rs:…}`, a tag that lands in the same slot), so the
   * reserve script writes the reservation and its index entry together (SPEC §6.5).
   */
  reservationIndexOf(handleHash: string, clustered: boolean): string {
    return clustered ? this.reservationShard(keySlot(`h:${handleHash}`)) : this.reservationIndex;
  }

  /** Cluster: the reservation index shard of one slot (the stale sweep walks all of them). */
  reservationShard(slot: number): string {
    return `${this.prefix}{${slotTags()[slot] as string}}`;
  }

  /** Cluster: zset of slots whose reservation shard may be non-empty (score = when listed): where the sweep looks first. */
  get shardDirectory(): string {
    return `${this.prefix}{reservation-shards}`;
  }

  /**
   * String: the reply of one money operation on a handle, for a re-run of the same attempt (SPEC §21;
   * lua/operations.ts). `kind` names the operation, `id` is its operation id (reservation id, nonce).
   */
  operation(handleHash: string, kind: string, id: string): string {
    return `${this.prefix}{h:${handleHash}}:op:${kind}:${id}`;
  }

  /** Hash: orphan payments (SPEC §21), field = provider ref, value = the record (JSON). Global: the operator lists them. */
  get orphanPayments(): string {
    return `${this.prefix}{orphans}`;
  }

  /** String: the reply of one operation on an x402 claim, under the payer's tag like the claim. */
  paymentOperation(key: { network: string; asset: string; payer: string; nonce: string }, kind: string): string {
    return `${this.paymentNonce(key)}:op:${kind}`;
  }

  handle(handleHash: string): HandleKeys {
    const handle = `${this.prefix}{h:${handleHash}}`;
    return { handle, reservations: `${handle}:res`, charges: `${handle}:charges`, ledger: `${handle}:ledger` };
  }

  // ── ledger (SPEC §17) ──

  /**
   * The handle-expiry index a handle goes in: the one global zset, or in Cluster the expiry shard of
   * the handle's slot (the reservation shard's tag + ":exp"), so the scripts that slide or fund a
   * handle write its index entry themselves.
   */
  handleExpiryOf(handleHash: string, clustered: boolean): string {
    return clustered ? this.handleExpiryShard(keySlot(`h:${handleHash}`)) : this.handleExpiry;
  }

  /** Cluster: the handle-expiry shard of one slot. */
  handleExpiryShard(slot: number): string {
    return `${this.reservationShard(slot)}:exp`;
  }

  /** SCAN pattern matching exactly the handle ledgers. */
  get ledgerPattern(): string {
    return `${escapeGlob(this.prefix)}{h:*}:ledger`;
  }

  /** SCAN pattern matching exactly the x402 payer ledgers. */
  get paymentLedgerPattern(): string {
    return `${escapeGlob(this.prefix)}{x402:*}:ledger`;
  }

  /** Stream: the x402 ledger of one payer address, under the payer's tag (SPEC §19). */
  paymentLedger(payer: string): string {
    return `${this.prefix}{x402:${payer.toLowerCase()}}:ledger`;
  }

  /** SCAN pattern matching exactly the handle hashes (not their :res/:charges companions). */
  get handlePattern(): string {
    return `${escapeGlob(this.prefix)}{h:*}`;
  }

  /** String: "handleHash:nonce" of the charge a provider reference belongs to. */
  providerRef(providerRef: string): string {
    return `${this.prefix}{ref:${providerRef}}`;
  }

  challengeBucket(clientKey: string): string {
    return `${this.prefix}{cb:${clientKey}}`;
  }

  lease(name: string): string {
    return `${this.prefix}{lease:${name}}`;
  }

  devLink(id: string): string {
    return `${this.prefix}{dev:${id}}`;
  }

  /** Hash: JSON-RPC id → priced-request record, for one upstream session (its hash). SPEC §6.5. */
  pricedRequests(sessionHash: string): string {
    return `${this.prefix}{pr:${sessionHash}}`;
  }

  /** String: a task holding a reservation (JSON TaskRecord), by a hash of its endpoint and the upstream's task id (any text). */
  task(scopedTaskHash: string): string {
    return `${this.prefix}{task:${scopedTaskHash}}`;
  }

  /** String: a claimed provider event. The id is hashed: it is any printable text (braces included) up to 200 characters. */
  event(source: string, eventId: string): string {
    return `${this.prefix}{ev:${createHash('sha256').update(`${source}\n${eventId}`).digest('hex')}}`;
  }

  /** String: the principal an upstream session (its hash) is bound to. SPEC §20. */
  sessionOwner(sessionHash: string): string {
    return `${this.prefix}{so:${sessionHash}}`;
  }

  // ── budgets and allowances (SPEC §23): keys of one subject share the tag {q:<subject>} ──

  /** Hash: one counter of one subject (`n` calls, `c` credits used in the window); `field` is quota-policy.ts's counterField. */
  quotaCounter(subject: string, field: string): string {
    return `${this.prefix}{q:${subject}}:c:${field}`;
  }

  /** Hash: the part of one hold on one subject (`d` deadline, counter field → "calls credits" drawn). */
  quotaHold(subject: string, holdId: string): string {
    return `${this.prefix}{q:${subject}}:hold:${holdId}`;
  }

  /** String: the reply of one quota operation on one subject (lua/operations.ts), for a re-run of the same attempt. */
  quotaOperation(subject: string, kind: string, holdId: string): string {
    return `${this.prefix}{q:${subject}}:op:${kind}:${holdId}`;
  }

  /**
   * Zset of hold parts (member quotaHoldMember, score = deadline) for the stale sweep. Standalone and
   * Sentinel: one global zset. Cluster: the shard of the subject's slot, beside that slot's
   * reservation shard, so the reserve script writes the hold and its index entry together.
   */
  quotaHoldIndexOf(subject: string, clustered: boolean): string {
    return clustered ? this.quotaHoldShard(keySlot(`{q:${subject}}`)) : `${this.prefix}{quota-holds}`;
  }

  /** Cluster: the stale-hold index shard of one slot. */
  quotaHoldShard(slot: number): string {
    return `${this.reservationShard(slot)}:qh`;
  }

  // ── x402 (SPEC §19): keys of one payer share the tag {x402:<payer address>} ──

  /** String: the claim record (JSON) of one EIP-3009 authorization nonce. */
  paymentNonce(key: { network: string; asset: string; payer: string; nonce: string }): string {
    return `${this.prefix}{x402:${key.payer.toLowerCase()}}:nonce:${key.network.toLowerCase()}:${key.asset.toLowerCase()}:${key.nonce.toLowerCase()}`;
  }

  /** String: this authorization's x402_settle entry is written (the outbox's idempotency marker), under the payer's tag. */
  paymentSettled(key: { network: string; asset: string; payer: string; nonce: string }): string {
    return `${this.prefix}{x402:${key.payer.toLowerCase()}}:settled:${key.network.toLowerCase()}:${key.asset.toLowerCase()}:${key.nonce.toLowerCase()}`;
  }
}

/** The tag value of a key: "{h:abc}:ledger" → "abc" for tag "h" (the prefix holds no brace). */
export function tagValue(key: string, tag: string): string | null {
  const open = key.indexOf(`{${tag}:`);
  const close = key.indexOf('}', open);
  return open === -1 || close === -1 ? null : key.slice(open + tag.length + 2, close);
}

const escapeGlob = (text: string): string => text.replace(/[*?[\]\\]/g, '\\$&');

/** Stale-hold index members: "<holdId>\n<subject>" (hold ids are base64url; split at the first newline, so a subject may hold any character). */
export const quotaHoldMember = (holdId: string, subject: string): string => `${holdId}\n${subject}`;

export function parseQuotaHoldMember(member: string): { holdId: string; subject: string } | null {
  const at = member.indexOf('\n');
  return at <= 0 ? null : { holdId: member.slice(0, at), subject: member.slice(at + 1) };
}

/** Index members name a record inside a handle's slot: "handleHash:id" (hashes are hex, ids base64url). */
export const indexMember = (handleHash: string, id: string): string => `${handleHash}:${id}`;

export function parseIndexMember(member: string): { handleHash: string; id: string } | null {
  const at = member.lastIndexOf(':');
  return at <= 0 ? null : { handleHash: member.slice(0, at), id: member.slice(at + 1) };
}
