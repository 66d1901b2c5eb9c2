// The Redis store (SPEC §8): standalone, Sentinel or Cluster through ioredis. Every decision is one
// Lua script (lua/, registered once, EVALSHA) on the keys of one handle (keys.ts). README.md beside
// this file explains the key layout, the indexes and how Cluster mode writes them.
// Failure behaviour is fail-closed and bounded: the client (redis-connection.ts) has no offline queue
// and a 500 ms command timeout, and each call here has a 1 s budget, so with Redis gone every call
// rejects with TB_ERR_STORE_UNAVAILABLE quickly.
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { ReplyError, type Cluster, type Redis } from 'ioredis';
import type { GatewayConfig } from '../config/schema.js';
import { GatewayError } from '../errors.js';
import { withBudget } from '../io/budget.js';
import type { Logger } from '../observability/logger.js';
import { indexMember, KeySpace, parseIndexMember, tagValue } from './keys.js';
import { SCRIPTS, type ScriptName } from './lua/index.js';
import { TASK_RECORD_GRACE_MS, taskHash } from './task-keys.js';
import { keySlot, SLOT_COUNT, slotTags } from './slots.js';
import { parseStreamEntry, parseStreamId, streamBounds, type StreamItem } from './ledger-stream.js';
import { errorMessage, openRedisClient, type RedisClient } from './redis-connection.js';
import {
  LEDGER_RETENTION_MS,
  OPENING_GRACE_MS,
  PENDING_REUSE_MARGIN_MS,
  RETENTION_MS,
  chargeRecordEnd,
  checkGrant,
  checkHandleTtl,
  devLinkEnd,
  newChargeRecord,
  newPaymentNonceRecord,
} from './policy.js';
import type { QuotaCounter, QuotaDecision, QuotaRequest, QuotaUsage } from './store.js';
import { RedisQuotas } from './redis/quotas.js';
import type { Attempt, OrphanPayment, BeginChargeResult, ChargeRecord, ChargeStatus, ClaimResult, DevLink, HandleState, LedgerAccount, LedgerCheckpoint, LedgerEntry, LedgerHolding, LedgerRange,
  NewHandle, OpenChargeRequest, PricedRequestKey, PricedRequestRecord, TaskKey, TaskRecord, PaymentNonceClaim, PaymentNonceKey, PaymentNonceOutcome, PaymentNonceRecord, SettlementClaim, X402SettlementRecord,
  SpendDecision, SpendRequest, Store } from './store.js';

/** Upper bound on one store call, whatever ioredis does underneath (Cluster redirections, retries). */
const CALL_BUDGET_MS = 1_000;
/** An unreplicated charge is abandoned and polled again this soon (a payment on it is still granted). */
const FIRST_POLL_AFTER_UNREPLICATED_MS = 3_000;
/** Operator listings read many records; they get longer. */
const LISTING_BUDGET_MS = 10_000;
/** Cluster stale sweep: slots of the rotating walk read per pass (all 16 384 every 16 passes, ~48 s at 3 s ticks). */
const SHARD_WALK_SLICE = 1_024;
/** Commands per pipeline, so no command in it waits past the 500 ms command timeout on a busy server. */
const PIPELINE_CHUNK = 256;
/** A directory entry younger than this is kept even if its shard read empty (a reserve may have just listed it). */
const SHARD_LISTING_GRACE_MS = 60_000;
/** `handle show <fingerprint>` scans every handle key: an operator can wait. */
const ADMIN_SCAN_BUDGET_MS = 60_000;
const SCAN_COUNT = 1_000;
/** Cluster expiry step: handle-expiry shards read per pass (all 16 384 every 16 passes). */
const EXPIRY_WALK_SLICE = 1_024;
/** A money script whose reply was lost is run again (same attempt) this often until the call's budget ends. */
const RERUN_GAP_MS = 50;
/** Server errors after which a script did not run, so running it again is only a retry: a failover or restart under way. */
const NOT_RUN_REPLY = /^(READONLY|LOADING|MASTERDOWN|CLUSTERDOWN|TRYAGAIN|NOREPLICAS)\b/;

/**
 * Writes the gateway must know are on replicas before acting on them (SPEC §21), by what happens when
 * WAIT says they are not: `charge` (its link is not shown: the charge is abandoned), `claim` and
 * `x402_claim` (treated as not done: the caller is refused, the reconciler or payer comes back),
 * `adjust` (the operator is told), `commit`, `expire` and `x402_settle` (acted on: money already
 * moved; counted and logged so an operator sees what a failover may have erased).
 */
export type ReplicatedWrite = 'charge' | 'claim' | 'commit' | 'adjust' | 'expire' | 'x402_claim' | 'x402_settle';

/** `store.redis.durability` and its WAIT arguments. */
export interface Durability {
  replicas: number;
  timeoutMs: number;
}

type Reply = string | number | null | Reply[];
type Arg = string | number;

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

const newAttempt = (): Attempt => randomBytes(9).toString('base64url');

export class RedisStore implements Store {
  readonly kind = 'redis' as const;
  /** Cluster stale sweep: the first slot of the next slice of its rotating walk. */
  private walkCursor = 0;
  /** Cluster: when this process last listed each slot's reservation shard in the directory. */
  private readonly shardListedAt = new Map<number, number>();
  /** Cluster expiry step: the first slot of the next slice of its rotating walk over the handle-expiry shards. */
  private expiryWalkCursor = 0;
  /** Writes WAIT did not see on enough replicas, by kind (tollbooth_store_unreplicated_writes_total). */
  private readonly unreplicated = new Map<ReplicatedWrite, number>();
  /** Budget and allowance counters (SPEC §23). */
  private readonly quotas: RedisQuotas;

  private constructor(
    private readonly client: RedisClient,
    private readonly keys: KeySpace,
    /** In Cluster mode global indexes live in other slots: they are written by companion commands. */
    private readonly clustered: boolean,
    private readonly now: () => number,
    private readonly logger: Logger,
    private readonly ledgerRetentionMs: number,
    /** null: durability none (no WAIT). */
    private readonly durability: Durability | null,
  ) {
    for (const [name, lua] of Object.entries(SCRIPTS)) client.defineCommand(name, { lua });
    this.quotas = new RedisQuotas({ client, keys, clustered, now, once: (...a) => this.once(...a), run: (...a) => this.run(...a), call: (op, work, budgetMs) => this.call(op, work, budgetMs) });
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
    return new RedisStore(client, keys, redis.cluster !== undefined, deps.now ?? Date.now, deps.logger, deps.ledgerRetentionMs ?? LEDGER_RETENTION_MS, durability);
  }

  // ── handles and reservations ─────────────────────────────────────────────────────────────────────

