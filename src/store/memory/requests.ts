// Priced requests (SPEC §6.5: session hash → its forwarded priced requests, one lifetime per
// session) and tasks holding a reservation (SPEC §24) in the memory store.
import type { PricedRequestKey, PricedRequestRecord, TaskKey, TaskRecord } from '../store.js';
import { TASK_RECORD_GRACE_MS, taskHash } from '../task-keys.js';
import { MemoryCore } from './core.js';

export class MemoryRequests {
  constructor(private readonly core: MemoryCore) {}

  async registerPricedRequest(key: PricedRequestKey, record: PricedRequestRecord, ttlMs: number): Promise<void> {
    const now = this.core.now();
    let session = this.core.pricedRequests.get(key.session);
    if (!session || session.expiresAt <= now) this.core.pricedRequests.set(key.session, (session = { expiresAt: 0, requests: new Map() }));
    session.requests.set(key.requestId, { ...record });
    // One lifetime per session, as the Redis hash has: it is never shortened.
    session.expiresAt = Math.max(session.expiresAt, now + ttlMs);
  }

  async getPricedRequest(key: PricedRequestKey): Promise<PricedRequestRecord | null> {
    const record = this.pricedRequest(key);
    return record ? { ...record } : null;
  }

  async concludePricedRequest(key: PricedRequestKey, state: 'committed' | 'released', remaining: number | null): Promise<PricedRequestRecord | null> {
    const record = this.pricedRequest(key);
    if (!record) return null;
    if (record.state === 'in_flight') {
      record.state = state;
      record.remaining = state === 'committed' ? remaining : null;
    }
    return { ...record };
  }

  private pricedRequest(key: PricedRequestKey): PricedRequestRecord | null {
    const session = this.core.pricedRequests.get(key.session);
    if (!session) return null;
    if (session.expiresAt > this.core.now()) return session.requests.get(key.requestId) ?? null;
    this.core.pricedRequests.delete(key.session);
    return null;
  }

  async holdTask(key: TaskKey, record: TaskRecord): Promise<boolean> {
    const now = this.core.now();
    const reservation = this.core.liveHandle(record.handleHash, now)?.reservations.get(record.reservationId);
    if (!reservation) return false;
    reservation.deadline = record.deadline; // the stale sweep releases it at the task deadline
    this.core.tasks.set(taskHash(key), { record: { ...record }, expiresAt: record.deadline + TASK_RECORD_GRACE_MS });
    return true;
  }

  async getTask(key: TaskKey): Promise<TaskRecord | null> {
    const entry = this.core.tasks.get(taskHash(key));
    if (!entry) return null;
    if (entry.expiresAt > this.core.now()) return { ...entry.record };
    this.core.tasks.delete(taskHash(key));
    return null;
  }

  async recordConcludedTask(key: TaskKey, concluded: TaskRecord): Promise<boolean> {
    if (await this.getTask(key)) return false;
    this.core.tasks.set(taskHash(key), { record: { ...concluded }, expiresAt: concluded.deadline + TASK_RECORD_GRACE_MS });
    return true;
  }

  async concludeTask(key: TaskKey, concluded: TaskRecord): Promise<boolean> {
    const entry = this.core.tasks.get(taskHash(key));
    if (!entry || entry.record.state) return false;
    entry.record = { ...concluded };
    return true;
  }
}
