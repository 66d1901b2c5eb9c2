// A tasks/result, tasks/get or tasks/cancel request about a task that holds a priced call's reservation
// (SPEC §24). The proxy forwards it unchanged; the reply is read here: events that are not its response
// are passed on, the response waits for the paywall's conclusion (commit with a receipt, release, or a
// refusal in place of a result whose credit could not be committed), so the task's result reaches the
// client only once paid. The wait is bounded by the task's deadline, not callDeadline.
import type { FastifyReply } from 'fastify';
import { RPC } from '../errors.js';
import { discard } from '../io/body.js';
import { isObject, type JsonRpcId, type JsonRpcResponse } from '../mcp/jsonrpc.js';
import { serialiseEvent, type SseEvent } from '../mcp/sse.js';
import type { Paywall } from '../paywall/decide.js';
import type { PricedCall } from '../paywall/outcome.js';
import type { TaskMethod } from '../paywall/tasks.js';
import type { TaskKey, TaskRecord } from '../store/store.js';
import type { McpCall, PricedForward, UpstreamHead } from './call-state.js';
import type { DeadlineQueue } from './deadlines.js';
import { isEventStream, toClientHeaders } from './headers.js';
import type { ProxyRecorder } from './recorder.js';
import { answers, holdsResponse, readReplyChunks } from './reply-reader.js';
import { namespaceHook, sendScreenedBody } from './screened-body.js';
import { classifyUpstreamError, UpstreamAbort } from './upstream-failure.js';
import { HeadRace } from './upstream-head.js';

export interface TaskCallDeps {
  paywall: Paywall;
  recorder: ProxyRecorder;
  deadlines: DeadlineQueue;
  maxResponseBytes: number;
  now: () => number;
}

export interface HeldTask {
  key: TaskKey;
  record: TaskRecord;
  method: TaskMethod;
  id: JsonRpcId;
  resultShape: PricedCall['resultShape'];
}

export class TaskExchange implements PricedForward {
  readonly #deps: TaskCallDeps;
  readonly #call: McpCall;
  readonly #reply: FastifyReply;
  readonly #task: HeldTask;
  readonly #race = new HeadRace();
  readonly #cancelDeadline: () => void;

  constructor(deps: TaskCallDeps, call: McpCall, reply: FastifyReply, task: HeldTask) {
    this.#deps = deps;
    this.#call = call;
    this.#reply = reply;
    this.#task = task;
    // tasks/result may wait for the task itself: bounded by the task's deadline (its credit is released
    // then). Asked after the deadline, the answer is read and its result withheld (paywall.concludeTask).
    const left = task.record.deadline - deps.now();
    this.#cancelDeadline = left <= 0 ? () => undefined : deps.deadlines.add(left, () => {
      this.#race.expired = true;
      this.#call.abort(new UpstreamAbort('deadline'));
      this.#race.onError(new UpstreamAbort('deadline'));
    });
  }

  onHead(head: UpstreamHead): void {
    this.#race.onHead(head);
  }

  onError(error: unknown): void {
    this.#race.onError(error);
  }

  async run(): Promise<void> {
    const first = await this.#race.head;
    try {
      if (first.kind === 'failed') {
        this.#deps.recorder.failure(this.#call, this.#reply.request.id, first.failure);
        this.#sendError('the upstream could not be reached for this task');
        return;
      }
      await this.#relay(first.head);
    } finally {
      this.#cancelDeadline();
    }
  }

  async #relay(head: UpstreamHead): Promise<void> {
    if (head.statusCode < 200 || head.statusCode >= 300) {
      // Not an answer about the task: passed on as it came (4xx/5xx carry no result).
      this.#deps.recorder.upstream(this.#call, head.statusCode >= 500 ? 'http_5xx' : 'http_4xx');
      this.#reply.code(head.statusCode).headers(toClientHeaders(head.headers, false));
      sendScreenedBody(this.#reply, head, { maxBytes: this.#deps.maxResponseBytes, requestId: this.#task.id, rewriteJson: null, sseHook: namespaceHook, onFailure: () => undefined });
      return;
    }
    const stream = isEventStream(head.headers['content-type']);
    let before = '';
    let response: JsonRpcResponse | null = null;
    let responseEvent: SseEvent | null = null;
    try {
      for await (const values of readReplyChunks(head.stream, head.headers['content-type'], this.#deps.maxResponseBytes)) {
        for (const { event, value, relayed } of values) {
          if (response) continue; // nothing after the response reaches the client
          if (value !== undefined && holdsResponse(value)) {
            if (!answers(value, this.#task.id)) return this.#sendError('the upstream reply did not answer this request exactly');
            response = value;
            responseEvent = event;
            continue;
          }
          if (event) before += serialiseEvent(event, relayed);
        }
        if (response) break;
      }
    } catch (error) {
      this.#deps.recorder.failure(this.#call, this.#reply.request.id, classifyUpstreamError(error));
      return this.#sendError('the upstream reply could not be read');
    }
    discard(head.stream);
    this.#deps.recorder.upstream(this.#call, 'answered');
    if (!response) return this.#sendError('the upstream reply ended without an answer');
    const { key, record, method, resultShape } = this.#task;
    const message = await this.#deps.paywall.concludeTask(key, record, method, response, resultShape);
    if (this.#reply.raw.destroyed || this.#reply.sent) return;
    const data = JSON.stringify(message);
    if (stream) {
      const final = responseEvent ? serialiseEvent(responseEvent, data) : `event: message\ndata: ${data}\n\n`;
      this.#reply.code(200).headers(toClientHeaders(head.headers, true)).send(before + final);
      return;
    }
    this.#reply.code(200).header('content-type', 'application/json').send(data);
  }

  /** Fails closed: a JSON-RPC error, never an unread result. */
  #sendError(message: string): void {
    this.#call.abort(new UpstreamAbort('bad_response'));
    if (this.#reply.raw.destroyed || this.#reply.sent) return;
    this.#reply.code(200).header('content-type', 'application/json').send(JSON.stringify({ jsonrpc: '2.0', id: this.#task.id, error: { code: RPC.INTERNAL_ERROR, message } }));
  }

  /** run() failed unexpectedly (a bug): the client is told; the reservation stays held until the task deadline. */
  async abandon(error: unknown): Promise<void> {
    this.#deps.recorder.internalError(this.#reply.request.id, error);
    this.#cancelDeadline();
    this.#sendError('the gateway failed while reading this task answer');
  }
}

const TASK_METHODS: ReadonlySet<string> = new Set<TaskMethod>(['tasks/result', 'tasks/get', 'tasks/cancel']);

/** The task a request names when it is tasks/result, tasks/get or tasks/cancel with a string taskId; else null. */
export function taskRequestOf(message: unknown): { method: TaskMethod; taskId: string } | null {
  if (!isObject(message) || typeof message.method !== 'string' || !TASK_METHODS.has(message.method)) return null;
  const params = message.params;
  if (!isObject(params) || typeof params.taskId !== 'string') return null;
  return { method: message.method as TaskMethod, taskId: params.taskId };
}
