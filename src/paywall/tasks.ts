// Tasks (a priced tools/call answered with a task, 2025-11-25 or the 2026-07-28 tasks extension): who
// owns one, and what a tasks/* answer says about the task's end. The paywall (decide.ts) holds the
// reservation at creation and commits or releases it here, on the task's terminal outcome.
import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { isObject, type JsonRpcResponse } from '../mcp/jsonrpc.js';
import type { Store, TaskKey } from '../store/store.js';

/** The task methods whose answers can end a priced task. */
export type TaskMethod = 'tasks/result' | 'tasks/get' | 'tasks/cancel';

/**
 * The creator a task is bound to: the principal in oauth mode, else the legacy session (hashed: the
 * store never holds a session id), else '' (a stateless caller: only the task id, which the upstream
 * makes unguessable, stands for it).
 */
export function taskOwner(principal: string | null, sessionId: string | undefined): string {
  if (principal !== null) return `p:${principal}`;
  if (sessionId !== undefined) return `s:${createHash('sha256').update(sessionId).digest('base64url')}`;
  return '';
}

/**
 * What an answer to a tasks/* request says about the task: 'result' (its result is delivered: the
 * tool's own result, or a terminal tasks/get carrying it), 'failed', 'cancelled', or 'open' (still
 * running, or an answer that delivers nothing).
 */
export type TaskEnd = { kind: 'result'; succeeded: boolean } | { kind: 'failed' } | { kind: 'cancelled' } | { kind: 'open' };

export function taskEnd(method: TaskMethod, message: JsonRpcResponse): TaskEnd {
  const result = message.result;
  if (method === 'tasks/result') {
    // The tool's result, or the JSON-RPC error the tool ended with.
    if (!isObject(result)) return { kind: 'failed' };
    return { kind: 'result', succeeded: result.isError !== true };
  }
  if (!isObject(result)) return { kind: 'open' };
  const task = isObject(result.task) ? result.task : result;
  const status = task.status;
  if (status === 'failed') return { kind: 'failed' };
  if (status === 'cancelled') return { kind: 'cancelled' };
  // 2026-07-28 tasks/get carries the result of a completed task (no tasks/result there); a 2025-11-25 one only says "completed".
  if (method === 'tasks/get' && status === 'completed' && isObject(task.result)) return { kind: 'result', succeeded: task.result.isError !== true };
  return { kind: 'open' };
}

/** How long a read that lost the race to conclude a task waits for the winner's record (the winner writes it right after its commit). */
const CONCLUSION_WAIT_MS = 2_000;
const CONCLUSION_POLL_MS = 20;

/**
 * The conclusion another read of the same task recorded (§24): a tasks/result and a terminal tasks/get
 * (or two reads) may race, and only one of them moves the credits; the other finds the reservation gone
 * and learns here whether the result was paid for. Null when no conclusion shows up in time (the winner
 * crashed between its commit and its record, or the reconciler released the reservation): the caller
 * then withholds the result. `wait` false: one read, no waiting (a task past its deadline was released).
 */
export async function recordedConclusion(
  store: Pick<Store, 'getTask'>,
  key: TaskKey,
  wait: boolean,
): Promise<{ state: 'committed' | 'released'; remaining: number | null } | null> {
  // Counted polls, not a clock: the bound is on how long this read waits, whatever time the gateway's clock says.
  for (let polls = wait ? CONCLUSION_WAIT_MS / CONCLUSION_POLL_MS : 0; ; polls--) {
    const record = await store.getTask(key);
    if (record?.state) return { state: record.state, remaining: record.remaining ?? null };
    if (!record || polls <= 0) return null;
    await sleep(CONCLUSION_POLL_MS);
  }
}
