// Handles, reservations and grants in the Redis store: one script per decision on the handle's keys
// (handles.lua.ts), the reservation index written by the same script (README.md, "Indexes and
// Cluster mode"), and in Cluster mode the sweep's walk over the reservation shards.
import type { Cluster, Redis } from 'ioredis';
import { GatewayError } from '../../errors.js';
import { indexMember, parseIndexMember } from '../keys.js';
import { checkGrant, checkHandleTtl, RETENTION_MS } from '../policy.js';
import { keySlot, SLOT_COUNT } from '../slots.js';
import { bySubject, checkDraw } from '../quota-policy.js';
import type { Attempt, HandleState, HeldQuotas, NewHandle, QuotaDraw, SpendDecision, SpendRequest } from '../store.js';
import { ChainHeads } from './chain-heads.js';
import { drawParts, exceededAt, holdParts, type QuotaParts } from './quotas.js';
import { ADMIN_SCAN_BUDGET_MS, asArray, LISTING_BUDGET_MS, newAttempt, parseCharge, PIPELINE_CHUNK, RedisCore, SCAN_COUNT, slotsByMaster, walkSlice } from './core.js';

/** Cluster stale sweep: slots of the rotating walk read per pass (all 16 384 every 16 passes, ~48 s at 3 s ticks). */
const SHARD_WALK_SLICE = 1_024;

/** A directory entry younger than this is kept even if its shard read empty (a reserve may have just listed it). */
const SHARD_LISTING_GRACE_MS = 60_000;

/** The commit script's third reply: who hashed the entry before the spend entry (none: the ledger's first). */
const LINKED_BY: Record<string, 'gateway' | 'script' | undefined> = { '1': 'gateway', '0': 'script' };

export class RedisHandles {
  /** Cluster stale sweep: the first slot of the next slice of its rotating walk. */
  private walkCursor = 0;
  /** Cluster: when this process last listed each slot's reservation shard in the directory. */
  private readonly shardListedAt = new Map<number, number>();
  /** The last spend entry this process appended per handle, hashed here (chain-heads.ts). */
  private readonly chainHeads = new ChainHeads();

  constructor(private readonly core: RedisCore) {}

  async createHandle(handle: NewHandle): Promise<void> {
    checkHandleTtl(handle.ttlMs);
    const k = this.core.keys.handle(handle.handleHash);
    const args = [handle.fingerprint, ...principalArgs(handle.principal), handle.ttlMs, this.core.now(), handle.handleHash];
    const expiry = this.core.keys.handleExpiryOf(handle.handleHash, this.core.clustered);
    await this.core.call('createHandle', () => this.core.run('tbCreateHandle', [k.handle, k.reservations, k.ledger, expiry], args));
  }

  async getHandle(handleHash: string): Promise<HandleState | null> {
    const fields = await this.core.call('getHandle', () => this.core.client.hgetall(this.core.keys.handle(handleHash).handle));
    const expiresAt = Number(fields.x);
    if (!(expiresAt > this.core.now())) return null;
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
    const now = this.core.now();
    return this.core.call(
      'findHandlesByFingerprint',
      async () => {
        const nodes = this.core.clustered ? (this.core.client as Cluster).nodes('master') : [this.core.client as Redis];
        const found = await Promise.all(nodes.map((node) => scanHandles(node, this.core.keys.handlePattern, fingerprint, now)));
        // The prefix holds no brace, so the first "{h:" starts the tag.
        return found.flat().map((key) => key.slice(key.indexOf('{h:') + 3, -1));
      },
      ADMIN_SCAN_BUDGET_MS,
    );
  }

