// What a tools/call result is, as far as paying for it goes. Most results are finished ("complete");
// two kinds are not: a 2026-07-28 `InputRequiredResult` (`resultType: "input_required"`: the server asks
// the client for more input, and the client's continuation — a new tools/call carrying `requestState` —
// is the call that finishes), and a task (2025-11-25 `CreateTaskResult` `{ task: { taskId, … } }`
// answering a task-augmented call; the 2026-07-28 tasks extension's `resultType: "task"`), whose result
// comes later. The paywall charges neither of them as a result.
import { isObject, type JsonRpcResponse } from './jsonrpc.js';

export type ResultKind = { kind: 'complete' } | { kind: 'input_required' } | { kind: 'task'; taskId: string };

const COMPLETE = { kind: 'complete' } as const;

/** A response's result kind; an error response, or anything unrecognised, is 'complete' (charged by the usual rules). */
export function resultKind(message: JsonRpcResponse): ResultKind {
  const result = message.result;
  if (!isObject(result)) return COMPLETE;
  if (result.resultType === 'input_required') return { kind: 'input_required' };
  const task = result.task;
  // 2026-07-28 puts the task fields beside resultType; 2025-11-25 nests them under `task`.
  const holder = result.resultType === 'task' ? (isObject(task) ? task : result) : result.resultType === undefined && isObject(task) ? task : null;
  if (holder && typeof holder.taskId === 'string' && holder.taskId.length > 0) return { kind: 'task', taskId: holder.taskId };
  return COMPLETE;
}
