// A 2026-07-28 upstream speaking the tasks extension by hand (no SDK implements its server side yet: the
// v2 SDK passes a handler's `resultType: "task"` through but has no task store for the 2026 revision).
// Stateless JSON over HTTP. Its tool `job` answers tools/call with a task, the task fields beside
// `resultType: "task"`; `tasks/get` answers the task's state and, once completed, carries its result
// (this revision has no tasks/result); `tasks/cancel` ends a running task as cancelled. Every result
// carries `resultType`, as 2026-07-28 requires. The test decides how each task ends (`finish`).
import type { IncomingMessage, ServerResponse } from 'node:http';
import { listenRecording, type ReceivedCall, type RecordingUpstream } from './paid-upstream.js';

type Json = Record<string, any>;
type Status = 'working' | 'completed' | 'failed' | 'cancelled';

export interface ModernTaskUpstream extends RecordingUpstream {
  finish(taskId: string, status: 'completed' | 'failed'): void;
}

export async function startModernTaskUpstream(): Promise<ModernTaskUpstream> {
  const calls: ReceivedCall[] = [];
  const bodies: string[] = [];
  const tasks = new Map<string, { status: Status; result?: Json; createdAt: string; lastUpdatedAt: string }>();
  let next = 0;

  const taskFields = (taskId: string): Json => {
    const task = tasks.get(taskId) as NonNullable<ReturnType<typeof tasks.get>>;
    return { taskId, status: task.status, createdAt: task.createdAt, lastUpdatedAt: task.lastUpdatedAt, ttlMs: 600_000, pollIntervalMs: 50 };
  };
  const answer = (message: Json): Json => {
    const { id, method, params = {} } = message;
    const error = (code: number, text: string): Json => ({ jsonrpc: '2.0', id, error: { code, message: text } });
    switch (method) {
      case 'tools/list':
        return { jsonrpc: '2.0', id, result: { resultType: 'complete', tools: [{ name: 'job', description: 'A long job run as a task.', inputSchema: { type: 'object', properties: { name: { type: 'string' } } }, execution: { taskSupport: 'required' } }] } };
      case 'tools/call': {
        if (params.name !== 'job') return error(-32602, `Unknown tool: ${String(params.name)}`);
        calls.push({ name: 'job', arguments: params.arguments ?? {}, headers: {} });
        const taskId = `modern-${++next}-${Math.random().toString(36).slice(2)}`;
        const now = new Date().toISOString();
        tasks.set(taskId, { status: 'working', createdAt: now, lastUpdatedAt: now });
        return { jsonrpc: '2.0', id, result: { resultType: 'task', ...taskFields(taskId) } };
      }
      case 'tasks/get': {
        const task = tasks.get(params.taskId);
        if (!task) return error(-32602, 'Unknown task');
        return { jsonrpc: '2.0', id, result: { resultType: 'complete', ...taskFields(params.taskId), ...(task.result ? { result: task.result } : {}) } };
      }
      case 'tasks/cancel': {
        const task = tasks.get(params.taskId);
        if (!task) return error(-32602, 'Unknown task');
        if (task.status !== 'working') return error(-32602, `Task already ${task.status}`);
        task.status = 'cancelled';
        return { jsonrpc: '2.0', id, result: { resultType: 'complete', ...taskFields(params.taskId) } };
      }
      default:
        return error(-32601, `Method not found: ${String(method)}`);
    }
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const raw = Buffer.concat(chunks).toString('utf8');
    if (raw) bodies.push(raw);
    const message = JSON.parse(raw) as Json;
    if (message.id === undefined) {
      res.writeHead(202).end();
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(answer(message)));
  };

  const recording = await listenRecording(handle, calls, bodies, async () => undefined);
  return {
    ...recording,
    finish(taskId, status) {
      const task = tasks.get(taskId);
      if (!task || task.status !== 'working') throw new Error(`task ${taskId} is not running`);
      task.status = status;
      task.lastUpdatedAt = new Date().toISOString();
      task.result = status === 'completed' ? { content: [{ type: 'text', text: `done:${taskId}` }] } : { content: [{ type: 'text', text: 'the job failed' }], isError: true };
    },
  };
}
