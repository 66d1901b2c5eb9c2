// How both stores name a task record: a hash of the endpoint and the upstream's task id (the id is any
// text an upstream chose, so it is never put in a key as it is), and how long a record outlives its deadline.
import { createHash } from 'node:crypto';
import type { TaskKey } from './store.js';

/**
 * How long a record outlives its deadline. A task whose credit was released (failed, cancelled, or past
 * the deadline) keeps its record so a result asked for later finds it and is refused (deadline_exceeded)
 * rather than forwarded as an unpriced task's: upstreams keep a finished task's result for its ttl, so a
 * short grace would let a released task's result through for free once the record lapsed. Seven days
 * outlasts the task ttls of the servers we know. A concluded record says how (committed, with the receipt's
 * remaining, or released), so a later or concurrent read of the task answers as its first conclusion did.
 */
export const TASK_RECORD_GRACE_MS = 7 * 24 * 60 * 60_000;

export function taskHash(key: TaskKey): string {
  return createHash('sha256').update(key.scope).update('\n').update(key.taskId).digest('base64url');
}