  async createHandle(handle: NewHandle): Promise<void> {
    checkHandleTtl(handle.ttlMs);
    const k = this.keys.handle(handle.handleHash);
    const args = [handle.fingerprint, ...principalArgs(handle.principal), handle.ttlMs, this.now(), handle.handleHash];
    const expiry = this.keys.handleExpiryOf(handle.handleHash, this.clustered);
    await this.call('createHandle', () => this.run('tbCreateHandle', [k.handle, k.reservations, k.ledger, expiry], args));
  }

  async getHandle(handleHash: string): Promise<HandleState | null> {
    const fields = await this.call('getHandle', () => this.client.hgetall(this.keys.handle(handleHash).handle));
    const expiresAt = Number(fields.x);
    if (!(expiresAt > this.now())) return null;
    const state: HandleState = { principal: fields.p ?? null, balances: {}, funded: {}, expiresAt, ...(fields.fp ? { fingerprint: fields.fp } : {}) };
    for (const [field, value] of Object.entries(fields)) {
      if (field.startsWith('b:')) state.balances[field.slice(2)] = Number(value);
      else if (field.startsWith('f:')) state.funded[field.slice(2)] = true;
    }
    return state;
  }

  /**
   * An operator verb, so a scan is fine: every handle key on every master is read (SCAN, then its
   * expiry and fingerprint, pipelined). No index by fingerprint exists outside a handle's tag (§8).
   */
  async findHandlesByFingerprint(fingerprint: string): Promise<string[]> {
    const now = this.now();
    return this.call(
      'findHandlesByFingerprint',
      async () => {
        const nodes = this.clustered ? (this.client as Cluster).nodes('master') : [this.client as Redis];
        const found = await Promise.all(nodes.map((node) => scanHandles(node, this.keys.handlePattern, fingerprint, now)));
        // The prefix holds no brace, so the first "{h:" starts the tag.
        return found.flat().map((key) => key.slice(key.indexOf('{h:') + 3, -1));
      },
      ADMIN_SCAN_BUDGET_MS,
    );
  }

  async reserve(request: SpendRequest): Promise<SpendDecision> {
    const k = this.keys.handle(request.handleHash);
    const member = indexMember(request.handleHash, request.reservationId);
    const now = this.now();
    const ratePerSecond = request.bucket?.ratePerSecond ?? '';
    const burst = request.bucket?.burst ?? '';
    const args = [...principalArgs(request.principal), request.sku, request.cost, request.reservationId, request.reservationDeadline, request.ttlMs, ratePerSecond, burst, member, now, this.ledgerRetentionMs, request.handleHash];
    // One script, one round trip, in every mode: the reservation and its index entry are written together.
    const index = this.keys.reservationIndexOf(request.handleHash, this.clustered);
    const expiry = this.keys.handleExpiryOf(request.handleHash, this.clustered);
    const opKey = this.keys.operation(request.handleHash, 'r', request.reservationId);
    const reply = await this.call('reserve', () => this.once('tbReserve', opKey, request.attempt, [k.handle, k.reservations, k.charges, index, k.ledger, expiry], args));
    const [kind, a, b, c, d] = asArray(reply);
    switch (kind) {
      case 'unknown_handle':
      case 'bound_to_other_principal':
        return { kind };
      case 'rate_limited':
        return { kind, retryAfterMs: Number(a) };
      case 'insufficient':
        return { kind, balance: Number(a), funded: Number(b) === 1, pending: parseCharge(c), lastCharge: parseCharge(d) };
      case 'reserved':
        // Cluster: the first reservation in a shard lists the shard in the directory the sweep reads
        // first. Off the call path; if it is lost, the sweep's rotating walk of every slot finds the shard.
        if (this.clustered && Number(b) === 1) this.listShard(request.handleHash, now);
        return { kind, remaining: Number(a) };
      default:
        throw new GatewayError('TB_ERR_INTERNAL', `unexpected reserve reply from Redis: ${String(kind)}`);
    }
  }

  async commit(handleHash: string, reservationId: string, tool = '', attempt?: Attempt): Promise<number | null> {
    const k = this.keys.handle(handleHash);
    const member = indexMember(handleHash, reservationId);
    const index = this.keys.reservationIndexOf(handleHash, this.clustered);
    const opKey = this.keys.operation(handleHash, 'c', reservationId);
    return this.call('commit', async () => {
      const balance = await this.once('tbCommit', opKey, attempt, [k.handle, k.reservations, index, k.ledger], [reservationId, member, this.now(), tool, this.ledgerRetentionMs]);
      if (balance === null) return null;
      // The result is delivered whatever WAIT says (the payer paid): an operator sees which spend a failover may have erased.
      if (!(await this.replicated(k.handle))) await this.reportUnreplicated('commit', handleHash);
      return Number(balance);
    });
  }

  async release(handleHash: string, reservationId: string, attempt?: Attempt): Promise<number | null> {
    const k = this.keys.handle(handleHash);
    const member = indexMember(handleHash, reservationId);
    const index = this.keys.reservationIndexOf(handleHash, this.clustered);
    const opKey = this.keys.operation(handleHash, 'l', reservationId);
    const balance = await this.call('release', () => this.once('tbRelease', opKey, attempt, [k.handle, k.reservations, index], [reservationId, member, this.now()]));
    return balance === null ? null : Number(balance);
  }

  async releaseStaleReservations(now: number, limit: number): Promise<number> {
    if (limit <= 0) return 0;
    const clock = this.now();
    return this.call(
      'releaseStaleReservations',
      async () => {
        const members = this.clustered ? await this.staleInShards(now, limit, clock) : await this.client.zrangebyscore(this.keys.reservationIndex, '-inf', `(${now}`, 'LIMIT', 0, limit);
        const counts = await Promise.all(
          [...groupMembers(members)].map(async ([handleHash, ids]) => {
            const k = this.keys.handle(handleHash);
            // The script drops each member it looked at: its reservation is now released or was already gone.
            const keys = [k.handle, k.reservations, this.keys.reservationIndexOf(handleHash, this.clustered)];
            return Number(await this.run('tbReleaseStale', keys, [now, clock, handleHash, ...ids]));
          }),
        );
        return counts.reduce((sum, count) => sum + count, 0);
      },
      LISTING_BUDGET_MS,
    );
  }

  async grantCredits(handleHash: string, sku: string, credits: number, reason = '', attempt: Attempt = newAttempt()): Promise<number> {
    checkGrant(credits);
    const k = this.keys.handle(handleHash);
    const expiry = this.keys.handleExpiryOf(handleHash, this.clustered);
    const args = [sku, credits, this.now(), reason, this.ledgerRetentionMs, handleHash];
    // An operator grant has no id of its own: the attempt is its operation id.
    const opKey = this.keys.operation(handleHash, 'g', attempt);
    return this.call('grantCredits', async () => {
      const balance = await this.once('tbGrantCredits', opKey, attempt, [k.handle, k.reservations, k.ledger, expiry], args);
      if (balance === null) throw new GatewayError('TB_ERR_NOT_FOUND', 'no live handle with that hash: it never existed or has expired');
      if (!(await this.replicated(k.handle))) {
        this.countUnreplicated('adjust');
        throw new GatewayError(
          'TB_ERR_STORE_UNAVAILABLE',
          `the grant was written on the Redis primary but not acknowledged by ${this.durabilityText()}: a failover may erase it. Check the balance with \`tollbooth handle show\` before granting again`,
        );
      }
      return Number(balance);
    });
  }

