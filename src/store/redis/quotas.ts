// Budget and allowance counters of the Redis store (SPEC §23; README.md beside the store,
// "Budgets and allowances"). One script per subject per step (redis/quotas.lua.ts): a subject's
// counters, hold parts and operation records share the tag {q:<subject>}, so each script is atomic in
// Cluster too. A request drawing on several subjects draws on them one by one in subject order and
// gives back the ones drawn when a later one refuses; a crash in between leaves hold parts that are
// indexed (the index entry is each script's first write) and released by the stale sweep after the
// hold's deadline.
import type { Cluster } from 'ioredis';
import { GatewayError } from '../../errors.js';
import { parseQuotaHoldMember, quotaHoldMember, type KeySpace } from '../keys.js';
import type { ScriptName } from '../lua/index.js';
import { bySubject, checkDraw, counterEnd, counterField, QUOTA_GRACE_MS, windowEnd } from '../quota-policy.js';
import type { RedisClient } from '../redis-connection.js';
import { newAttempt, slotsByMaster } from './core.js';
import { SLOT_COUNT } from '../slots.js';
import type { Attempt, QuotaCounter, QuotaDecision, QuotaDraw, QuotaRequest, QuotaUsage } from '../store.js';

type Reply = string | number | null | Reply[];
type Arg = string | number;

/** What the quota code needs of the store it lives in: its connection, keys, clock and script runners. */
export interface QuotaRunner {
  client: RedisClient;
  keys: KeySpace;
  clustered: boolean;
  now: () => number;
  /** Runs a script wrapped by lua/operations.ts with its operation record, re-running it (same attempt) after a lost reply. */
  once(script: ScriptName, opKey: string, attempt: Attempt | undefined, keys: string[], args: Arg[]): Promise<Reply>;
  run(script: ScriptName, keys: string[], args: Arg[]): Promise<Reply>;
  /** One store operation within its budget; any Redis failure becomes TB_ERR_STORE_UNAVAILABLE. */
  call<T>(op: string, work: () => Promise<T>, budgetMs?: number): Promise<T>;
}

/** Cluster stale sweep: hold-index shards read per pass (all 16 384 slots every 16 passes, ~48 s at 3 s ticks). */
const QUOTA_WALK_SLICE = 1_024;
/** Commands per pipeline, so none waits past the command timeout on a busy server. */
const PIPELINE_CHUNK = 256;
/** The sweep reads many records. */
const SWEEP_BUDGET_MS = 10_000;

/** When a hold part may be forgotten even if nobody concluded it: by then its counters are gone too, or its deadline long passed. */
function holdEnd(deadline: number, counters: readonly QuotaCounter[]): number {
  let end = deadline + QUOTA_GRACE_MS;
  for (const counter of counters) end = Math.max(end, counterEnd(counter));
  return end;
}

/** Hold parts in the KEYS and ARGV layout of quotas.lua.ts, to append after a script's own. */
export interface QuotaParts {
  keys: string[];
  args: Arg[];
}

/** The draw layout: one part per subject, in subject order (quota-policy.ts `bySubject`). */
export function drawParts(keys: KeySpace, clustered: boolean, request: Pick<QuotaRequest, 'holdId' | 'deadline'>, groups: readonly [string, QuotaDraw[]][]): QuotaParts {
  const out: QuotaParts = { keys: [], args: [groups.length] };
  for (const [subject, draws] of groups) {
    out.keys.push(keys.quotaHold(subject, request.holdId), keys.quotaHoldIndexOf(subject, clustered), ...draws.map((draw) => keys.quotaCounter(subject, counterField(draw))));
    out.args.push(quotaHoldMember(request.holdId, subject), request.deadline, holdEnd(request.deadline, draws), draws.length);
    for (const draw of draws) out.args.push(counterField(draw), draw.calls, draw.credits, draw.maxCalls ?? '', draw.maxCredits ?? '', counterEnd(draw), windowEnd(draw));
  }
  return out;
}

/** The conclude layout: one part per subject, each counter once. */
export function holdParts(keys: KeySpace, clustered: boolean, holdId: string, groups: readonly [string, QuotaCounter[]][]): QuotaParts {
  const out: QuotaParts = { keys: [], args: [groups.length] };
  for (const [subject, counters] of groups) {
    const fields = distinct(counters).map(counterField);
    out.keys.push(keys.quotaHold(subject, holdId), keys.quotaHoldIndexOf(subject, clustered), ...fields.map((field) => keys.quotaCounter(subject, field)));
    out.args.push(quotaHoldMember(holdId, subject), fields.length, ...fields);
  }
  return out;
}

