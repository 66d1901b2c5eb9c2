// Priced requests (SPEC §6.5: one key per upstream session, its own slot, one field per request) and
// tasks holding a reservation (SPEC §24) in the Redis store; the scripts are in requests.lua.ts.
// A task's record is written first (a lookup must find it before the client can ask), then the
// reservation is held; if that finds it gone, the record goes too. A crash in between leaves a
// record whose reservation the reconciler releases at its first deadline: the task's result is then
// withheld (its commit finds nothing), never delivered free. With durability `replicated` both writes
// must be acknowledged before the task id goes out: a hold a failover erased would make the task's
// result pass as an unpriced task's.
import { GatewayError } from '../../errors.js';
import { indexMember } from '../keys.js';
import type { PricedRequestKey, PricedRequestRecord, TaskKey, TaskRecord } from '../store.js';
import { TASK_RECORD_GRACE_MS, taskHash } from '../task-keys.js';
import { RedisCore, type Reply } from './core.js';

export class RedisRequests {
  constructor(private readonly core: RedisCore) {}

  async registerPricedRequest(key: PricedRequestKey, record: PricedRequestRecord, ttlMs: number): Promise<void> {
    const hash = this.core.keys.pricedRequests(key.session);
    await this.core.call('registerPricedRequest', () => this.core.run('tbRegisterPricedRequest', [hash], [key.requestId, JSON.stringify(record), ttlMs, this.core.now()]));
  }

  async getPricedRequest(key: PricedRequestKey): Promise<PricedRequestRecord | null> {
    return parsePricedRequest(await this.core.call('getPricedRequest', () => this.core.client.hget(this.core.keys.pricedRequests(key.session), key.requestId)));
  }

  async concludePricedRequest(key: PricedRequestKey, state: 'committed' | 'released', remaining: number | null): Promise<PricedRequestRecord | null> {
    const hash = this.core.keys.pricedRequests(key.session);
    return parsePricedRequest(await this.core.call('concludePricedRequest', () => this.core.run('tbConcludePricedRequest', [hash], [key.requestId, state, remaining ?? ''])));
  }

  async holdTask(key: TaskKey, record: TaskRecord): Promise<boolean> {
    const now = this.core.now();
    const taskKey = this.core.keys.task(taskHash(key));
    const k = this.core.keys.handle(record.handleHash);
    // Cluster: the task's record and the handle live in different slots, so both masters are waited on.
    const mark = await this.core.mark(taskKey, k.handle);
    await this.core.call('holdTask', () => this.core.client.set(taskKey, JSON.stringify(record), 'PX', Math.max(1, record.deadline - now + TASK_RECORD_GRACE_MS)));
    const index = this.core.keys.reservationIndexOf(record.handleHash, this.core.clustered);
    const member = indexMember(record.handleHash, record.reservationId);
    const held = Number(await this.core.call('holdTask', () => this.core.run('tbHoldTaskReservation', [k.handle, k.reservations, index], [record.reservationId, member, record.deadline, now])));
    if (held !== 1) {
      await this.core.call('holdTask', () => this.core.client.del(taskKey));
      return false;
    }
    if (!(await this.core.replicated(mark))) {
      // Fail closed: the task id is withheld and the call refused; the paywall gives the credit back.
      this.core.countUnreplicated('task');
      throw new GatewayError('TB_ERR_STORE_UNAVAILABLE', `the task's hold was not acknowledged by ${this.core.durabilityText()}, so its id is not handed out (store.redis.durability: replicated)`);
    }
    return true;
  }

  async getTask(key: TaskKey): Promise<TaskRecord | null> {
    const raw = await this.core.call('getTask', () => this.core.client.get(this.core.keys.task(taskHash(key))));
    return raw ? (JSON.parse(raw) as TaskRecord) : null;
  }

  async recordConcludedTask(key: TaskKey, concluded: TaskRecord): Promise<boolean> {
    const ttlMs = Math.max(1, concluded.deadline - this.core.now() + TASK_RECORD_GRACE_MS);
    return (await this.core.call('recordConcludedTask', () => this.core.client.set(this.core.keys.task(taskHash(key)), JSON.stringify(concluded), 'PX', ttlMs, 'NX'))) === 'OK';
  }

  async concludeTask(key: TaskKey, concluded: TaskRecord): Promise<boolean> {
    return Number(await this.core.call('concludeTask', () => this.core.run('tbConcludeTask', [this.core.keys.task(taskHash(key))], [JSON.stringify(concluded)]))) === 1;
  }
}

function parsePricedRequest(raw: Reply | undefined): PricedRequestRecord | null {
  return typeof raw === 'string' ? (JSON.parse(raw) as PricedRequestRecord) : null;
}