  // ── charges ──────────────────────────────────────────────────────────────────────────────────────

  async beginCharge(request: OpenChargeRequest): Promise<BeginChargeResult> {
    const { handleHash, sku, nonce, now } = request;
    const charge = newChargeRecord(request);
    const k = this.keys.handle(handleHash);
    const member = indexMember(handleHash, nonce);
    const clock = this.now();
    const { allCharges, liveCharges } = this.keys;
    return this.call('beginCharge', async () => {
      const keys = this.clustered ? [k.handle, k.charges] : [k.handle, k.charges, allCharges, liveCharges];
      const opKey = this.keys.operation(handleHash, 'b', nonce);
      const [kind, existing] = asArray(await this.once('tbBeginCharge', opKey, request.attempt, keys, [sku, nonce, JSON.stringify(charge), now, member, clock, OPENING_GRACE_MS, PENDING_REUSE_MARGIN_MS]));
      if (kind === 'existing') return { kind: 'existing', charge: parseCharge(existing) as ChargeRecord };
      if (this.clustered) {
        const ends = chargeRecordEnd(charge);
        await Promise.all([this.indexAdd(allCharges, ends, member, ends, clock, 'end'), this.indexAdd(liveCharges, ends, member, ends, clock, 'end')]);
      }
      return { kind: 'begun', charge };
    });
  }

  async attachLink(handleHash: string, nonce: string, link: { providerRef: string; checkoutUrl: string }, attempt?: Attempt): Promise<ChargeRecord | null> {
    const k = this.keys.handle(handleHash);
    const member = indexMember(handleHash, nonce);
    const refKey = this.keys.providerRef(link.providerRef);
    const clock = this.now();
    const { dueCharges, liveCharges, allCharges } = this.keys;
    return this.call('attachLink', async () => {
      const keys = this.clustered ? [k.charges] : [k.charges, dueCharges, liveCharges, allCharges, refKey];
      const opKey = this.keys.operation(handleHash, 'a', nonce);
      const charge = parseCharge(await this.once('tbAttachLink', opKey, attempt, keys, [nonce, link.providerRef, link.checkoutUrl, member, clock]));
      if (charge && this.clustered) {
        const ends = chargeRecordEnd(charge);
        await Promise.all([
          this.indexAdd(dueCharges, charge.nextPollAt, member, ends, clock, ''),
          this.indexAdd(liveCharges, ends, member, ends, clock, 'end'),
          this.indexAdd(allCharges, ends, member, ends, clock, 'end'),
          this.client.set(refKey, member, 'PX', Math.max(1_000, ends - clock)),
        ]);
      }
      if (charge && !(await this.replicated(k.handle))) {
        // A failover could erase this record and leave a link that can be paid and never granted:
        // the link is never shown, and the charge leaves the pending state for good (still polled,
        // so a payment on it is granted all the same).
        this.countUnreplicated('charge');
        await this.abandonCharge(handleHash, nonce, clock + FIRST_POLL_AFTER_UNREPLICATED_MS).catch(() => false);
        throw new GatewayError('TB_ERR_STORE_UNAVAILABLE', `the new charge was not acknowledged by ${this.durabilityText()}, so its link is not shown (store.redis.durability: replicated)`);
      }
      return charge;
    });
  }

  async abortCharge(handleHash: string, nonce: string): Promise<void> {
    const k = this.keys.handle(handleHash);
    const member = indexMember(handleHash, nonce);
    const { allCharges, liveCharges } = this.keys;
    await this.call('abortCharge', async () => {
      const keys = this.clustered ? [k.handle, k.charges] : [k.handle, k.charges, allCharges, liveCharges];
      const aborted = Number(await this.run('tbAbortCharge', keys, [nonce, member, this.now()])) === 1;
      if (aborted && this.clustered) await Promise.all([this.client.zrem(allCharges, member), this.client.zrem(liveCharges, member)]);
    });
  }

  async getCharge(handleHash: string, nonce: string): Promise<ChargeRecord | null> {
    const raw = await this.call('getCharge', () => this.client.hget(this.keys.handle(handleHash).charges, nonce));
    return this.liveCharge(parseCharge(raw));
  }

  async findChargeByRef(providerRef: string): Promise<ChargeRecord | null> {
    return this.call('findChargeByRef', async () => {
      const target = parseIndexMember((await this.client.get(this.keys.providerRef(providerRef))) ?? '');
      if (!target) return null;
      const charge = this.liveCharge(parseCharge(await this.client.hget(this.keys.handle(target.handleHash).charges, target.id)));
      return charge?.providerRef === providerRef ? charge : null;
    });
  }

  async takePollSlot(handleHash: string, nonce: string, now: number, minIntervalMs: number, nextPollAt: number): Promise<boolean> {
    const k = this.keys.handle(handleHash);
    const member = indexMember(handleHash, nonce);
    const clock = this.now();
    return this.call('takePollSlot', async () => {
      const keys = this.clustered ? [k.charges] : [k.charges, this.keys.dueCharges];
      const [taken, status, ends] = asArray(await this.run('tbTakePollSlot', keys, [nonce, now, minIntervalMs, nextPollAt, member, clock]));
      // Cluster: (re)index a polled charge; a claim racing this leaves a member dueCharges drops.
      const polled = status === 'pending' || status === 'abandoned';
      if (Number(taken) === 1 && polled && this.clustered) await this.indexAdd(this.keys.dueCharges, nextPollAt, member, Number(ends), clock, '');
      return Number(taken) === 1;
    });
  }

  async markChargeRead(handleHash: string, nonce: string, polledAt: number): Promise<void> {
    await this.call('markChargeRead', () => this.run('tbMarkChargeRead', [this.keys.handle(handleHash).charges], [nonce, polledAt, this.now()]));
  }

