// One authorised priced tools/call after the paywall reserved its credits (SPEC §6.2 step 7, §6.5).
// The proxy forwards it (the token already stripped from the body it sends); the proxy's response hook
// hands the reply here. `run()` reads top to bottom: wait for the upstream's answer (or the deadline),
// read the reply to its end whatever the client does, conclude (commit or release), write the final
// message. Events before the result stream to the client as they arrive; the result waits for the
// commit and goes out with its receipt; any response that does not answer this call exactly fails the
// call closed. A call whose stream the upstream ended early on purpose (resumable: it carried event
// ids and a session) is left in flight for the resumed stream to conclude (response-screen.ts), or
// released at the deadline. A call that may create a task (2025-11-25 `params.task`) keeps its upstream
// request open up to a minute past its deadline: the task the upstream creates anyway, answered late,
// is recorded as concluded the way the call was (Paywall.recordLateTask), so its result is never read
// as an unpriced task's.
import { PassThrough } from 'node:stream';
import type { FastifyReply } from 'fastify';
import { isObject, type JsonRpcResponse } from '../mcp/jsonrpc.js';
import { resultKind } from '../mcp/result-kind.js';
import { serialiseEvent, type SseEvent } from '../mcp/sse.js';
import type { Paywall } from '../paywall/decide.js';
import type { CallOutcome, Conclusion, HeldCall, PricedCall } from '../paywall/outcome.js';
import type { PricedRequestKey } from '../store/store.js';
import type { DeadlineQueue } from './deadlines.js';
import { sendCancelled, type CancelTarget } from './cancel.js';
import type { McpCall, PricedForward, UpstreamHead } from './call-state.js';
import { isEventStream, toClientHeaders } from './headers.js';
import type { PricedRequests } from './priced-requests.js';
import type { ProxyRecorder } from './recorder.js';
import { discard } from '../io/body.js';
import { answers, holdsResponse, readReplyChunks } from './reply-reader.js';
import { namespaceHook, sendScreenedBody } from './screened-body.js';
import { classifyUpstreamError, UpstreamAbort, upstreamFailure, type UpstreamFailure, type UpstreamOutcome } from './upstream-failure.js';
import { HeadRace } from './upstream-head.js';

export interface PricedCallDeps {
  paywall: Paywall;
  registry: PricedRequests;
  recorder: ProxyRecorder;
  deadlines: DeadlineQueue;
  cancel: CancelTarget;
  maxResponseBytes: number;
  callDeadlineMs: number;
  now: () => number;
}

/** Where the call is registered for resumed streams: its upstream session (legacy requests that carry one). */
export interface Registration {
  sessionId: string;
  protocolVersion: string | undefined;
  key: PricedRequestKey;
  /** The store write; every byte of the reply waits for it. */
  written: Promise<boolean>;
}

/** The stream ended without the result, but the client can resume it: concluded later, elsewhere or at the deadline. */
const DETACHED = { kind: 'detached' } as const;
type ReadOutcome = CallOutcome | typeof DETACHED;
const EXPIRED = { kind: 'expired' } as const;
/** How long past its deadline a call that may create a task waits for the upstream's late answer. */
const LATE_TASK_ANSWER_MS = 60_000;

/** What a task-augmented call keeps so that a task the upstream creates past its deadline is learnt of. */
class LateTaskWatch {
  /** Resolves when the call deadline passes. */
  readonly expiry: Promise<typeof EXPIRED>;
  expire!: () => void;
  /** How the call was concluded, once it was (the late task is recorded the same way). */
  readonly concluded: Promise<Conclusion['state']>;
  conclude!: (state: Conclusion['state']) => void;

  constructor() {
    this.expiry = new Promise((resolve) => (this.expire = () => resolve(EXPIRED)));
    this.concluded = new Promise((resolve) => (this.conclude = resolve));
  }
}

export class PricedExchange implements PricedForward {
  readonly #deps: PricedCallDeps;
  readonly #call: McpCall;
  readonly #reply: FastifyReply;
  readonly #priced: PricedCall;
  readonly #held: HeldCall;
  readonly #registration: Registration | null;
  readonly #race = new HeadRace();
  #detached = false;
  #concluded = false;
  readonly #cancelDeadline: () => void;
  /** The event stream to the client, once the first event is relayed. */
  #out: PassThrough | null = null;
  /** The held result event (its id and fields are kept for the final one). */
  #resultEvent: SseEvent | null = null;
  #upstreamOutcome: UpstreamOutcome = 'answered';
  /** A task-augmented call (the upstream may create a task whatever the deadline does to it); null for any other. */
  readonly #lateTask: LateTaskWatch | null;

