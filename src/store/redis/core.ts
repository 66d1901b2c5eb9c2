// The Redis store's shared parts (SPEC §8): the client and its scripts, the key space, the mode, the
// clock, and the discipline every concern's calls go through: a budget per call (any Redis failure
// becomes TB_ERR_STORE_UNAVAILABLE), a money script re-run under its operation record when its reply
// is lost, WAIT for the durability asked for, and the count of writes acted on without it. The
// concerns (handles.ts, charges.ts, …) hold one RedisCore between them; ../redis.ts is the Store
// they make together.
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { ReplyError, type Cluster, type Redis } from 'ioredis';
import { GatewayError } from '../../errors.js';
import { withBudget } from '../../io/budget.js';
import type { Logger } from '../../observability/logger.js';
import { KeySpace } from '../keys.js';
import { SCRIPTS, type ScriptName } from '../lua/index.js';
import { errorMessage, type RedisClient } from '../redis-connection.js';
import { keySlot, SLOT_COUNT } from '../slots.js';
import type { Attempt, ChargeRecord } from '../store.js';

/** Upper bound on one store call, whatever ioredis does underneath (Cluster redirections, retries). */
export const CALL_BUDGET_MS = 1_000;
/** Operator listings read many records; they get longer. */
export const LISTING_BUDGET_MS = 10_000;
/** Commands per pipeline, so no command in it waits past the 500 ms command timeout on a busy server. */
export const PIPELINE_CHUNK = 256;
/** `handle show <fingerprint>` scans every handle key: an operator can wait. */
export const ADMIN_SCAN_BUDGET_MS = 60_000;
export const SCAN_COUNT = 1_000;
/** A money script whose reply was lost is run again (same attempt) this often until the call's budget ends. */
const RERUN_GAP_MS = 50;
/** Server errors after which a script did not run, so running it again is only a retry: a failover or restart under way. */
const NOT_RUN_REPLY = /^(READONLY|LOADING|MASTERDOWN|CLUSTERDOWN|TRYAGAIN|NOREPLICAS)\b/;

/** Where a write went (RedisCore.mark): per key, its node and that node's socket when the write was sent. */
export type WriteMark = { key: string; node: Redis | null; stream: object | null }[];

/**
 * Writes the gateway must know are on replicas before acting on them (SPEC §21), by what happens when
 * WAIT says they are not: `charge` (its link is not shown: the charge is abandoned), `claim` and
 * `x402_claim` (treated as not done: the caller is refused, the reconciler or payer comes back),
 * `task` (a paid task's hold: its id is withheld, the call refused), `adjust` (the operator is told), `commit`, `expire` and `x402_settle` (acted on: money already
 * moved; counted and logged so an operator sees what a failover may have erased).
 */
export type ReplicatedWrite = 'charge' | 'claim' | 'commit' | 'adjust' | 'expire' | 'task' | 'x402_claim' | 'x402_settle';

/** `store.redis.durability` and its WAIT arguments. */
export interface Durability {
  replicas: number;
  timeoutMs: number;
}

export type Reply = string | number | null | Reply[];
export type Arg = string | number;

export class RedisCore {
  /** Writes WAIT did not see on enough replicas, by kind (tollbooth_store_unreplicated_writes_total). */
  private readonly unreplicated = new Map<ReplicatedWrite, number>();

  constructor(
    readonly client: RedisClient,
    readonly keys: KeySpace,
    /** In Cluster mode global indexes live in other slots: they are written by companion commands. */
    readonly clustered: boolean,
    readonly now: () => number,
    readonly logger: Logger,
    readonly ledgerRetentionMs: number,
    /** null: durability none (no WAIT). */
    readonly durability: Durability | null,
  ) {
    for (const [name, lua] of Object.entries(SCRIPTS)) client.defineCommand(name, { lua });
  }

