// How both stores name a task record: a hash of the endpoint and the upstream's task id (the id is any
// text an upstream chose, so it is never put in a key as it is), and how long a record outlives its deadline.
import { createHash } from 'node:crypto';
import type { TaskKey } from './store.js';

/** A record is kept a little past its deadline so a late tasks/result finds it (and is refused) rather than passing as unpriced. */
export const TASK_RECORD_GRACE_MS = 10 * 60_000;

export function taskHash(key: TaskKey): string {
  return createHash('sha256').update(key.scope).update('\n').update(key.taskId).digest('base64url');
}