  async reserve(request: SpendRequest): Promise<SpendDecision> {
    const k = this.core.keys.handle(request.handleHash);
    const member = indexMember(request.handleHash, request.reservationId);
    const now = this.core.now();
    const ratePerSecond = request.bucket?.ratePerSecond ?? '';
    const burst = request.bucket?.burst ?? '';
    const args = [...principalArgs(request.principal), request.sku, request.cost, request.reservationId, request.reservationDeadline, request.ttlMs, ratePerSecond, burst, member, now, this.core.ledgerRetentionMs, request.handleHash];
    // One script, one round trip, in every mode: the reservation and its index entry are written
    // together, and outside Cluster the call's budget draws with them.
    const groups: [string, QuotaDraw[]][] = request.quotas ? bySubject(request.quotas.draws) : [];
    for (const [, draws] of groups) for (const draw of draws) checkDraw(draw);
    const quotas = request.quotas ? this.quotaParts(drawParts(this.core.keys, false, request.quotas, groups)) : NO_PARTS;
    const index = this.core.keys.reservationIndexOf(request.handleHash, this.core.clustered);
    const expiry = this.core.keys.handleExpiryOf(request.handleHash, this.core.clustered);
    const opKey = this.core.keys.operation(request.handleHash, 'r', request.reservationId);
    const reply = await this.core.call('reserve', () => this.core.once('tbReserve', opKey, request.attempt, [k.handle, k.reservations, k.charges, index, k.ledger, expiry, ...quotas.keys], [...args, ...quotas.args]));
    const [kind, a, b, c, d] = asArray(reply);
    switch (kind) {
      case 'quota_exceeded': {
        const { kind: _, ...refusal } = exceededAt(groups, Number(a), Number(b), c, d);
        return { kind, ...refusal };
      }
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
        if (this.core.clustered && Number(b) === 1) this.listShard(request.handleHash, now);
        return { kind, remaining: Number(a) };
      default:
        throw new GatewayError('TB_ERR_INTERNAL', `unexpected reserve reply from Redis: ${String(kind)}`);
    }
  }

  /** Spend entries appended since opened, by who hashed the previous entry (Store.ledgerLinks). */
  ledgerLinks(): Record<string, number> {
    return this.chainHeads.links();
  }

  async commit(handleHash: string, reservationId: string, tool = '', attempt?: Attempt, held?: HeldQuotas): Promise<number | null> {
    const k = this.core.keys.handle(handleHash);
    const member = indexMember(handleHash, reservationId);
    const index = this.core.keys.reservationIndexOf(handleHash, this.core.clustered);
    const opKey = this.core.keys.operation(handleHash, 'c', reservationId);
    const quotas = this.heldParts(held);
    return this.core.call('commit', async () => {
      const mark = await this.core.mark(k.handle);
      const reply = await this.core.once('tbCommit', opKey, attempt, [k.handle, k.reservations, index, k.ledger, ...quotas.keys], [reservationId, member, this.core.now(), tool, this.core.ledgerRetentionMs, ...this.chainHeads.args(handleHash), ...quotas.args]);
      if (reply === null) return null;
      const [balance, entry, linked] = asArray(reply);
      this.chainHeads.remember(handleHash, String(entry), LINKED_BY[String(linked)]);
      // The result is delivered whatever WAIT says (the payer paid): an operator sees which spend a failover may have erased.
      if (!(await this.core.replicated(mark))) await this.core.reportUnreplicated('commit', handleHash);
      return Number(balance);
    });
  }

  async release(handleHash: string, reservationId: string, attempt?: Attempt, held?: HeldQuotas): Promise<number | null> {
    const k = this.core.keys.handle(handleHash);
    const member = indexMember(handleHash, reservationId);
    const index = this.core.keys.reservationIndexOf(handleHash, this.core.clustered);
    const opKey = this.core.keys.operation(handleHash, 'l', reservationId);
    const quotas = this.heldParts(held);
    const balance = await this.core.call('release', () => this.core.once('tbRelease', opKey, attempt, [k.handle, k.reservations, index, ...quotas.keys], [reservationId, member, this.core.now(), ...quotas.args]));
    return balance === null ? null : Number(balance);
  }

  /** A budget hold concluded with its reservation (outside Cluster only: Store.quotasWithCredits). */
  private heldParts(held: HeldQuotas | undefined): QuotaParts {
    return held ? this.quotaParts(holdParts(this.core.keys, false, held.holdId, bySubject(held.counters))) : NO_PARTS;
  }

  /** Cluster keeps budget parts out of the credit scripts: they live in other slots (the caller holds them beside, §23). */
  private quotaParts(parts: QuotaParts): QuotaParts {
    if (this.core.clustered) throw new GatewayError('TB_ERR_INTERNAL', 'budget draws cannot join a credit script in Redis Cluster (Store.quotasWithCredits is false)');
    return parts;
  }