  async claimSettlement(claim: SettlementClaim): Promise<ClaimResult> {
    const k = this.keys.handle(claim.handleHash);
    const member = indexMember(claim.handleHash, claim.nonce);
    const { dueCharges, liveCharges } = this.keys;
    return this.call('claimSettlement', async () => {
      const ledgerKeys = [k.handle, k.charges, k.reservations, k.ledger, this.keys.handleExpiryOf(claim.handleHash, this.clustered)];
      const keys = this.clustered ? ledgerKeys : [...ledgerKeys, dueCharges, liveCharges];
      const received = claim.receivedAmount === null ? ['0', ''] : ['1', claim.receivedAmount];
      const args = [claim.nonce, claim.outcome, claim.credits, ...received, member, this.now(), this.ledgerRetentionMs, claim.handleHash];
      const opKey = this.keys.operation(claim.handleHash, 's', claim.nonce);
      const [claimed, raw, balance] = asArray(await this.once('tbClaimSettlement', opKey, claim.attempt, keys, args));
      if (Number(claimed) === 1 && this.clustered) await Promise.all([this.client.zrem(dueCharges, member), this.client.zrem(liveCharges, member)]);
      if (Number(claimed) === 1 && !(await this.replicated(k.handle))) {
        // Treated as not done: nobody is told of the grant. The claim is idempotent by the charge's
        // nonce, so the reconciler's next read grants it once, here or on a promoted replica.
        this.countUnreplicated('claim');
        throw new GatewayError('TB_ERR_STORE_UNAVAILABLE', `the settlement was not acknowledged by ${this.durabilityText()}: it counts as not done until the reconciler reads the charge again`);
      }
      return { claimed: Number(claimed) === 1, charge: parseCharge(raw), balance: Number(balance) };
    });
  }

  async abandonCharge(handleHash: string, nonce: string, nextPollAt: number): Promise<boolean> {
    const k = this.keys.handle(handleHash);
    const member = indexMember(handleHash, nonce);
    const { dueCharges, liveCharges } = this.keys;
    const clock = this.now();
    return this.call('abandonCharge', async () => {
      const keys = this.clustered ? [k.handle, k.charges] : [k.handle, k.charges, dueCharges, liveCharges];
      const ends = Number(await this.run('tbAbandonCharge', keys, [nonce, member, clock, nextPollAt]));
      // Cluster: it stays due (late payments); a lost ZADD is restored by the next takePollSlot of a retry.
      if (ends > 0 && this.clustered) await Promise.all([this.indexAdd(dueCharges, nextPollAt, member, ends, clock, ''), this.client.zrem(liveCharges, member)]);
      return ends > 0;
    });
  }

  async expireCharge(handleHash: string, nonce: string, now: number): Promise<boolean> {
    const k = this.keys.handle(handleHash);
    const member = indexMember(handleHash, nonce);
    const { dueCharges, liveCharges, allCharges } = this.keys;
    const clock = this.now();
    return this.call('expireCharge', async () => {
      const keys = this.clustered ? [k.handle, k.charges] : [k.handle, k.charges, dueCharges, liveCharges, allCharges];
      const charge = parseCharge(await this.run('tbExpireCharge', keys, [nonce, member, now, clock]));
      if (!charge) return false;
      const ends = chargeRecordEnd(charge);
      const companions: Promise<unknown>[] = [];
      // The provider-ref key lives in its own slot: extended beside the script (a webhook may still name the link).
      if (charge.providerRef) companions.push(this.client.pexpireat(this.keys.providerRef(charge.providerRef), ends));
      if (this.clustered) companions.push(this.client.zrem(dueCharges, member), this.client.zrem(liveCharges, member), this.indexAdd(allCharges, ends, member, ends, clock, 'end'));
      await Promise.all(companions);
      return true;
    });
  }

  async dueCharges(now: number, limit: number): Promise<ChargeRecord[]> {
    if (limit <= 0) return [];
    const index = this.keys.dueCharges;
    return this.call(
      'dueCharges',
      async () => {
        const members = await this.client.zrangebyscore(index, '-inf', now, 'LIMIT', 0, limit);
        const charges = await this.readCharges(members);
        // Members whose charge is gone or no longer polled (possible in Cluster mode) are dropped.
        const polled = (charge: ChargeRecord | null): charge is ChargeRecord => charge?.status === 'pending' || charge?.status === 'abandoned';
        const stale = members.filter((_, i) => !polled(charges[i] ?? null));
        if (stale.length > 0) await this.client.zrem(index, ...stale);
        return charges
          .filter((charge): charge is ChargeRecord => polled(charge) && charge.nextPollAt <= now)
          .sort((a, b) => a.nextPollAt - b.nextPollAt);
      },
      LISTING_BUDGET_MS,
    );
  }

  async listCharges(status?: ChargeStatus): Promise<ChargeRecord[]> {
    const clock = this.now();
    return this.call(
      'listCharges',
      async () => {
        const members = await this.client.zrangebyscore(this.keys.allCharges, `(${clock}`, '+inf');
        return (await this.readCharges(members))
          .filter((charge): charge is ChargeRecord => charge !== null && (status === undefined || charge.status === status))
          .sort((a, b) => a.openedAt - b.openedAt);
      },
      LISTING_BUDGET_MS,
    );
  }

  async countPendingCharges(): Promise<number> {
    const clock = this.now();
    return this.call('countPendingCharges', () => this.client.zcount(this.keys.liveCharges, `(${clock}`, '+inf'));
  }

  // ── throttles, lease, dev links ──────────────────────────────────────────────────────────────────

  async takeChallengeToken(clientKey: string, bucket: { ratePerSecond: number; burst: number }): Promise<{ allowed: boolean; retryAfterMs: number }> {
    const wait = await this.call('takeChallengeToken', () => this.run('tbTakeChallengeToken', [this.keys.challengeBucket(clientKey)], [bucket.ratePerSecond, bucket.burst]));
    return { allowed: Number(wait) === 0, retryAfterMs: Number(wait) };
  }

  async acquireLease(name: string, owner: string, ttlMs: number): Promise<boolean> {
    return Number(await this.call('acquireLease', () => this.run('tbAcquireLease', [this.keys.lease(name)], [owner, Math.max(1, Math.ceil(ttlMs))]))) === 1;
  }

  async claimEvent(source: string, eventId: string, ttlMs: number): Promise<boolean> {
    const key = this.keys.event(source, eventId);
    const set = await this.call('claimEvent', () => this.client.set(key, '1', 'PX', Math.max(1, Math.ceil(ttlMs)), 'NX'));
    return set === 'OK';
  }

  async putDevLink(link: DevLink): Promise<void> {
    const ttl = Math.max(1_000, devLinkEnd(link) - this.now());
    await this.call('putDevLink', () => this.client.set(this.keys.devLink(link.id), JSON.stringify(link), 'PX', ttl));
  }

  async getDevLink(id: string): Promise<DevLink | null> {
    const raw = await this.call('getDevLink', () => this.client.get(this.keys.devLink(id)));
    return raw === null ? null : (JSON.parse(raw) as DevLink);
  }

  async payDevLink(id: string, receivedAmount: string): Promise<boolean> {
    return Number(await this.call('payDevLink', () => this.run('tbPayDevLink', [this.keys.devLink(id)], [receivedAmount, this.now()]))) === 1;
  }

  async ping(): Promise<void> {
    await this.call('ping', () => this.client.ping());
  }