/** The refusal a reserve script names by part and draw position (1-based). */
export function exceededAt(groups: readonly [string, QuotaDraw[]][], part: number, position: number, usedCalls: unknown, usedCredits: unknown): Extract<QuotaDecision, { kind: 'exceeded' }> {
  const [subject, draws] = groups[part - 1] ?? ['', []];
  const draw = draws[position - 1];
  if (!draw) throw new GatewayError('TB_ERR_INTERNAL', `unexpected quota refusal from Redis: part ${part}, draw ${position}`);
  return { kind: 'exceeded', name: draw.name, subject, resetsAt: windowEnd(draw), usedCalls: Number(usedCalls), usedCredits: Number(usedCredits) };
}

/** Each counter once, in the order given (a request may draw on one counter twice; its hold part keeps the sum). */
function distinct<T extends QuotaCounter>(counters: readonly T[]): T[] {
  if (counters.length < 2) return counters.slice();
  const seen = new Map<string, T>();
  for (const counter of counters) if (!seen.has(counterField(counter))) seen.set(counterField(counter), counter);
  return [...seen.values()];
}

export class RedisQuotas {
  /** Cluster stale sweep: the first slot of the next slice of its rotating walk. */
  private walkCursor = 0;

  constructor(private readonly redis: QuotaRunner) {}

  async reserveQuotas(request: QuotaRequest): Promise<QuotaDecision> {
    for (const draw of request.draws) checkDraw(draw);
    const attempt = request.attempt ?? newAttempt();
    return this.redis.call('reserveQuotas', async () => {
      const drawn: [string, QuotaDraw[]][] = [];
      for (const [subject, draws] of bySubject(request.draws)) {
        const decision = await this.reservePart(subject, draws, request, attempt);
        if (decision === 'drawn' || decision === 'already') {
          // A part that was already here belongs to an earlier call of this hold: never given back here.
          if (decision === 'drawn') drawn.push([subject, draws]);
          continue;
        }
        // All or nothing: give back what the earlier subjects drew. The give-back has its own
        // operation record, so a re-run of this attempt replays it too and never gives back twice.
        await Promise.all(drawn.map(([drawnSubject, drawnDraws]) => this.concludePart(drawnSubject, request.holdId, drawnDraws, 'release', 'qu', attempt)));
        return decision;
      }
      return { kind: 'held' };
    });
  }

  async concludeQuotas(holdId: string, counters: QuotaCounter[], outcome: 'commit' | 'release', attempt?: Attempt): Promise<void> {
    const id = attempt ?? newAttempt();
    await this.redis.call('concludeQuotas', () => Promise.all(bySubject(counters).map(([subject, group]) => this.concludePart(subject, holdId, group, outcome, 'qc', id))));
  }

  async holdQuotas(holdId: string, counters: QuotaCounter[], deadline: number): Promise<boolean> {
    const now = this.redis.now();
    const { keys, clustered } = this.redis;
    const moved = await this.redis.call('holdQuotas', () =>
      Promise.all(
        bySubject(counters).map(([subject, group]) =>
          this.redis.run('tbHoldQuotas', [keys.quotaHold(subject, holdId), keys.quotaHoldIndexOf(subject, clustered)], [quotaHoldMember(holdId, subject), deadline, holdEnd(deadline, group), now]),
        ),
      ),
    );
    return moved.every((reply) => Number(reply) === 1);
  }

  async releaseStaleQuotas(now: number, limit: number): Promise<number> {
    if (limit <= 0) return 0;
    const { client, keys, clustered } = this.redis;
    return this.redis.call(
      'releaseStaleQuotas',
      async () => {
        const members = clustered ? await this.staleInShards(now, limit) : await client.zrangebyscore(keys.quotaHoldIndexOf('', false), '-inf', `(${now}`, 'LIMIT', 0, limit);
        const released = await Promise.all(
          members.map(async (member) => {
            const parsed = parseQuotaHoldMember(member);
            if (!parsed) return 0;
            const { holdId, subject } = parsed;
            const hold = keys.quotaHold(subject, holdId);
            // The part names its counters; the script re-checks the deadline and releases atomically.
            const fields = Object.keys(await client.hgetall(hold)).filter((field) => field !== 'd');
            const counters = fields.map((field) => keys.quotaCounter(subject, field));
            const reply = await this.redis.run('tbReleaseStaleQuotas', [hold, keys.quotaHoldIndexOf(subject, clustered), ...counters], [member, now, ...fields]);
            return Number(reply);
          }),
        );
        return released.reduce((sum, n) => sum + n, 0);
      },
      SWEEP_BUDGET_MS,
    );
  }