  async releaseStaleReservations(now: number, limit: number): Promise<number> {
    if (limit <= 0) return 0;
    const clock = this.core.now();
    return this.core.call(
      'releaseStaleReservations',
      async () => {
        const members = this.core.clustered ? await this.staleInShards(now, limit, clock) : await this.core.client.zrangebyscore(this.core.keys.reservationIndex, '-inf', `(${now}`, 'LIMIT', 0, limit);
        const counts = await Promise.all(
          [...groupMembers(members)].map(async ([handleHash, ids]) => {
            const k = this.core.keys.handle(handleHash);
            // The script drops each member it looked at: its reservation is now released or was already gone.
            const keys = [k.handle, k.reservations, this.core.keys.reservationIndexOf(handleHash, this.core.clustered)];
            return Number(await this.core.run('tbReleaseStale', keys, [now, clock, handleHash, ...ids]));
          }),
        );
        return counts.reduce((sum, count) => sum + count, 0);
      },
      LISTING_BUDGET_MS,
    );
  }

  async grantCredits(handleHash: string, sku: string, credits: number, reason = '', attempt: Attempt = newAttempt()): Promise<number> {
    checkGrant(credits);
    const k = this.core.keys.handle(handleHash);
    const expiry = this.core.keys.handleExpiryOf(handleHash, this.core.clustered);
    const args = [sku, credits, this.core.now(), reason, this.core.ledgerRetentionMs, handleHash];
    // An operator grant has no id of its own: the attempt is its operation id.
    const opKey = this.core.keys.operation(handleHash, 'g', attempt);
    return this.core.call('grantCredits', async () => {
      const mark = await this.core.mark(k.handle);
      const balance = await this.core.once('tbGrantCredits', opKey, attempt, [k.handle, k.reservations, k.ledger, expiry], args);
      if (balance === null) throw new GatewayError('TB_ERR_NOT_FOUND', 'no live handle with that hash: it never existed or has expired');
      if (!(await this.core.replicated(mark))) {
        this.core.countUnreplicated('adjust');
        throw new GatewayError(
          'TB_ERR_STORE_UNAVAILABLE',
          `the grant was written on the Redis primary but not acknowledged by ${this.core.durabilityText()}: a failover may erase it. Check the balance with \`tollbooth handle show\` before granting again`,
        );
      }
      return Number(balance);
    });
  }

  /**
   * Cluster: lists the shard of a handle's slot in the directory (score = now), at most once per
   * half grace per slot from this process: an entry is pruned only when older than the grace, so
   * one listing covers every reservation this process makes in that shard meanwhile.
   */
  private listShard(handleHash: string, now: number): void {
    const slot = keySlot(`h:${handleHash}`);
    if ((this.shardListedAt.get(slot) ?? -Infinity) > now - SHARD_LISTING_GRACE_MS / 2) return;
    this.shardListedAt.set(slot, now);
    const listing = this.core.indexAdd(this.core.keys.shardDirectory, now, String(slot), now + RETENTION_MS, now, '');
    this.core.background('listShard', listing.catch((err: unknown) => {
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
    const cluster = this.core.client as Cluster;
    const listed = new Set((await cluster.zrange(this.core.keys.shardDirectory, 0, -1)).map(Number).filter((slot) => Number.isInteger(slot) && slot >= 0 && slot < SLOT_COUNT));
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
          for (const slot of chunk) pipeline.zrange(this.core.keys.reservationShard(slot), 0, limit - 1, 'WITHSCORES');
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
    if (empty.length > 0) await this.core.run('tbPruneShardDirectory', [this.core.keys.shardDirectory], [clock - SHARD_LISTING_GRACE_MS, ...empty]);
    return found
      .sort((a, b) => a.deadline - b.deadline)
      .slice(0, limit)
      .map(({ member }) => member);
  }
}

/** No budget parts: the scripts read a count of 0. */
const NO_PARTS: QuotaParts = { keys: [], args: [0] };

const principalArgs = (principal: string | null): [string, string] => (principal === null ? ['0', ''] : ['1', principal]);

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