  // Budgets and allowances (SPEC §23): redis/quotas.ts.
  reserveQuotas(request: QuotaRequest): Promise<QuotaDecision> { return this.quotas.reserveQuotas(request); }
  concludeQuotas(holdId: string, counters: QuotaCounter[], outcome: 'commit' | 'release', attempt?: Attempt): Promise<void> { return this.quotas.concludeQuotas(holdId, counters, outcome, attempt); }
  holdQuotas(holdId: string, counters: QuotaCounter[], deadline: number): Promise<boolean> { return this.quotas.holdQuotas(holdId, counters, deadline); }
  releaseStaleQuotas(now: number, limit: number): Promise<number> { return this.quotas.releaseStaleQuotas(now, limit); }
  quotaUsage(counters: QuotaCounter[]): Promise<QuotaUsage[]> { return this.quotas.quotaUsage(counters); }

  async close(): Promise<void> {
    try {
      await withBudget(this.client.quit(), CALL_BUDGET_MS, 'QUIT unanswered');
    } catch {
      this.client.disconnect();
    }
  }

  // ── ledger (SPEC §17; README.md beside this file, "Ledger") ────────────────────────────────────────
  // Entries are written by the scripts that move credits. What is here reads them, and runs the
  // expiry step that writes `expire` entries before a handle's keys vanish.

  async expireHandles(now: number, limit: number): Promise<number> {
    if (limit <= 0) return 0;
    return this.call(
      'expireHandles',
      async () => {
        const due = this.clustered ? await this.expiredInShards(now, limit) : await this.client.zrangebyscore(this.keys.handleExpiry, '-inf', now, 'LIMIT', 0, limit);
        const ended = await Promise.all(
          due.map(async (handleHash) => {
            const k = this.keys.handle(handleHash);
            const keys = [k.handle, k.reservations, k.ledger, this.keys.handleExpiryOf(handleHash, this.clustered), this.keys.reservationIndexOf(handleHash, this.clustered)];
            const [done] = asArray(await this.run('tbExpireHandle', keys, [handleHash, now, this.ledgerRetentionMs]));
            if (Number(done) !== 1) return 0;
            if (!(await this.replicated(k.handle))) await this.reportUnreplicated('expire', handleHash);
            return 1;
          }),
        );
        return ended.reduce<number>((sum, one) => sum + one, 0);
      },
      LISTING_BUDGET_MS,
    );
  }

  async ledgerTail(handleHash: string, count: number): Promise<LedgerEntry[]> {
    if (count <= 0) return [];
    const items = await this.call('ledgerTail', () => this.client.xrevrange(this.keys.handle(handleHash).ledger, '+', '-', 'COUNT', count));
    return (items as StreamItem[]).map(parseStreamEntry).reverse();
  }

  async *ledgerAccounts(options: { unledgeredHandles?: boolean } = {}): AsyncIterable<LedgerAccount> {
    for (const node of this.masters()) {
      for await (const keys of this.scan(node, this.keys.ledgerPattern)) {
        for (const key of keys) {
          const handleHash = tagValue(key, 'h');
          if (handleHash) yield { kind: 'handle', handleHash };
        }
      }
      for await (const keys of this.scan(node, this.keys.paymentLedgerPattern)) {
        for (const key of keys) {
          const payer = tagValue(key, 'x402');
          if (payer) yield { kind: 'payer', payer };
        }
      }
      if (!options.unledgeredHandles) continue;
      for await (const keys of this.scan(node, this.keys.handlePattern)) {
        // A handle's ledger lives in its slot, so on this node: one pipelined EXISTS per batch.
        const hashes = keys.map((key) => tagValue(key, 'h')).filter((hash): hash is string => hash !== null);
        const pipeline = node.pipeline();
        for (const handleHash of hashes) pipeline.exists(this.keys.handle(handleHash).ledger);
        const replies = await this.call('ledgerAccounts', async () => (await pipeline.exec()) ?? [], ADMIN_SCAN_BUDGET_MS);
        for (const [i, handleHash] of hashes.entries()) {
          const [error, exists] = replies[i] ?? [null, 1];
          if (!error && Number(exists) === 0) yield { kind: 'handle', handleHash };
        }
      }
    }
  }

  async ledgerCheckpoint(account: LedgerAccount): Promise<LedgerCheckpoint | null> {
    if (account.kind === 'payer') {
      const [last] = (await this.call('ledgerCheckpoint', () => this.client.xrevrange(this.keys.paymentLedger(account.payer), '+', '-', 'COUNT', 1))) as StreamItem[];
      if (!last) return null;
      const entry = parseStreamEntry(last);
      return { account, fingerprint: '', lastSeq: entry.seq, lastAt: entry.at, holdings: {} };
    }
    const k = this.keys.handle(account.handleHash);
    const [lastId, fingerprint, ...flat] = asArray(await this.call('ledgerCheckpoint', () => this.run('tbLedgerCheckpoint', [k.handle, k.reservations, k.ledger], [])));
    const holdings: Record<string, LedgerHolding> = {};
    for (let i = 0; i + 2 < flat.length; i += 3) holdings[String(flat[i])] = { balance: Number(flat[i + 1]), reserved: Number(flat[i + 2]) };
    if (typeof lastId !== 'string' && Object.keys(holdings).length === 0) return null;
    const [lastAt, lastSeq] = typeof lastId === 'string' ? parseStreamId(lastId) : [0, 0];
    return { account, fingerprint: String(fingerprint ?? ''), lastSeq, lastAt, holdings };
  }

  async readLedger(account: LedgerAccount, range: LedgerRange): Promise<LedgerEntry[]> {
    if (range.limit <= 0) return [];
    const key = account.kind === 'handle' ? this.keys.handle(account.handleHash).ledger : this.keys.paymentLedger(account.payer);
    const [start, end] = streamBounds(range);
    const items = await this.call('readLedger', () => this.client.xrange(key, start, end, 'COUNT', range.limit), LISTING_BUDGET_MS);
    return (items as StreamItem[]).map(parseStreamEntry);
  }

  /** Standalone: the one server; Cluster: every master (SCAN is per node). */
  private masters(): Redis[] {
    return this.clustered ? (this.client as Cluster).nodes('master') : [this.client as Redis];
  }

  /** SCAN MATCH on one node, one batch of keys at a time (an operator verb: each call gets the admin budget). */
  private async *scan(node: Redis, pattern: string): AsyncIterable<string[]> {
    let cursor = '0';
    do {
      const [next, keys] = await this.call('scan', () => node.scan(cursor, 'MATCH', pattern, 'COUNT', SCAN_COUNT), ADMIN_SCAN_BUDGET_MS);
      cursor = next;
      if (keys.length > 0) yield keys;
    } while (cursor !== '0');
  }

