// Idempotent results in Redis (SPEC §24): each operation is one script on the slot's one key
// (idempotency.lua.ts), so any number of replicas agree on which call of a slot runs and what it kept.
import { GatewayError } from '../../errors.js';
import type { IdempotentBegin, IdempotentClaim } from '../store.js';

type Reply = string | number | null | Reply[];
type Arg = string | number;
type IdempotencyScript = 'tbBeginIdempotent' | 'tbFinishIdempotent' | 'tbAbandonIdempotent';

/** What the Redis store lends this module: its key naming, its script runner and its call budget (store errors → TB_ERR_STORE_UNAVAILABLE). */
export interface RedisIdempotencyDeps {
  key: (slot: string) => string;
  run: (script: IdempotencyScript, keys: string[], args: Arg[]) => Promise<Reply>;
  call: <T>(op: string, work: () => Promise<T>) => Promise<T>;
}

const ms = (value: number): number => Math.max(1, Math.ceil(value));

export class RedisIdempotency {
  constructor(private readonly deps: RedisIdempotencyDeps) {}

  async begin(slot: string, claim: IdempotentClaim): Promise<IdempotentBegin> {
    const reply = await this.deps.call('beginIdempotent', () => this.deps.run('tbBeginIdempotent', [this.deps.key(slot)], [claim.scope, claim.owner, ms(claim.runningTtlMs)]));
    if (!Array.isArray(reply)) throw new GatewayError('TB_ERR_STORE_UNAVAILABLE', 'the Redis store answered beginIdempotent with something that is not a list');
    const [kind, result] = reply;
    if (kind === 'done' && typeof result === 'string') return { kind, result };
    if (kind === 'first' || kind === 'running' || kind === 'conflict') return { kind };
    throw new GatewayError('TB_ERR_STORE_UNAVAILABLE', `the Redis store answered beginIdempotent with an unknown kind (${String(kind)})`);
  }

  async finish(slot: string, owner: string, result: string, ttlMs: number): Promise<boolean> {
    return (await this.deps.call('finishIdempotent', () => this.deps.run('tbFinishIdempotent', [this.deps.key(slot)], [owner, result, ms(ttlMs)]))) === 1;
  }

  async abandon(slot: string, owner: string): Promise<void> {
    await this.deps.call('abandonIdempotent', () => this.deps.run('tbAbandonIdempotent', [this.deps.key(slot)], [owner]));
  }
}
