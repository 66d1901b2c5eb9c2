// `sessions: perClient` (SPEC §5.5): one child per legacy client session, and the child hears exactly what
// the client says — its own initialize (protocolVersion, capabilities, clientInfo) and every message after
// it, verbatim, ids included. Roots, sampling, elicitation, logging levels, subscriptions and tasks then
// behave as they would on a direct stdio connection. What HTTP adds is only *which stream* a message from
// the child travels on: responses by their id; progress by its token; anything else on the stream of the
// client's latest running request still being read, else the GET stream (held until the client opens one
// or sends a request).
// A child that stops reading refuses requests (bounded queue); a slow reader pauses the child; a dead child
// fails the calls in flight and ends the session (the client's next request gets 404).
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { JSONRPCMessage, RequestId } from '@modelcontextprotocol/sdk/types.js';
import { errorResponse, isObject, isRequestLike, isResponseLike, type JsonRpcId } from '../mcp/jsonrpc.js';
import type { Logger } from '../observability/logger.js';
import { StdioChild, describeExit, type ChildExit, type ChildOptions } from './child.js';
import type { EventBufferLimits } from './event-store.js';
import { BRIDGE_ERROR, idKey, progressTokenOf } from './protocol.js';
import { channelLimits, SessionChannel } from './session-channel.js';

export interface DirectSessionOptions {
  child: ChildOptions;
  logger: Logger;
  eventBuffer: EventBufferLimits;
  maxBufferedBytes: number;
  initializeTimeoutMs: number;
  /** SPEC §22: the client must complete initialize (send notifications/initialized) this long after the spawn, or the child stops. */
  initTimeoutMs: number;
  /** The session got its id (register it under that id). */
  onSessionId(session: DirectSession, sessionId: string): void;
  /** Called once when the session is over (child gone, DELETE, idle, close): forget it, free its slot. */
  onEnded(session: DirectSession): void;
}

type Route = { requestId: RequestId } | 'standalone';

export class DirectSession {
  readonly channel: SessionChannel;
  readonly #options: DirectSessionOptions;
  readonly #child: StdioChild;
  /** Client requests the child has not answered yet, oldest first. */
  readonly #pending = new Map<string, RequestId>();
  /** Progress token → the request that carries it. */
  readonly #progress = new Map<string, RequestId>();
  /** Server→client requests → the stream they went out on (so their cancellation follows them). */
  readonly #relayed = new Map<string, Route>();
  #initializeTimer: NodeJS.Timeout | undefined;
  readonly #initTimer: NodeJS.Timeout;
  #initializeId: RequestId | undefined;
  #initializeAnswered = false;
  #initialised = false;
  #ended = false;

