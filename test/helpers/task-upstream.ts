// A real task-capable upstream (SDK v1 1.32's experimental tasks: registerToolTask over an
// InMemoryTaskStore), stateless JSON, one task store shared by every request's server. Its tool `job`
// answers a task-augmented tools/call with a task; the test decides how each task ends
// (`finish(taskId, 'completed' | 'failed')`), or cancels it through the protocol. `tasks/result` blocks
// until the task ends, as the SDK implements it. `{ resumable: true }`: sessions, SSE replies and an event
// store instead (a client may hang up on a tasks/result and resume it with Last-Event-ID).
// `{ answerDelayMs }`: each task is created at once, its creation answered that much later.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { InMemoryTaskStore } from '@modelcontextprotocol/sdk/experimental/tasks/stores/in-memory.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';
import { OrderedEventStore } from './ordered-event-store.js';
import { listenRecording, type ReceivedCall, type RecordingUpstream } from './paid-upstream.js';

export interface TaskUpstream extends RecordingUpstream {
  /** Ends a task: completed with a text result, or failed with an isError result. */
  finish(taskId: string, status: 'completed' | 'failed'): Promise<void>;
  taskIds(): string[];
}

export async function startTaskUpstream(options: { resumable?: boolean; answerDelayMs?: number } = {}): Promise<TaskUpstream> {
  const sessions = new Map<string, StreamableHTTPServerTransport>();
  const calls: ReceivedCall[] = [];
  const bodies: string[] = [];
  const taskStore = new InMemoryTaskStore();
  const created: string[] = [];

  const buildServer = (): McpServer => {
    const server = new McpServer({ name: 'task-upstream', version: '1.0.0' }, { capabilities: { tasks: { requests: { tools: { call: {} } }, list: {}, cancel: {} } }, taskStore });
    server.experimental.tasks.registerToolTask(
      'job',
      { description: 'A long job run as a task.', inputSchema: { name: z.string() }, execution: { taskSupport: 'optional' } },
      {
        createTask: async (args, extra) => {
          calls.push({ name: 'job', arguments: args, headers: {} });
          const task = await extra.taskStore.createTask({ ttl: 600_000, pollInterval: 50 });
          created.push(task.taskId);
          // answerDelayMs: the task exists before its creation is answered (an upstream slow to reply).
          if (options.answerDelayMs) await new Promise((resolve) => setTimeout(resolve, options.answerDelayMs));
          return { task };
        },
        getTask: async (_args, extra) => extra.taskStore.getTask(extra.taskId),
        getTaskResult: async (_args, extra) => extra.taskStore.getTaskResult(extra.taskId) as never,
      },
    );
    server.registerTool('free_echo', { description: 'Echoes, free.', inputSchema: { text: z.string() } }, async ({ text }) => ({ content: [{ type: 'text', text }] }));
    return server;
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const raw = Buffer.concat(chunks).toString('utf8');
    if (raw) bodies.push(raw);
    const parsed = raw ? (JSON.parse(raw) as unknown) : undefined;
    if (options.resumable) {
      const sessionId = req.headers['mcp-session-id'];
      let transport = typeof sessionId === 'string' ? sessions.get(sessionId) : undefined;
      if (!transport) {
        const created = new StreamableHTTPServerTransport({ sessionIdGenerator: () => randomUUID(), eventStore: new OrderedEventStore(), retryInterval: 100, onsessioninitialized: (id) => void sessions.set(id, created) });
        created.onclose = () => {
          if (created.sessionId) sessions.delete(created.sessionId);
        };
        await buildServer().connect(created);
        transport = created;
      }
      await transport.handleRequest(req, res, parsed);
      return;
    }
    const server = buildServer();
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    res.on('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res, parsed);
  };

  const recording = await listenRecording(handle, calls, bodies, async () => {
    for (const transport of sessions.values()) await transport.close().catch(() => undefined);
    taskStore.cleanup();
  });
  return {
    ...recording,
    taskIds: () => [...created],
    async finish(taskId, status) {
      const text = status === 'completed' ? `done:${taskId}` : 'the job failed';
      await taskStore.storeTaskResult(taskId, status, { content: [{ type: 'text', text }], ...(status === 'failed' ? { isError: true } : {}) });
    },
  };
}