  /**
   * Cluster: handles due for the expiry step, from the next EXPIRY_WALK_SLICE handle-expiry shards of
   * a rotating walk over all 16 384 slots (each master asked about its own slots, pipelined). The
   * grace period (days) dwarfs a full walk (16 passes of the reconciler's ≤ 3 s tick), so no
   * directory is needed as for reservations.
   */
  private async expiredInShards(now: number, limit: number): Promise<string[]> {
    const cluster = this.client as Cluster;
    const slots = walkSlice(this.expiryWalkCursor, EXPIRY_WALK_SLICE);
    this.expiryWalkCursor = (this.expiryWalkCursor + EXPIRY_WALK_SLICE) % SLOT_COUNT;
    const byNode = slotsByMaster(cluster, slots);
    const found: string[] = [];
    await Promise.all(
      [...byNode].map(async ([node, nodeSlots]) => {
        for (let start = 0; start < nodeSlots.length; start += PIPELINE_CHUNK) {
          const pipeline = node.pipeline();
          for (const slot of nodeSlots.slice(start, start + PIPELINE_CHUNK)) pipeline.zrangebyscore(this.keys.handleExpiryShard(slot), '-inf', now, 'LIMIT', 0, limit);
          // A slot that moved since the slot map was read answers MOVED: it is read on a later walk.
          for (const [error, reply] of (await pipeline.exec()) ?? []) if (!error && Array.isArray(reply)) found.push(...(reply as string[]));
        }
      }),
    );
    return found.slice(0, limit);
  }

  // ── orphan payments (SPEC §21) ───────────────────────────────────────────────────────────────────

  async recordOrphanPayment(orphan: OrphanPayment): Promise<boolean> {
    const key = this.keys.orphanPayments;
    return this.call('recordOrphanPayment', async () => {
      const added = await this.client.hsetnx(key, orphan.providerRef, JSON.stringify(orphan));
      await this.client.pexpire(key, RETENTION_MS); // the hash lives as long as its newest orphan
      return added === 1;
    });
  }

  async listOrphanPayments(): Promise<OrphanPayment[]> {
    const now = this.now();
    const values = await this.call('listOrphanPayments', () => this.client.hvals(this.keys.orphanPayments), LISTING_BUDGET_MS);
    return values.map((raw) => JSON.parse(raw) as OrphanPayment).filter((orphan) => orphan.noticedAt + RETENTION_MS > now).sort((a, b) => a.noticedAt - b.noticedAt);
  }

  // ── priced-request registry (SPEC §6.5) ────────────────────────────────────────────────────────────
  // One key per upstream session (its own slot), one field per request: each call touches one key.

  async registerPricedRequest(key: PricedRequestKey, record: PricedRequestRecord, ttlMs: number): Promise<void> {
    const hash = this.keys.pricedRequests(key.session);
    await this.call('registerPricedRequest', () => this.run('tbRegisterPricedRequest', [hash], [key.requestId, JSON.stringify(record), ttlMs, this.now()]));
  }

  async getPricedRequest(key: PricedRequestKey): Promise<PricedRequestRecord | null> {
    return parsePricedRequest(await this.call('getPricedRequest', () => this.client.hget(this.keys.pricedRequests(key.session), key.requestId)));
  }

  async concludePricedRequest(key: PricedRequestKey, state: 'committed' | 'released', remaining: number | null): Promise<PricedRequestRecord | null> {
    const hash = this.keys.pricedRequests(key.session);
    return parsePricedRequest(await this.call('concludePricedRequest', () => this.run('tbConcludePricedRequest', [hash], [key.requestId, state, remaining ?? ''])));
  }

  // ── end of the priced-request registry ───────────────────────────────────────────────────────────

  // ── x402 authorizations (SPEC §19) ───────────────────────────────────────────────────────────────
  // One string key per nonce under the payer's hash tag (keys.ts). The claim is `SET NX PX`: one
  // atomic command, so the first claim wins on any replica and in Cluster mode.

  async claimPaymentNonce(claim: PaymentNonceClaim): Promise<boolean> {
    const now = this.now();
    const record = newPaymentNonceRecord(claim, now);
    const ttlMs = record.expiresAt - now;
    const nonceKey = this.keys.paymentNonce(claim);
    return this.call('claimPaymentNonce', async () => {
      const claimed = Number(await this.once('tbClaimPaymentNonce', this.keys.paymentOperation(claim, 'claim'), claim.attempt, [nonceKey], [JSON.stringify(record), ttlMs])) === 1;
      if (claimed && !(await this.replicated(nonceKey))) {
        // Fail closed: the call is refused unpaid; the claim still refuses the nonce, so nothing is paid twice.
        this.countUnreplicated('x402_claim');
        throw new GatewayError('TB_ERR_STORE_UNAVAILABLE', `the x402 nonce claim was not acknowledged by ${this.durabilityText()}`);
      }
      return claimed;
    });
  }

  async finishPaymentNonce(key: PaymentNonceKey, outcome: PaymentNonceOutcome, attempt?: Attempt): Promise<boolean> {
    const nonceKey = this.keys.paymentNonce(key);
    const keys = [nonceKey, this.keys.paymentLedger(key.payer)];
    return this.call('finishPaymentNonce', async () => {
      const reply = await this.once('tbFinishPaymentNonce', this.keys.paymentOperation(key, 'finish'), attempt, keys, [outcome.state, outcome.transaction ?? '', outcome.at, this.ledgerRetentionMs]);
      const finished = Number(reply) === 1;
      // The payment already moved on chain and the result goes out: counted, for the operator.
      if (finished && outcome.state === 'settled' && !(await this.replicated(nonceKey))) this.countUnreplicated('x402_settle');
      return finished;
    });
  }

  async recordX402Settlement(record: X402SettlementRecord): Promise<boolean> {
    const keys = [this.keys.paymentNonce(record), this.keys.paymentLedger(record.payer), this.keys.paymentSettled(record)];
    const args = [record.nonce, record.tool, record.amount, record.network, record.asset, record.payer, record.sku, record.transaction, record.at, this.ledgerRetentionMs];
    return this.call('recordX402Settlement', async () => {
      const written = Number(await this.run('tbRecordX402Settlement', keys, args)) === 1;
      // The payment already moved on chain and the result goes out: counted, for the operator.
      if (written && !(await this.replicated(keys[0] as string))) this.countUnreplicated('x402_settle');
      return written;
    });
  }

  async getPaymentNonce(key: PaymentNonceKey): Promise<PaymentNonceRecord | null> {
    const raw = await this.call('getPaymentNonce', () => this.client.get(this.keys.paymentNonce(key)));
    return raw === null ? null : (JSON.parse(raw) as PaymentNonceRecord);
  }

  // ── sessions bound to principals (SPEC §20) ──────────────────────────────────────────────────────
  // One string key per session hash (its own slot); each call is one script on one key.

  async bindSession(sessionHash: string, principal: string, ttlMs: number): Promise<string> {
    const owner = await this.call('bindSession', () => this.run('tbBindSession', [this.keys.sessionOwner(sessionHash)], [principal, Math.max(1, Math.ceil(ttlMs))]));
    return String(owner);
  }