  constructor(options: DirectSessionOptions) {
    this.#options = options;
    this.channel = new SessionChannel({
      ...channelLimits(options),
      flow: { onCongested: () => this.#child.pauseOutput(), onDrained: () => this.#child.resumeOutput() },
      onMessage: (message) => this.#fromClient(message),
      onHeldDropped: (message) => this.#refuseDropped(message),
      onSessionId: (sessionId) => options.onSessionId(this, sessionId),
      onDeleted: () => void this.end('the client deleted the session'),
    });
    this.#child = StdioChild.spawn(options.child, {
      onMessage: (message, bytes) => this.#fromChild(message, bytes),
      onExit: (exit) => this.#childExited(exit),
    });
    // A client that never completes the handshake (gone mid-initialize, or never says initialized) holds a
    // child for nothing: it is stopped and its slot freed.
    this.#initTimer = setTimeout(() => {
      if (this.#initialised) return;
      this.#options.logger.info({ evt: 'bridge_init_timeout', pid: this.pid, initTimeoutMs: options.initTimeoutMs }, 'a client did not complete initialize in time; its stdio child was stopped');
      void this.#fail(`the client did not complete initialize within ${options.initTimeoutMs} ms (upstream.stdio.initTimeout)`);
    }, options.initTimeoutMs);
  }

  get sessionId(): string | undefined {
    return this.channel.sessionId;
  }

  get pid(): number | undefined {
    return this.#child.pid;
  }

  get alive(): boolean {
    return !this.#ended && this.#child.alive;
  }

  /** The client completed initialize (notifications/initialized reached the child). */
  get initialised(): boolean {
    return this.#initialised;
  }

  /** The child's answer to the client's initialize went out (false: the client left before it came). */
  get initializeAnswered(): boolean {
    return this.#initializeAnswered;
  }

  /** When the client last did anything (monotonic ms): the least recently used child is evicted first. */
  get lastActivityAt(): number {
    return this.channel.lastActivityAt;
  }

  /** Whether the client holds a response of this session open (a running call's stream, the GET stream). */
  get connected(): boolean {
    return this.channel.connected;
  }

  /** Idle = the client holds no response open and has sent nothing for `idleMs`. */
  idleFor(now: number): number {
    return this.channel.connected ? 0 : now - this.channel.lastActivityAt;
  }

  hasRoomFor(bytes: number): boolean {
    return this.#child.hasRoomFor(bytes);
  }

  handle(req: IncomingMessage, res: ServerResponse, parsedBody?: unknown): Promise<void> {
    return this.channel.handle(req, res, parsedBody);
  }

  /** Stops the child and ends the session; its streams end after what was already sent. */
  async end(why: string): Promise<void> {
    if (this.#ended) return;
    this.#ended = true;
    clearTimeout(this.#initializeTimer);
    clearTimeout(this.#initTimer);
    this.#options.logger.debug({ evt: 'bridge_session_end', session: this.sessionId, pid: this.pid, why }, 'per-client session ended');
    this.#options.onEnded(this);
    await Promise.all([this.#child.kill(), this.channel.close()]);
  }

  // ── client → child ───────────────────────────────────────────────────────────────────────────

  #fromClient(message: JSONRPCMessage): void {
    if (isRequestLike(message) && message.id !== undefined) return this.#requestFromClient(message.id, message);
    if (isRequestLike(message) && message.method === 'notifications/cancelled') {
      const requestId = isObject(message.params) ? message.params.requestId : undefined;
      const key = typeof requestId === 'string' || typeof requestId === 'number' ? idKey(requestId) : undefined;
      const pending = key === undefined ? undefined : this.#pending.get(key);
      this.#write(message);
      // The child will not answer a cancelled request; the POST that carried it still waits: close it with
      // an answer the client ignores (it gave up on this id).
      if (pending !== undefined) this.#answer(pending, errorResponse(pending, BRIDGE_ERROR.cancelled.code, 'Request cancelled', { reason: BRIDGE_ERROR.cancelled.reason }));
      return;
    }
    if (isRequestLike(message) && message.method === 'notifications/initialized') {
      this.#initialised = true;
      clearTimeout(this.#initTimer);
    }
    if (isResponseLike(message)) this.#relayed.delete(idKey(message.id));
    if (this.#write(message) !== 'ok') this.#options.logger.warn({ evt: 'bridge_client_message_dropped', session: this.sessionId }, 'the stdio server is not reading: a client notification or answer was dropped');
  }

  #requestFromClient(id: RequestId, message: JSONRPCMessage & { method: string; params?: unknown }): void {
    this.#pending.set(idKey(id), id);
    const token = progressTokenOf(message.params);
    if (token !== undefined) this.#progress.set(idKey(token), id);
    // Whatever waited for a GET stream goes out on this request's stream instead.
    for (const held of this.channel.takeHeld()) this.channel.sendRelated(held, id);
    if (message.method === 'initialize') {
      this.#initializeId = id;
      this.#initializeTimer = setTimeout(() => {
        void this.#fail(`the stdio server did not answer initialize within ${this.#options.initializeTimeoutMs} ms`);
      }, this.#options.initializeTimeoutMs);
    }
    const outcome = this.#write(message);
    if (outcome === 'full') {
      this.#answer(id, errorResponse(id, BRIDGE_ERROR.stdinFull.code, 'the stdio server is not reading its input; the request was refused (try again later)', { reason: BRIDGE_ERROR.stdinFull.reason }));
    } else if (outcome === 'gone') {
      this.#answer(id, errorResponse(id, BRIDGE_ERROR.childGone.code, 'the stdio server is not running', { reason: BRIDGE_ERROR.childGone.reason }));
    }
  }

  #write(message: unknown) {
    return this.#ended ? 'gone' : this.#child.write(message);
  }

  /** Sends the bridge's own answer to a pending request and forgets it (a late answer from the child is dropped). */
  #answer(id: RequestId, response: unknown): void {
    if (!this.#forget(id)) return;
    this.channel.sendResponse(response as JSONRPCMessage);
  }

  #forget(id: JsonRpcId): boolean {
    const key = idKey(id);
    if (!this.#pending.delete(key)) return false;
    for (const [token, requestId] of this.#progress) if (requestId === id) this.#progress.delete(token);
    return true;
  }

  // ── child → client ───────────────────────────────────────────────────────────────────────────

  #fromChild(message: unknown, bytes: number): void {
    if (this.#ended) return;
    if (isResponseLike(message)) {
      if (!this.#forget(message.id)) {
        this.#options.logger.debug({ evt: 'bridge_stray_response', session: this.sessionId }, 'the stdio server answered a request that is not pending');
        return;
      }
      if (this.#initializeTimer !== undefined) {
        clearTimeout(this.#initializeTimer);
        this.#initializeTimer = undefined;
      }
      if (this.#initializeId !== undefined && idKey(message.id) === idKey(this.#initializeId)) this.#initializeAnswered = true;
      this.channel.sendResponse(message as JSONRPCMessage, bytes);
      return;
    }
    if (!isRequestLike(message)) {
      this.#options.logger.debug({ evt: 'bridge_child_invalid', session: this.sessionId }, 'the stdio server wrote something that is not JSON-RPC');
      return;
    }
    const params = isObject(message.params) ? message.params : {};
    let route: Route | undefined;
    if (message.id !== undefined) {
      route = this.#defaultRoute();
      this.#relayed.set(idKey(message.id), route);
    } else if (message.method === 'notifications/progress' && (typeof params.progressToken === 'string' || typeof params.progressToken === 'number')) {
      const requestId = this.#progress.get(idKey(params.progressToken));
      if (requestId !== undefined) route = { requestId };
    } else if (message.method === 'notifications/cancelled' && (typeof params.requestId === 'string' || typeof params.requestId === 'number')) {
      const key = idKey(params.requestId);
      route = this.#relayed.get(key);
      this.#relayed.delete(key);
    }
    route ??= this.#defaultRoute();
    if (route === 'standalone') this.channel.sendStandalone(message as JSONRPCMessage, bytes);
    else this.channel.sendRelated(message as JSONRPCMessage, route.requestId, bytes);
  }

  /** The stream of the client's latest running request that the client still reads, else the GET stream. */
  #defaultRoute(): Route {
    let latest: RequestId | undefined;
    for (const id of this.#pending.values()) if (this.channel.isStreaming(id)) latest = id;
    return latest === undefined ? 'standalone' : { requestId: latest };
  }

  /** A server→client request that waited for a GET stream too long: the child hears it cannot be delivered. */
  #refuseDropped(message: JSONRPCMessage): void {
    if (!isRequestLike(message) || message.id === undefined) return;
    this.#relayed.delete(idKey(message.id));
    this.#write(errorResponse(message.id, BRIDGE_ERROR.childGone.code, 'the client has no open stream to receive this request'));
  }

  #childExited(exit: ChildExit): void {
    if (this.#ended) return;
    const why = describeExit(exit, this.#options.child.maxLineBytes);
    this.#options.logger[exit.stoppedBecause === 'line_too_long' ? 'warn' : 'info']({ evt: 'bridge_child_exit', session: this.sessionId, pid: this.pid, code: exit.code, signal: exit.signal, why }, 'per-client stdio child exited');
    void this.#fail(why);
  }

  /** Calls in flight get an error result, then the session ends (404 next). */
  async #fail(why: string): Promise<void> {
    for (const id of [...this.#pending.values()]) {
      this.#answer(id, errorResponse(id, BRIDGE_ERROR.childGone.code, why, { reason: BRIDGE_ERROR.childGone.reason }));
    }
    await this.end(why);
  }
}