  constructor(deps: PricedCallDeps, call: McpCall, reply: FastifyReply, priced: PricedCall, held: HeldCall, registration: Registration | null) {
    this.#deps = deps;
    this.#call = call;
    this.#reply = reply;
    this.#priced = priced;
    this.#held = held;
    this.#registration = registration;
    this.#lateTask = isObject((priced.call.request.params as Record<string, unknown>).task) ? new LateTaskWatch() : null;
    // The deadline covers the whole call, upstream time included (SPEC §6.5).
    this.#cancelDeadline = deps.deadlines.add(Math.max(1, priced.startedAt + deps.callDeadlineMs - deps.now()), () => this.#onDeadline());
  }

  onHead(head: UpstreamHead): void {
    this.#race.onHead(head);
  }

  onError(error: unknown): void {
    this.#race.onError(error);
  }

  /** Forwarded by the proxy right after this is built; resolves once the call is concluded and its answer written. */
  async run(): Promise<void> {
    // 1. The upstream's answer: the proxy's response or error hook, or the deadline.
    const first = await this.#race.head;
    // 2. The reply, read to its end (or the deadline) whatever the client does.
    const outcome = first.kind === 'failed' ? this.#failedBeforeHead(first.failure) : await this.#readReplyBy(first.head);
    if (outcome.kind === 'detached') {
      this.#detached = true;
      this.#out?.end(); // as the upstream ended it: the client resumes with Last-Event-ID
      this.#recordUpstream();
      return;
    }
    // 3. Commit or release, in the store and in the registry.
    this.#cancelDeadline();
    const conclusion = await this.#conclude(outcome);
    // 4. The final message: the result with its receipt, the upstream's error, or a refusal.
    this.#finish(conclusion.message);
  }