  async quotaUsage(counters: QuotaCounter[]): Promise<QuotaUsage[]> {
    const { client, keys } = this.redis;
    const used = await this.redis.call('quotaUsage', () => Promise.all(counters.map((counter) => client.hmget(keys.quotaCounter(counter.subject, counterField(counter)), 'n', 'c'))));
    return counters.map((counter, i) => {
      const [calls, credits] = used[i] ?? [];
      return { name: counter.name, subject: counter.subject, windowMs: counter.windowMs, windowStart: counter.windowStart, calls: Number(calls ?? 0), credits: Number(credits ?? 0) };
    });
  }

  private async reservePart(subject: string, draws: QuotaDraw[], request: QuotaRequest, attempt: Attempt): Promise<'drawn' | 'already' | Extract<QuotaDecision, { kind: 'exceeded' }>> {
    const { keys, clustered } = this.redis;
    const groups: [string, QuotaDraw[]][] = [[subject, draws]];
    const parts = drawParts(keys, clustered, request, groups);
    const opKey = keys.quotaOperation(subject, 'qr', request.holdId);
    const reply = await this.redis.once('tbReserveQuotas', opKey, attempt, parts.keys, [this.redis.now(), ...parts.args]);
    const [kind, position, usedCalls, usedCredits] = Array.isArray(reply) ? reply : [reply];
    if (kind === 'held') return Number(position) === 1 ? 'drawn' : 'already';
    if (kind !== 'exceeded') throw new GatewayError('TB_ERR_INTERNAL', `unexpected reserve-quotas reply from Redis: ${String(kind)}`);
    return exceededAt(groups, 1, Number(position), usedCalls, usedCredits);
  }

  /** Concludes one subject's part of a hold; `opKind` keeps the give-back of a refused request apart from the caller's conclusion. */
  private async concludePart(subject: string, holdId: string, counters: QuotaCounter[], outcome: 'commit' | 'release', opKind: string, attempt: Attempt): Promise<void> {
    const { keys, clustered } = this.redis;
    const parts = holdParts(keys, clustered, holdId, [[subject, counters]]);
    await this.redis.once('tbConcludeQuotas', keys.quotaOperation(subject, opKind, holdId), attempt, parts.keys, [outcome, ...parts.args]);
  }

  /**
   * Cluster: stale hold parts from the next QUOTA_WALK_SLICE hold-index shards of a rotating walk over
   * all 16 384 slots (each master asked about its own slots, pipelined). A stale hold only keeps a cap
   * fuller than it is (fail closed), so a full walk's delay (16 passes) costs no money.
   */
  private async staleInShards(now: number, limit: number): Promise<string[]> {
    const cluster = this.redis.client as Cluster;
    const slots = Array.from({ length: QUOTA_WALK_SLICE }, (_, i) => (this.walkCursor + i) % SLOT_COUNT);
    this.walkCursor = (this.walkCursor + QUOTA_WALK_SLICE) % SLOT_COUNT;
    const found: string[] = [];
    await Promise.all(
      [...slotsByMaster(cluster, slots)].map(async ([node, nodeSlots]) => {
        for (let start = 0; start < nodeSlots.length; start += PIPELINE_CHUNK) {
          const pipeline = node.pipeline();
          for (const slot of nodeSlots.slice(start, start + PIPELINE_CHUNK)) pipeline.zrangebyscore(this.redis.keys.quotaHoldShard(slot), '-inf', `(${now}`, 'LIMIT', 0, limit);
          // A slot that moved since the slot map was read answers MOVED: it is read on a later walk.
          for (const [error, reply] of (await pipeline.exec()) ?? []) if (!error && Array.isArray(reply)) found.push(...(reply as string[]));
        }
      }),
    );
    return found.slice(0, limit);
  }
}