  indexAdd(index: string, score: number, member: string, liveUntil: number, now: number, mode: 'end' | ''): Promise<Reply> {
    return this.run('tbIndexAdd', [index], [score, member, liveUntil, now, mode]);
  }

  /** Best-effort index upkeep that must not delay or fail the call it follows. */
  background(op: string, work: Promise<unknown>): void {
    work.catch((err: unknown) => this.logger.debug({ op, err: errorMessage(err) }, 'redis index upkeep failed; the reconciler will catch up'));
  }

  /**
   * Runs a money script under its operation record (lua/operations.ts): when its reply is lost (the
   * connection closed or timed out, a failover is under way) it is run again with the same attempt
   * until the call's budget ends, and a run that finds the first run's effect answers as it did.
   */
  async once(script: ScriptName, opKey: string, attempt: Attempt | undefined, keys: string[], args: Arg[]): Promise<Reply> {
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
   * Where a write is about to run, taken before it is sent: per key, the node serving it (standalone
   * and Sentinel: the one client; Cluster: the master of the key's slot by the client's slot map) and
   * that node's current socket. `replicated` trusts a WAIT only on that same socket: a reconnect in
   * between (Sentinel kills a demoted primary's clients; ioredis then finds the new primary) would
   * send the WAIT on a fresh connection that wrote nothing, and WAIT answers such a connection at
   * once with every replica — an acknowledgement of nothing.
   */
  async mark(...keys: [string, ...string[]]): Promise<WriteMark> {
    if (!this.durability) return [];
    return Promise.all(
      keys.map(async (key) => {
        const node = this.clustered ? masterOfSlot(this.client as Cluster, keySlot(key)) : (this.client as Redis);
        // A Cluster node the client never talked to has no socket yet: open it (a command would only start
        // the connect and be refused, the offline queue being off), so the write goes where the mark says.
        if (node?.status === 'wait') await node.connect().catch(() => undefined);
        return { key, node, stream: node?.stream ?? null };
      }),
    );
  }

  /**
   * SPEC §21: with durability `replicated`, WAIT on the connections that ran the write (standalone and
   * Sentinel have one; Cluster: the master serving each written key's slot, every one of them at once,
   * because a write that spans slots — a charge and the provider-ref key a webhook finds it by — is
   * only safe when all its parts are). True when enough replicas acknowledged on every node in time,
   * over the very sockets the write went through (see `mark`), or with durability `none`; a WAIT that
   * fails counts as not acknowledged.
   */
  async replicated(mark: WriteMark): Promise<boolean> {
    if (!this.durability) return true;
    // Cluster: the key moved to another master since the mark (a failover, a MOVED): its write is not where we would wait.
    if (this.clustered && mark.some((part) => masterOfSlot(this.client as Cluster, keySlot(part.key)) !== part.node)) return false;
    const streams = new Map<Redis, object | null>();
    for (const part of mark) {
      if (!part.node) return false;
      if (streams.has(part.node) && streams.get(part.node) !== part.stream) return false;
      streams.set(part.node, part.stream);
    }
    const durability = this.durability;
    const acknowledged = await Promise.all([...streams].map(([node, stream]) => (stream ? this.waitRounds(node, durability).wait(stream) : Promise.resolve(false))));
    return acknowledged.every(Boolean);
  }

  /** One WaitRounds per connection (Cluster: per master node object; a replaced node's goes with it). */
  private readonly rounds = new WeakMap<Redis, WaitRounds>();

  private waitRounds(node: Redis, durability: Durability): WaitRounds {
    let rounds = this.rounds.get(node);
    if (!rounds) this.rounds.set(node, (rounds = new WaitRounds(node, durability)));
    return rounds;
  }

  /**
   * WAIT counts replicas, not which ones: with fewer than all of a primary's replicas asked for, a
   * write can be acknowledged by a replica that is not the one promoted (or, after a paused primary
   * resumes, by a replica Sentinel is about to resync from the new primary) and still be lost
   * (docs/reliability.md, "How many replicas to wait for"). Fewer replicas than asked: every money
   * write waits the whole waitTimeout and counts as not acknowledged. Either is logged at start; the
   * gateway runs on.
   */
  async reportReplicaCoverage(): Promise<void> {
    if (!this.durability) return;
    const asked = this.durability.replicas;
    const counts = await Promise.all(
      this.masters().map(async (node) => {
        const info = await this.call('replicaCoverage', () => node.info('replication')).catch(() => '');
        const connected = /^connected_slaves:(\d+)/m.exec(info)?.[1];
        return connected === undefined ? null : Number(connected);
      }),
    );
    const known = counts.filter((count): count is number => count !== null);
    if (known.length === 0) return;
    const most = Math.max(...known);
    const least = Math.min(...known);
    if (least < asked) {
      this.logger.warn(
        { evt: 'store_replicas', waitReplicas: asked, connectedReplicas: least },
        `store.redis.waitReplicas is ${asked} but a primary has ${least} replica${least === 1 ? '' : 's'} connected: every money write will wait ${this.durability.timeoutMs} ms and count as not acknowledged (links refused, grants redone by the reconciler) until enough replicas connect`,
      );
    } else if (most > asked) {
      this.logger.warn(
        { evt: 'store_replicas', waitReplicas: asked, connectedReplicas: most },
        `store.redis.waitReplicas is ${asked} but a primary has ${most} replicas: a failover may promote a replica that never acknowledged a write, or resync the one that did, and acknowledged money writes can be lost; set waitReplicas to ${most} (docs/reliability.md, "How many replicas to wait for")`,
      );
    }
  }

  countUnreplicated(write: ReplicatedWrite): void {
    this.unreplicated.set(write, (this.unreplicated.get(write) ?? 0) + 1);
  }

  /** Counts a write that was acted on without its replicas, and logs it with the handle's fingerprint. */
  async reportUnreplicated(write: ReplicatedWrite, handleHash: string): Promise<void> {
    this.countUnreplicated(write);
    const fingerprint = await this.client.hget(this.keys.handle(handleHash).handle, 'fp').catch(() => null);
    this.logger.warn(
      { evt: 'store_unreplicated', op: write, fingerprint: fingerprint ?? '', replicas: this.durability?.replicas, waitTimeoutMs: this.durability?.timeoutMs },
      `a ${write} was not acknowledged by ${this.durabilityText()}: a failover now may erase it (the result was delivered)`,
    );
  }

  durabilityText(): string {
    const { replicas = 0, timeoutMs = 0 } = this.durability ?? {};
    return `${replicas} replica${replicas === 1 ? '' : 's'} within ${timeoutMs} ms`;
  }

  /** Writes acted on without the replicas durability asked for, by kind, since this store was opened. */
  unreplicatedWrites(): Record<string, number> {
    return Object.fromEntries(this.unreplicated);
  }

  run(script: ScriptName, keys: string[], args: Arg[]): Promise<Reply> {
    const command = (this.client as unknown as Record<ScriptName, (numKeys: number, ...rest: Arg[]) => Promise<Reply>>)[script];
    return command.call(this.client, keys.length, ...keys, ...args);
  }

  /** Runs one store operation within the call budget; any Redis failure becomes TB_ERR_STORE_UNAVAILABLE. */
  async call<T>(op: string, work: () => Promise<T>, budgetMs = CALL_BUDGET_MS): Promise<T> {
    try {
      return await withBudget(work(), budgetMs, `no answer within ${budgetMs} ms`);
    } catch (err) {
      if (err instanceof GatewayError) throw err;
      throw new GatewayError('TB_ERR_STORE_UNAVAILABLE', `the Redis store is unavailable (${op}): ${errorMessage(err)}`, { cause: err });
    }
  }

  /** Standalone: the one server; Cluster: every master (SCAN is per node). */
  masters(): Redis[] {
    return this.clustered ? (this.client as Cluster).nodes('master') : [this.client as Redis];
  }

  /** SCAN MATCH on one node, one batch of keys at a time (an operator verb: each call gets the admin budget). */
  async *scan(node: Redis, pattern: string): AsyncIterable<string[]> {
    let cursor = '0';
    do {
      const [next, keys] = await this.call('scan', () => node.scan(cursor, 'MATCH', pattern, 'COUNT', SCAN_COUNT), ADMIN_SCAN_BUDGET_MS);
      cursor = next;
      if (keys.length > 0) yield keys;
    } while (cursor !== '0');
  }
}

/**
 * WAIT blocks the connection it is sent on, server side, until the replicas answer or the timeout
 * passes, and every process shares one connection per node: one WAIT per money write put them in a
 * line, so with a replica lagging each waited its whole timeout after the one before (a gateway at
 * 100 ms made at most 10 money writes a second: `npm run chaos`, waitReplicas 2, 12 paid calls/s).
 * One WAIT covers every write the connection made before it, so the writes that finish while a WAIT
 * is out share the next one: at most one WAIT in flight per connection, each answering every caller
 * that joined before it was sent.
 */
class WaitRounds {
  private waiting: { stream: object; resolve: (acknowledged: boolean) => void }[] = [];
  private running = false;

  constructor(
    private readonly node: Redis,
    private readonly durability: Durability,
  ) {}

  /** `stream`: the socket the caller's write went through; a round on another socket does not answer it. */
  wait(stream: object): Promise<boolean> {
    return new Promise((resolve) => {
      this.waiting.push({ stream, resolve });
      if (!this.running) void this.run();
    });
  }

  private async run(): Promise<void> {
    const { replicas, timeoutMs } = this.durability;
    this.running = true;
    while (this.waiting.length > 0) {
      const round = this.waiting.splice(0);
      const sentOn: object = this.node.stream;
      // A WAIT that fails counts as not acknowledged.
      const acknowledged = round.some((waiter) => waiter.stream === sentOn) ? await this.node.call('WAIT', replicas, timeoutMs).then(Number, () => 0) : 0;
      const sameSocket = this.node.stream === sentOn;
      for (const waiter of round) waiter.resolve(sameSocket && waiter.stream === sentOn && acknowledged >= replicas);
    }
    this.running = false;
  }
}

/**
 * This process's attempt ids: a random prefix drawn once, then a counter. An attempt id only has to
 * differ from every other caller's (it is not a secret: the store never takes one from a client), and
 * a CSPRNG draw per money script was ≈ 3 % of a paid Redis call's gateway CPU (bench/RESULTS.md).
 */
const ATTEMPT_PREFIX = randomBytes(9).toString('base64url');
let attemptSeq = 0;
export const newAttempt = (): Attempt => `${ATTEMPT_PREFIX}${(++attemptSeq).toString(36)}`;

export const asArray = (reply: Reply): Reply[] => (Array.isArray(reply) ? reply : [reply]);

export function parseCharge(raw: Reply | undefined): ChargeRecord | null {
  return typeof raw === 'string' ? (JSON.parse(raw) as ChargeRecord) : null;
}

/** `size` slots of a rotating walk over every slot, from `cursor` on. */
export function walkSlice(cursor: number, size: number): number[] {
  return Array.from({ length: size }, (_, i) => (cursor + i) % SLOT_COUNT);
}

/** The master serving a slot, by the client's slot map: the connection a script on that slot went through. */
function masterOfSlot(cluster: Cluster, slot: number): Redis | null {
  const address = cluster.slots[slot]?.[0];
  return cluster.nodes('master').find((node) => `${node.options.host}:${node.options.port}` === address) ?? null;
}

/** Slots grouped by the master serving them, by the client's slot map (a slot with no known master is left out). */
export function slotsByMaster(cluster: Cluster, slots: Iterable<number>): Map<Redis, number[]> {
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