  #failedBeforeHead(failure: UpstreamFailure): CallOutcome {
    this.#upstreamOutcome = failure.outcome;
    this.#deps.recorder.failure(this.#call, this.#reply.request.id, failure);
    return failure.outcome === 'deadline' || failure.outcome === 'headers_timeout' ? { kind: 'deadline', accepted: false } : { kind: 'failed', accepted: false };
  }

  /** The reply; for a call that may create a task, the deadline if it passes first (the reply, still read, is then watched for a late task). */
  async #readReplyBy(head: UpstreamHead): Promise<ReadOutcome> {
    const reading = this.#readReply(head);
    if (!this.#lateTask) return reading;
    const first = await Promise.race([reading, this.#lateTask.expiry]);
    if (first.kind !== 'expired') return first;
    this.#upstreamOutcome = 'deadline';
    void reading.then((late) => this.#recordLateTask(late));
    return { kind: 'deadline', accepted: true };
  }

  async #readReply(head: UpstreamHead): Promise<ReadOutcome> {
    const { statusCode } = head;
    if (statusCode >= 400 && statusCode < 500) {
      // The tool never ran; the client sees the upstream's answer as it is (clients use 4xx to detect the era).
      this.#upstreamOutcome = 'http_4xx';
      this.#reply.code(statusCode).headers(toClientHeaders(head.headers, false));
      sendScreenedBody(this.#reply, head, {
        maxBytes: this.#deps.maxResponseBytes,
        requestId: this.#id,
        rewriteJson: null,
        sseHook: namespaceHook,
        onFailure: (failure) => this.#deps.recorder.failure(this.#call, this.#reply.request.id, failure, { observe: false }),
      });
      return { kind: 'http_refusal', status: statusCode };
    }
    if (statusCode < 200 || statusCode >= 300) {
      this.#upstreamOutcome = 'http_5xx';
      discard(head.stream);
      return { kind: 'failed', accepted: false };
    }
    try {
      return isEventStream(head.headers['content-type']) ? await this.#readStream(head) : await this.#readJson(head);
    } catch (error) {
      if (this.#race.expired) {
        this.#upstreamOutcome = 'deadline';
        return { kind: 'deadline', accepted: true };
      }
      const failure = classifyUpstreamError(error);
      this.#upstreamOutcome = failure.outcome;
      this.#deps.recorder.failure(this.#call, this.#reply.request.id, failure);
      return { kind: 'failed', accepted: true };
    }
  }

  /** A JSON reply must be exactly one response to this call's id (an array, or any other id, fails closed). */
  async #readJson(head: UpstreamHead): Promise<CallOutcome> {
    for await (const [only] of readReplyChunks(head.stream, head.headers['content-type'], this.#deps.maxResponseBytes)) {
      if (answers(only?.value, this.#id)) return { kind: 'answered', message: only.value };
    }
    return this.#unmatched('the upstream reply did not answer this call exactly');
  }

  /**
   * An event stream: events pass to the client as they arrive (once the call is registered), until
   * the response to this call. Any other response — another id, the same id as another type, inside an
   * array, or a second one in the same chunk — fails the call closed and is never passed on.
   */
  async #readStream(head: UpstreamHead): Promise<ReadOutcome> {
    const relay = this.#registration ? await this.#registration.written : true;
    if (relay) this.#startStream(head);
    let sawEventId = false;
    let result: JsonRpcResponse | null = null;
    for await (const values of readReplyChunks(head.stream, head.headers['content-type'], this.#deps.maxResponseBytes)) {
      let text = '';
      for (const { event, value, relayed } of values) {
        if (event?.lines.some(isIdLine)) sawEventId = true;
        const response = value !== undefined && holdsResponse(value);
        if (result) {
          if (response) return this.#unmatched('the upstream sent a second response for this call');
          continue; // nothing after the result reaches the client
        }
        if (response) {
          if (!answers(value, this.#id)) return this.#unmatched('the upstream stream carried a response that does not answer this call exactly');
          result = value;
          this.#resultEvent = event;
          continue;
        }
        if (event) text += serialiseEvent(event, relayed);
      }
      if (text && this.#out && !this.#out.destroyed && !this.#concluded) this.#write(text);
      if (result) {
        head.stream.resume(); // whatever follows is read and dropped
        head.stream.on('error', () => undefined);
        return { kind: 'answered', message: result };
      }
    }
    // The stream ended without the result. With event ids and a session, the upstream may have ended it
    // on purpose (2025-11-25 polling) or moved it to a resumed GET: the call stays in flight. Not an
    // x402-paid call: only this exchange holds its payment, so no other stream could ever settle it.
    if (relay && sawEventId && this.#registration) {
      if (this.#held.kind !== 'reserved') return this.#unmatched(`the upstream ended the stream of ${this.#held.kind === 'x402' ? 'an x402-paid' : 'a free (allowance)'} call before its result; no other stream can conclude it`);
      return DETACHED;
    }
    this.#upstreamOutcome = 'bad_response';
    return { kind: 'failed', accepted: true };
  }

  #unmatched(reason: string): CallOutcome {
    this.#call.abort(new UpstreamAbort('bad_response'));
    this.#sendCancel('the gateway could not match the reply');
    const failure = upstreamFailure('bad_response', undefined, reason);
    this.#upstreamOutcome = failure.outcome;
    this.#deps.recorder.failure(this.#call, this.#reply.request.id, failure);
    return { kind: 'failed', accepted: true };
  }

  #startStream(head: UpstreamHead): void {
    if (this.#reply.raw.destroyed) return; // the client left: the reply is still read to its end
    this.#out = new PassThrough();
    this.#out.on('error', () => undefined);
    this.#reply.code(head.statusCode).headers(toClientHeaders(head.headers, true)).send(this.#out);
    this.#reply.raw.flushHeaders();
  }

  /** Writes to a client that reads; one that stops reading for a whole reply is cut off (it can resume). */
  #write(text: string): void {
    const out = this.#out as PassThrough;
    if (out.writableLength > this.#deps.maxResponseBytes) {
      out.destroy();
      return;
    }
    out.write(text);
  }

  async #conclude(outcome: CallOutcome): Promise<{ message: JsonRpcResponse | null }> {
    this.#concluded = true;
    if (this.#registration) await this.#registration.written; // the registry conclusion must land after the registration
    const conclusion = await this.#deps.paywall.conclude(this.#priced, this.#held, outcome, this.#registration?.key ?? null).catch((error: unknown) => {
      this.#lateTask?.conclude('unknown');
      throw error;
    });
    this.#lateTask?.conclude(conclusion.state);
    if (this.#registration) this.#deps.registry.noteConcluded(this.#registration.sessionId, this.#id, conclusion.state === 'committed' ? 'committed' : 'released');
    this.#recordUpstream();
    return conclusion;
  }

  #finish(message: JsonRpcResponse | null): void {
    if (message === null) return; // the upstream's 4xx went as it came
    const data = JSON.stringify(message);
    if (this.#out) {
      // The final event keeps the held result's id (and other fields) so the client's resume cursor stays true.
      if (!this.#out.destroyed) this.#out.end(this.#resultEvent ? serialiseEvent(this.#resultEvent, data) : `event: message\ndata: ${data}\n\n`);
      return;
    }
    if (this.#reply.raw.destroyed || this.#reply.sent) return;
    this.#reply.code(200).header('content-type', 'application/json').send(data);
  }

  /** At callDeadline: abort the upstream request, cancel it in the protocol, and (if nothing else did) conclude. */
  #onDeadline(): void {
    if (this.#concluded) return;
    this.#race.expired = true;
    if (this.#lateTask) {
      this.#lateTask.expire();
      this.#awaitLateTask();
    } else {
      this.#call.abort(new UpstreamAbort('deadline'));
      this.#sendCancel('the call deadline passed');
    }
    this.#race.onError(new UpstreamAbort('deadline')); // nothing if a head or an error came first
    if (this.#detached) void this.#conclude({ kind: 'deadline', accepted: true });
  }

  /**
   * A task-augmented call past its deadline: refused and released like any other, but its upstream
   * request stays open up to LATE_TASK_ANSWER_MS more (then aborted) and is not cancelled in the
   * protocol (an SDK server drops the answer to a cancelled request, task created or not). A task id
   * in the late answer is recorded as concluded the way the call was.
   */
  #awaitLateTask(): void {
    const stop = setTimeout(() => this.#call.abort(new UpstreamAbort('deadline')), LATE_TASK_ANSWER_MS);
    stop.unref();
    this.#race.late = (head) => void this.#readLate(head).then((late) => this.#recordLateTask(late));
  }

  /** A reply whose head came after the deadline: only the response answering this call matters. */
  async #readLate(head: UpstreamHead): Promise<CallOutcome> {
    if (head.statusCode < 200 || head.statusCode >= 300) {
      discard(head.stream);
      return { kind: 'failed', accepted: false };
    }
    try {
      for await (const values of readReplyChunks(head.stream, head.headers['content-type'], this.#deps.maxResponseBytes)) {
        const response = values.find(({ value }) => value !== undefined && holdsResponse(value));
        if (response) return answers(response.value, this.#id) ? { kind: 'answered', message: response.value } : { kind: 'failed', accepted: true };
      }
    } catch {
      // aborted at the end of the late window, or a broken reply: no task learnt
    }
    return { kind: 'failed', accepted: true };
  }

  async #recordLateTask(late: ReadOutcome): Promise<void> {
    if (late.kind !== 'answered') return;
    const kind = resultKind(late.message);
    if (kind.kind === 'task' && this.#lateTask) await this.#deps.paywall.recordLateTask(this.#priced, this.#held, kind.taskId, await this.#lateTask.concluded);
  }

  #sendCancel(reason: string): void {
    const registration = this.#registration;
    if (registration) sendCancelled(this.#deps.cancel, registration, this.#id, reason);
  }

  #recordUpstream(): void {
    if (this.#upstreamOutcome === 'answered' || this.#upstreamOutcome === 'http_4xx' || this.#upstreamOutcome === 'http_5xx' || this.#upstreamOutcome === 'deadline') {
      this.#deps.recorder.upstream(this.#call, this.#upstreamOutcome);
    }
  }

  /** run() failed unexpectedly (a bug): the reservation is released and the client told, never left held. */
  async abandon(error: unknown): Promise<void> {
    this.#deps.recorder.internalError(this.#reply.request.id, error);
    this.#call.abort(new UpstreamAbort('bad_response'));
    if (this.#concluded || this.#detached) return;
    this.#cancelDeadline();
    const conclusion = await this.#conclude({ kind: 'failed', accepted: false }).catch(() => ({ message: null }));
    this.#finish(conclusion.message);
    if (!this.#reply.sent && !this.#reply.raw.destroyed && !this.#out) this.#reply.raw.destroy();
  }

  get #id() {
    return this.#priced.call.request.id ?? null;
  }
}

const isIdLine = (line: string): boolean => line.startsWith('id:');
