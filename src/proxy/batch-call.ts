// A legacy batch holding priced calls (SPEC §5.6) or calls to hidden tools (§18): entries the paywall
// (or the visibility rule) answered itself are answered by the gateway; the rest (free entries, and
// authorised priced ones with their token stripped) went upstream as one batch through the proxy. Here
// the reply is read whole, each priced entry is concluded on the one response that answers its id
// exactly (none, or several, fails that entry closed), a tools/list result is rewritten for the caller,
// and the replies are merged into one JSON response in the original order. A batch is never a way
// around the paywall: the same rules as a single call, per entry, and no event id reaches the client.
import type { FastifyReply } from 'fastify';
import { GatewayError } from '../errors.js';
import { rpcErrorBody } from '../io/error-reply.js';
import type { JsonRpcMessage, JsonRpcResponse } from '../mcp/jsonrpc.js';
import type { ToolCall } from '../mcp/classify.js';
import type { CallOutcome, HeldCall, PricedCall } from '../paywall/outcome.js';
import { sendCancelled } from './cancel.js';
import type { McpCall, PricedForward, UpstreamHead } from './call-state.js';
import type { PricedCallDeps, Registration } from './priced-call.js';
import { discard } from '../io/body.js';
import { collectResponses, responseTo } from './reply-reader.js';
import { classifyUpstreamError, UpstreamAbort, type UpstreamOutcome } from './upstream-failure.js';
import { HeadRace } from './upstream-head.js';

export interface HeldEntry {
  call: ToolCall;
  priced: PricedCall;
  authorisation: HeldCall;
  registration: Registration | null;
}

export interface BatchPlan {
  /** The batch as the client sent it, in order. */
  messages: JsonRpcMessage[];
  /** Entries the gateway answered itself (challenges, refusals). */
  answers: Map<JsonRpcMessage, JsonRpcResponse>;
  /** Priced entries that were authorised and forwarded. */
  held: HeldEntry[];
  /** The upstream's responses with tools/list results rewritten for the caller (SPEC §5.3, §18); null when the batch lists no tools. */
  rewriteList: ((responses: JsonRpcResponse[]) => JsonRpcResponse[]) | null;
}

export class BatchExchange implements PricedForward {
  readonly #deps: PricedCallDeps;
  readonly #call: McpCall;
  readonly #reply: FastifyReply;
  readonly #plan: BatchPlan;
  readonly #race = new HeadRace();
  readonly #cancelDeadline: () => void;

  constructor(deps: PricedCallDeps, call: McpCall, reply: FastifyReply, plan: BatchPlan, startedAt: number) {
    this.#deps = deps;
    this.#call = call;
    this.#reply = reply;
    this.#plan = plan;
    this.#cancelDeadline = deps.deadlines.add(Math.max(1, startedAt + deps.callDeadlineMs - deps.now()), () => this.#onDeadline());
  }

  onHead(head: UpstreamHead): void {
    this.#race.onHead(head);
  }

  onError(error: unknown): void {
    this.#race.onError(error);
  }