  async sessionPrincipal(sessionHash: string, ttlMs: number): Promise<string | null> {
    const owner = await this.call('sessionPrincipal', () => this.run('tbSessionPrincipal', [this.keys.sessionOwner(sessionHash)], [Math.max(1, Math.ceil(ttlMs))]));
    return typeof owner === 'string' ? owner : null;
  }

  // ── end of sessions bound to principals ──────────────────────────────────────────────────────────

  // ── tasks holding a reservation (lua/tasks.ts) ───────────────────────────────────────────────────
  // The record is written first (a lookup must find it before the client can ask), then the
  // reservation is held; if that finds it gone, the record goes too. A crash in between leaves a
  // record whose reservation the reconciler releases at its first deadline: the task's result is then
  // withheld (its commit finds nothing), never delivered free.

  async holdTask(key: TaskKey, record: TaskRecord): Promise<boolean> {
    const now = this.now();
    const taskKey = this.keys.task(taskHash(key));
    await this.call('holdTask', () => this.client.set(taskKey, JSON.stringify(record), 'PX', Math.max(1, record.deadline - now + TASK_RECORD_GRACE_MS)));
    const k = this.keys.handle(record.handleHash);
    const index = this.keys.reservationIndexOf(record.handleHash, this.clustered);
    const member = indexMember(record.handleHash, record.reservationId);
    const held = Number(await this.call('holdTask', () => this.run('tbHoldTaskReservation', [k.handle, k.reservations, index], [record.reservationId, member, record.deadline, now])));
    if (held !== 1) await this.call('endTask', () => this.client.del(taskKey));
    return held === 1;
  }

  async getTask(key: TaskKey): Promise<TaskRecord | null> {
    const raw = await this.call('getTask', () => this.client.get(this.keys.task(taskHash(key))));
    return raw ? (JSON.parse(raw) as TaskRecord) : null;
  }

  async endTask(key: TaskKey): Promise<void> {
    await this.call('endTask', () => this.client.del(this.keys.task(taskHash(key))));
  }

  // ── end of tasks ─────────────────────────────────────────────────────────────────────────────────

  // ── internals ────────────────────────────────────────────────────────────────────────────────────

  /**
   * Cluster: lists the shard of a handle's slot in the directory (score = now), at most once per
   * half grace per slot from this process: an entry is pruned only when older than the grace, so
   * one listing covers every reservation this process makes in that shard meanwhile.
   */
  private listShard(handleHash: string, now: number): void {
    const slot = keySlot(`h:${handleHash}`);
    if ((this.shardListedAt.get(slot) ?? -Infinity) > now - SHARD_LISTING_GRACE_MS / 2) return;
    this.shardListedAt.set(slot, now);
    const listing = this.indexAdd(this.keys.shardDirectory, now, String(slot), now + RETENTION_MS, now, '');
    this.background('listShard', listing.catch((err: unknown) => {
      this.shardListedAt.delete(slot);
      throw err;
    }));
  }

  /**
   * Cluster: stale members of the reservation shards, earliest deadline first, at most `limit`. The
   * shards read are those the directory lists plus the next SHARD_WALK_SLICE slots of a rotating walk
   * over all 16 384, so a shard whose directory entry was lost is still read within a few minutes.
   * Each master is asked only about the slots it serves, in pipelines of at most PIPELINE_CHUNK.
   * README.md has the measurements behind these numbers.
   */
  private async staleInShards(before: number, limit: number, clock: number): Promise<string[]> {
    const cluster = this.client as Cluster;
    const listed = new Set((await cluster.zrange(this.keys.shardDirectory, 0, -1)).map(Number).filter((slot) => Number.isInteger(slot) && slot >= 0 && slot < SLOT_COUNT));
    const slots = new Set([...listed, ...walkSlice(this.walkCursor, SHARD_WALK_SLICE)]);
    this.walkCursor = (this.walkCursor + SHARD_WALK_SLICE) % SLOT_COUNT;
    const byNode = slotsByMaster(cluster, slots);
    const found: { member: string; deadline: number }[] = [];
    const empty: number[] = [];
    await Promise.all(
      [...byNode].map(async ([node, nodeSlots]) => {
        for (let start = 0; start < nodeSlots.length; start += PIPELINE_CHUNK) {
          const chunk = nodeSlots.slice(start, start + PIPELINE_CHUNK);
          const pipeline = node.pipeline();
          for (const slot of chunk) pipeline.zrange(this.keys.reservationShard(slot), 0, limit - 1, 'WITHSCORES');
          const replies = (await pipeline.exec()) ?? [];
          chunk.forEach((slot, i) => {
            // A slot that moved since the slot map was read answers MOVED: it is read on a later pass.
            const [error, reply] = replies[i] ?? [null, null];
            if (error || !Array.isArray(reply)) return;
            if (reply.length === 0 && listed.has(slot)) empty.push(slot);
            for (let j = 0; j + 1 < reply.length; j += 2) {
              const deadline = Number(reply[j + 1]);
              if (deadline < before) found.push({ member: String(reply[j]), deadline });
            }
          });
        }
      }),
    );
    // A reserve that made one of these shards non-empty since we read it listed it again after the cutoff: it stays.
    if (empty.length > 0) await this.run('tbPruneShardDirectory', [this.keys.shardDirectory], [clock - SHARD_LISTING_GRACE_MS, ...empty]);
    return found
      .sort((a, b) => a.deadline - b.deadline)
      .slice(0, limit)
      .map(({ member }) => member);
  }

  /** Reads the charges named by index members, in order; null where a charge is gone. */
  private async readCharges(members: string[]): Promise<(ChargeRecord | null)[]> {
    return Promise.all(
      members.map(async (member) => {
        const target = parseIndexMember(member);
        if (!target) return null;
        return this.liveCharge(parseCharge(await this.client.hget(this.keys.handle(target.handleHash).charges, target.id)));
      }),
    );
  }

  /** A charge past its end (link expiry + retention) reads as gone, as in the memory store. */
  private liveCharge(charge: ChargeRecord | null): ChargeRecord | null {
    return charge && chargeRecordEnd(charge) > this.now() ? charge : null;
  }

  private indexAdd(index: string, score: number, member: string, liveUntil: number, now: number, mode: 'end' | ''): Promise<Reply> {
    return this.run('tbIndexAdd', [index], [score, member, liveUntil, now, mode]);
  }

  /** Best-effort index upkeep that must not delay or fail the call it follows. */
  private background(op: string, work: Promise<unknown>): void {
    work.catch((err: unknown) => this.logger.debug({ op, err: errorMessage(err) }, 'redis index upkeep failed; the reconciler will catch up'));
  }

  /**
   * Runs a money script under its operation record (lua/operations.ts): when its reply is lost (the
   * connection closed or timed out, a failover is under way) it is run again with the same attempt
   * until the call's budget ends, and a run that finds the first run's effect answers as it did.
   */
  private async once(script: ScriptName, opKey: string, attempt: Attempt | undefined, keys: string[], args: Arg[]): Promise<Reply> {
    const id = attempt ?? newAttempt();
    const giveUpAt = performance.now() + CALL_BUDGET_MS - RERUN_GAP_MS;
    for (;;) {
      try {
        return await this.run(script, [opKey, ...keys], [id, ...args]);
      } catch (err) {
        const ran = err instanceof ReplyError && !NOT_RUN_REPLY.test(errorMessage(err));
        if (ran || performance.now() + RERUN_GAP_MS >= giveUpAt) throw err;
        await sleep(RERUN_GAP_MS);
      }
    }
  }

  /**
   * SPEC §21: with durability `replicated`, WAIT on the connection that ran the write (Cluster: the
   * master serving the key's slot; standalone and Sentinel have one connection). True when enough
   * replicas acknowledged it in time, or with durability `none`; a WAIT that fails counts as not acknowledged.
   */
  private async replicated(key: string): Promise<boolean> {
    if (!this.durability) return true;
    const { replicas, timeoutMs } = this.durability;
    const node = this.clustered ? masterOfSlot(this.client as Cluster, keySlot(key)) : (this.client as Redis);
    if (!node) return false;
    try {
      return Number(await node.call('WAIT', replicas, timeoutMs)) >= replicas;
    } catch {
      return false;
    }
  }

  private countUnreplicated(write: ReplicatedWrite): void {
    this.unreplicated.set(write, (this.unreplicated.get(write) ?? 0) + 1);
  }

  /** Counts a write that was acted on without its replicas, and logs it with the handle's fingerprint. */
  private async reportUnreplicated(write: ReplicatedWrite, handleHash: string): Promise<void> {
    this.countUnreplicated(write);
    const fingerprint = await this.client.hget(this.keys.handle(handleHash).handle, 'fp').catch(() => null);
    this.logger.warn(
      { evt: 'store_unreplicated', op: write, fingerprint: fingerprint ?? '', replicas: this.durability?.replicas, waitTimeoutMs: this.durability?.timeoutMs },
      `a ${write} was not acknowledged by ${this.durabilityText()}: a failover now may erase it (the result was delivered)`,
    );
  }

  private durabilityText(): string {
    const { replicas = 0, timeoutMs = 0 } = this.durability ?? {};
    return `${replicas} replica${replicas === 1 ? '' : 's'} within ${timeoutMs} ms`;
  }

  /** Writes acted on without the replicas durability asked for, by kind, since this store was opened. */
  unreplicatedWrites(): Record<string, number> {
    return Object.fromEntries(this.unreplicated);
  }

  private run(script: ScriptName, keys: string[], args: Arg[]): Promise<Reply> {
    const command = (this.client as unknown as Record<ScriptName, (numKeys: number, ...rest: Arg[]) => Promise<Reply>>)[script];
    return command.call(this.client, keys.length, ...keys, ...args);
  }

  /** Runs one store operation within the call budget; any Redis failure becomes TB_ERR_STORE_UNAVAILABLE. */
  private async call<T>(op: string, work: () => Promise<T>, budgetMs = CALL_BUDGET_MS): Promise<T> {
    try {
      return await withBudget(work(), budgetMs, `no answer within ${budgetMs} ms`);
    } catch (err) {
      if (err instanceof GatewayError) throw err;
      throw new GatewayError('TB_ERR_STORE_UNAVAILABLE', `the Redis store is unavailable (${op}): ${errorMessage(err)}`, { cause: err });
    }
  }
}

// ── replies ────────────────────────────────────────────────────────────────────────────────────────

const principalArgs = (principal: string | null): [string, string] => (principal === null ? ['0', ''] : ['1', principal]);

const asArray = (reply: Reply): Reply[] => (Array.isArray(reply) ? reply : [reply]);

function parseCharge(raw: Reply | undefined): ChargeRecord | null {
  return typeof raw === 'string' ? (JSON.parse(raw) as ChargeRecord) : null;
}

function parsePricedRequest(raw: Reply | undefined): PricedRequestRecord | null {
  return typeof raw === 'string' ? (JSON.parse(raw) as PricedRequestRecord) : null;
}

/** The handle keys on one node (standalone or a Cluster master) that are live and carry this fingerprint. */
async function scanHandles(node: Redis, pattern: string, fingerprint: string, now: number): Promise<string[]> {
  const matches: string[] = [];
  let cursor = '0';
  do {
    const [next, keys] = await node.scan(cursor, 'MATCH', pattern, 'COUNT', SCAN_COUNT);
    cursor = next;
    if (keys.length === 0) continue;
    const pipeline = node.pipeline();
    for (const key of keys) pipeline.hmget(key, 'x', 'fp');
    const replies = (await pipeline.exec()) ?? [];
    keys.forEach((key, i) => {
      const [error, fields] = replies[i] ?? [null, null];
      const [expiresAt, fp] = (error ? [] : (fields as (string | null)[])) ?? [];
      if (Number(expiresAt) > now && fp === fingerprint) matches.push(key);
    });
  } while (cursor !== '0');
  return matches;
}

function groupMembers(members: string[]): Map<string, string[]> {
  const byHandle = new Map<string, string[]>();
  for (const member of members) {
    const target = parseIndexMember(member);
    if (!target) continue;
    const ids = byHandle.get(target.handleHash) ?? [];
    ids.push(target.id);
    byHandle.set(target.handleHash, ids);
  }
  return byHandle;
}

/** `size` slots of a rotating walk over every slot, from `cursor` on. */
function walkSlice(cursor: number, size: number): number[] {
  return Array.from({ length: size }, (_, i) => (cursor + i) % SLOT_COUNT);
}

/** The master serving a slot, by the client's slot map: the connection a script on that slot went through. */
function masterOfSlot(cluster: Cluster, slot: number): Redis | null {
  const address = cluster.slots[slot]?.[0];
  return cluster.nodes('master').find((node) => `${node.options.host}:${node.options.port}` === address) ?? null;
}

/** Slots grouped by the master serving them, by the client's slot map (a slot with no known master is left out). */
function slotsByMaster(cluster: Cluster, slots: Iterable<number>): Map<Redis, number[]> {
  const masters = new Map(cluster.nodes('master').map((node) => [`${node.options.host}:${node.options.port}`, node]));
  const byNode = new Map<Redis, number[]>();
  for (const slot of slots) {
    const node = masters.get(cluster.slots[slot]?.[0] ?? '');
    if (!node) continue;
    const nodeSlots = byNode.get(node);
    if (nodeSlots) nodeSlots.push(slot);
    else byNode.set(node, [slot]);
  }
  return byNode;
}