  async run(): Promise<void> {
    // 1. The upstream's reply to the forwarded entries, read whole (or the deadline).
    const { responses, failure } = await this.#read();
    this.#cancelDeadline();
    // 2. Each priced entry concluded on the one response that answers it exactly.
    await Promise.all(this.#plan.held.flatMap((entry) => (entry.registration ? [entry.registration.written] : []))); // registry conclusions land after the registrations
    for (const entry of this.#plan.held) {
      const id = entry.call.request.id ?? null;
      const match = responseTo(responses, id);
      const outcome: CallOutcome = match !== null && match !== 'ambiguous' ? { kind: 'answered', message: match } : failure ?? { kind: 'failed', accepted: true };
      const conclusion = await this.#deps.paywall.conclude(entry.priced, entry.authorisation, outcome, entry.registration?.key ?? null);
      if (entry.registration) this.#deps.registry.noteConcluded(entry.registration.sessionId, id, conclusion.state === 'committed' ? 'committed' : 'released');
      if (conclusion.message) this.#plan.answers.set(entry.call.request, conclusion.message);
    }
    // 3. One reply, in the original order.
    this.#send(responses, failure);
  }

  async #read(): Promise<{ responses: JsonRpcResponse[]; failure: Extract<CallOutcome, { kind: 'failed' | 'deadline' }> | null }> {
    const first = await this.#race.head;
    if (first.kind === 'failed') {
      this.#deps.recorder.failure(this.#call, this.#reply.request.id, first.failure);
      return { responses: [], failure: first.failure.outcome === 'headers_timeout' && this.#race.expired ? { kind: 'deadline', accepted: false } : { kind: 'failed', accepted: false } };
    }
    const { head } = first;
    if (head.statusCode < 200 || head.statusCode >= 300) {
      discard(head.stream);
      this.#record(head.statusCode < 500 && head.statusCode >= 400 ? 'http_4xx' : 'http_5xx');
      return { responses: [], failure: { kind: 'failed', accepted: false } };
    }
    try {
      const responses = await collectResponses(head.stream, head.headers['content-type'], this.#deps.maxResponseBytes);
      this.#record('answered');
      return { responses, failure: null };
    } catch (error) {
      if (this.#race.expired) {
        this.#record('deadline');
        return { responses: [], failure: { kind: 'deadline', accepted: true } };
      }
      this.#deps.recorder.failure(this.#call, this.#reply.request.id, classifyUpstreamError(error));
      return { responses: [], failure: { kind: 'failed', accepted: true } };
    }
  }

  #send(upstreamResponses: JsonRpcResponse[], failure: CallOutcome | null): void {
    const responses = this.#plan.rewriteList ? this.#plan.rewriteList(upstreamResponses) : upstreamResponses;
    const merged: JsonRpcResponse[] = [];
    for (const message of this.#plan.messages) {
      const own = this.#plan.answers.get(message);
      if (own) {
        merged.push(own);
        continue;
      }
      if (!('method' in message) || message.id === undefined) continue; // notifications and client responses get no reply
      const reply = responseTo(responses, message.id);
      merged.push(reply !== null && reply !== 'ambiguous' ? reply : (rpcErrorBody(failure ? new GatewayError('TB_ERR_UPSTREAM_UNAVAILABLE', 'the upstream did not answer the batch') : new GatewayError('TB_ERR_UPSTREAM_BAD_RESPONSE', 'the upstream gave no single reply for this entry'), message.id)));
    }
    if (this.#reply.raw.destroyed || this.#reply.sent) return;
    if (merged.length === 0) {
      this.#reply.code(202).send();
      return;
    }
    this.#reply.code(200).header('content-type', 'application/json').send(JSON.stringify(merged));
  }

  /** run() failed unexpectedly (a bug): the reservations are released (each is concluded at most once) and the reply cut. */
  async abandon(error: unknown): Promise<void> {
    this.#deps.recorder.internalError(this.#reply.request.id, error);
    this.#cancelDeadline();
    for (const entry of this.#plan.held) {
      await this.#deps.paywall.conclude(entry.priced, entry.authorisation, { kind: 'failed', accepted: false }, entry.registration?.key ?? null).catch(() => undefined);
    }
    if (!this.#reply.sent) this.#reply.raw.destroy();
  }

  #onDeadline(): void {
    this.#race.expired = true;
    this.#call.abort(new UpstreamAbort('deadline'));
    for (const entry of this.#plan.held) {
      if (entry.registration) sendCancelled(this.#deps.cancel, entry.registration, entry.call.request.id ?? null, 'the call deadline passed');
    }
    this.#race.onError(new UpstreamAbort('deadline')); // nothing if a head or an error came first
  }

  #record(outcome: UpstreamOutcome): void {
    this.#deps.recorder.upstream(this.#call, outcome);
  }
}
