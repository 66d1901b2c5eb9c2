// The stdio upstream (SPEC §5.5): the gateway spawns ONE MCP server on stdio, initialises it itself, and is
// the Streamable HTTP server for every client on top of it. Legacy clients get the gateway's own sessions;
// 2026-07-28 clients are served statelessly. Every request gets a gateway-unique JSON-RPC id (and progress
// token) on its way to the child, so clients never collide; whatever the child sends back is routed to the
// request it belongs to. A dead child is restarted with backoff; calls in flight get an error result.
// stdio does not say which request a child's notification or server→client request belongs to: progress
// follows its (rewritten) token; list_changed/updated go to every session's GET stream; anything else goes to
// the only running call, or to the GET streams when none runs, and is dropped when several run. A
// server→client request goes to the running call of the one session that can take it, else it is refused.
import { MODERN_VERSION } from '../mcp/classify.js';
import { errorResponse, isObject, isRequestLike, isResponseLike, resultResponse, type JsonObject, type JsonRpcId, type JsonRpcRequest, type JsonRpcResponse } from '../mcp/jsonrpc.js';
import type { Logger } from '../observability/logger.js';
import { BatchReply, EventStream, LazyReply, emptyReply, jsonReply, type ReplySink } from './stdio-reply.js';
import {
  RELAY_CAPABILITY, SERVER_WIDE_NOTIFICATIONS, SessionTable, chooseRelayTarget, discoverResult, hasCapability, idKey,
  isLegacyVersion, isModernRequest, legacyInitializeResult, modernVersionOf, progressTokenOf, stampModernResult, withProgressToken,
  withoutEnvelope, type ChildIdentity, type Session,
} from './stdio-router.js';
import { StdioSupervisor, unavailable, type SupervisorOptions } from './stdio-supervisor.js';
import type { Upstream, UpstreamRequest, UpstreamResponse } from './upstream.js';

const SESSION_IDLE_MS = 60 * 60_000;
const SESSION_SWEEP_MS = 5 * 60_000;

// JSON-RPC error numbers used on this transport (the SDK's values for the same situations).
const PARSE_ERROR = -32700;
const INVALID_REQUEST = -32600;
const METHOD_NOT_FOUND = -32601;
const INTERNAL_ERROR = -32603;
const BAD_REQUEST = -32000;
const SESSION_NOT_FOUND = -32001;
const REQUEST_CANCELLED = -32800;
const UNSUPPORTED_PROTOCOL_VERSION = -32022;

export type StdioUpstreamDeps = SupervisorOptions;

type Era = 'legacy' | 'modern';

/** One client request running in the child. */
interface Route {
  /** The id the child knows it by (also its progress token there); increases with every request. */
  readonly childId: number;
  readonly clientId: JsonRpcId;
  readonly method: string;
  readonly era: Era;
  readonly session: Session | undefined;
  /** The client's own progress token, restored on the way back. */
  readonly progressToken: string | number | undefined;
  readonly sink: ReplySink;
  detach: () => void;
}

/** A server→client request relayed to a client under a gateway id, waiting for the client's answer. */
interface Relay {
  readonly childRequestId: JsonRpcId;
  readonly sessionId: string;
  readonly routeChildId: number | undefined;
}

const acceptsEventStream = (headers: Record<string, string>): boolean => (headers.accept ?? '').includes('text/event-stream');
const exited = (id: JsonRpcId): JsonRpcResponse => errorResponse(id, INTERNAL_ERROR, 'upstream process exited');

export class StdioUpstream implements Upstream {
  readonly kind = 'stdio' as const;
  readonly #logger: Logger;
  readonly #supervisor: StdioSupervisor;
  readonly #sessions = new SessionTable();
  readonly #streams = new Map<string, EventStream>();
  readonly #routes = new Map<number, Route>();
  readonly #relays = new Map<number, Relay>();
  #nextChildId = 1;
  #nextRelayId = 1;
  readonly #sweepTimer: NodeJS.Timeout;
  #closing = false;

  private constructor(command: readonly string[], deps: StdioUpstreamDeps) {
    this.#logger = deps.logger;
    this.#supervisor = new StdioSupervisor(command, deps, { onMessage: (message) => this.#fromChild(message), onExit: () => this.#childExited() });
    this.#sweepTimer = setInterval(() => this.#sweepSessions(), SESSION_SWEEP_MS).unref();
  }

  /** Spawns and initialises the child; rejects (TB_ERR_UPSTREAM_UNAVAILABLE) when the first one cannot be brought up. */
  static async start(command: string[], deps: StdioUpstreamDeps): Promise<StdioUpstream> {
    const upstream = new StdioUpstream([...command], deps);
    try {
      await upstream.#supervisor.start();
    } catch (error) {
      await upstream.close();
      throw unavailable(`the stdio upstream "${command[0] ?? ''}" did not start and initialise; check upstream.command`, error);
    }
    return upstream;
  }

  async send(request: UpstreamRequest): Promise<UpstreamResponse> {
    if (this.#closing) throw unavailable('the stdio upstream is shutting down');
    switch (request.method) {
      case 'POST':
        return this.#post(request);
      case 'GET':
        return this.#openSessionStream(request);
      case 'DELETE':
        return this.#deleteSession(request);
      default:
        return jsonReply(405, errorResponse(null, BAD_REQUEST, 'Method not allowed.'), { allow: 'GET, POST, DELETE' });
    }
  }

  async probe(): Promise<{ ok: boolean; detail: string }> {
    if (this.#supervisor.ready) return { ok: true, detail: `stdio child running (pid ${this.#supervisor.pid ?? '?'})` };
    return { ok: false, detail: 'stdio child not running' };
  }

  async close(): Promise<void> {
    this.#closing = true;
    clearInterval(this.#sweepTimer);
    for (const stream of this.#streams.values()) stream.end();
    this.#streams.clear();
    await this.#supervisor.close(); // its exit fails whatever is still running
  }

  // ── HTTP side ────────────────────────────────────────────────────────────────────────────────

  async #post(request: UpstreamRequest): Promise<UpstreamResponse> {
    let body: unknown;
    try {
      body = JSON.parse(request.body ?? '');
    } catch {
      return jsonReply(400, errorResponse(null, PARSE_ERROR, 'Parse error'));
    }
    if (Array.isArray(body)) return this.#postBatch(body, request);
    if (!isRequestLike(body) && !isResponseLike(body)) return jsonReply(400, errorResponse(null, INVALID_REQUEST, 'Invalid Request'));
    if (isRequestLike(body) && isModernRequest(body.params)) return this.#postModern(body, request);
    if (isRequestLike(body) && body.method === 'initialize' && body.id !== undefined) return this.#openSession(body);

    const found = this.#legacySession(request.headers);
    if ('reply' in found) return found.reply;
    const { session } = found;
    if (isRequestLike(body) && body.id !== undefined) {
      await this.#supervisor.waitReady(request.signal);
      const reply = new LazyReply(acceptsEventStream(request.headers), { 'mcp-session-id': session.id });
      this.#forward(body, 'legacy', session, reply, request.signal);
      return reply.response;
    }
    this.#fromClient(body, session);
    return emptyReply(202, { 'mcp-session-id': session.id });
  }

  #openSession(request: JsonRpcRequest): UpstreamResponse {
    const params = isObject(request.params) ? request.params : {};
    const result = legacyInitializeResult(params.protocolVersion, this.#identity);
    const session = this.#sessions.create(String(result.protocolVersion), isObject(params.capabilities) ? params.capabilities : {}, Date.now());
    this.#logger.debug({ evt: 'stdio_session_open', protocolVersion: result.protocolVersion }, 'legacy session opened');
    return jsonReply(200, resultResponse(request.id ?? null, result), { 'mcp-session-id': session.id });
  }

  async #postModern(request: JsonRpcRequest, upstreamRequest: UpstreamRequest): Promise<UpstreamResponse> {
    const id = request.id ?? null;
    const version = modernVersionOf(request.params);
    if (version !== MODERN_VERSION) {
      return jsonReply(400, errorResponse(id, UNSUPPORTED_PROTOCOL_VERSION, `Unsupported protocol version: ${String(version)}`, { supported: [MODERN_VERSION], requested: String(version) }));
    }
    // 2026-07-28 cancels by closing the request's stream; its notifications have nothing to do on a legacy child.
    if (request.id === undefined) return emptyReply(202);
    if (request.method === 'server/discover') return jsonReply(200, resultResponse(id, discoverResult(this.#identity)));
    if (request.method === 'initialize' || request.method === 'subscriptions/listen') {
      return jsonReply(200, errorResponse(id, METHOD_NOT_FOUND, `Method not found: ${request.method}`));
    }
    await this.#supervisor.waitReady(upstreamRequest.signal);
    const reply = new LazyReply(acceptsEventStream(upstreamRequest.headers), {});
    this.#forward(request, 'modern', undefined, reply, upstreamRequest.signal);
    return reply.response;
  }

  async #postBatch(entries: unknown[], request: UpstreamRequest): Promise<UpstreamResponse> {
    if (entries.length === 0) return jsonReply(400, errorResponse(null, INVALID_REQUEST, 'Invalid Request: empty batch'));
    if (entries.some((entry) => isRequestLike(entry) && isModernRequest(entry.params))) {
      return jsonReply(400, errorResponse(null, INVALID_REQUEST, 'Invalid Request: 2026-07-28 has no batches'));
    }
    const found = this.#legacySession(request.headers);
    if ('reply' in found) return found.reply;
    const { session } = found;
    const answered = (entry: unknown): boolean => (isRequestLike(entry) && entry.id !== undefined) || (!isRequestLike(entry) && !isResponseLike(entry));
    const slots = entries.filter(answered).length;
    if (slots === 0) {
      for (const entry of entries) this.#fromClient(entry as JsonRpcRequest | JsonRpcResponse, session);
      return emptyReply(202, { 'mcp-session-id': session.id });
    }
    await this.#supervisor.waitReady(request.signal);
    const reply = new BatchReply(slots, { 'mcp-session-id': session.id });
    let slot = 0;
    for (const entry of entries) {
      if (!answered(entry)) this.#fromClient(entry as JsonRpcRequest | JsonRpcResponse, session);
      else if (!isRequestLike(entry)) reply.answer(slot++, errorResponse(null, INVALID_REQUEST, 'Invalid Request'));
      else if (entry.method === 'initialize') reply.answer(slot++, errorResponse(entry.id ?? null, INVALID_REQUEST, 'initialize must not be part of a batch'));
      else this.#forward(entry, 'legacy', session, reply.entry(slot++), request.signal);
    }
    return reply.response;
  }

  #legacySession(headers: Record<string, string>): { session: Session } | { reply: UpstreamResponse } {
    const version = headers['mcp-protocol-version'];
    if (version !== undefined && !isLegacyVersion(version)) {
      return { reply: jsonReply(400, errorResponse(null, BAD_REQUEST, `Bad Request: Unsupported protocol version: ${version}`)) };
    }
    const id = headers['mcp-session-id'];
    if (id === undefined || id === '') return { reply: jsonReply(400, errorResponse(null, BAD_REQUEST, 'Bad Request: Mcp-Session-Id header is required')) };
    const session = this.#sessions.get(id);
    if (session === undefined) return { reply: jsonReply(404, errorResponse(null, SESSION_NOT_FOUND, 'Session not found')) };
    session.lastSeenAt = Date.now();
    return { session };
  }

  #openSessionStream(request: UpstreamRequest): UpstreamResponse {
    if (!acceptsEventStream(request.headers)) return jsonReply(406, errorResponse(null, BAD_REQUEST, 'Not Acceptable: Client must accept text/event-stream'));
    const found = this.#legacySession(request.headers);
    if ('reply' in found) return found.reply;
    const { session } = found;
    if (this.#streams.get(session.id)?.open) return jsonReply(409, errorResponse(null, BAD_REQUEST, 'Conflict: Only one SSE stream is allowed per session'));
    const stream = new EventStream({ 'mcp-session-id': session.id });
    this.#streams.set(session.id, stream);
    const onClose = (): void => {
      stream.end();
      if (this.#streams.get(session.id) === stream) this.#streams.delete(session.id);
      session.lastSeenAt = Date.now();
    };
    if (request.signal.aborted) onClose();
    else request.signal.addEventListener('abort', onClose, { once: true });
    return stream.response;
  }

  #deleteSession(request: UpstreamRequest): UpstreamResponse {
    const found = this.#legacySession(request.headers);
    if ('reply' in found) return found.reply;
    this.#endSession(found.session);
    return emptyReply(200);
  }

  #endSession(session: Session): void {
    this.#sessions.delete(session.id);
    this.#streams.get(session.id)?.end();
    this.#streams.delete(session.id);
    for (const childId of session.running.values()) {
      const route = this.#routes.get(childId);
      if (route) this.#cancel(route, 'session ended', errorResponse(route.clientId, BAD_REQUEST, 'Session terminated'));
    }
    for (const [relayId, relay] of this.#relays) if (relay.sessionId === session.id) this.#refuseRelay(relayId, relay, 'the client ended its session');
  }

  #sweepSessions(): void {
    for (const session of this.#sessions.expired(Date.now(), SESSION_IDLE_MS, (s) => this.#streams.get(s.id)?.open === true)) this.#endSession(session);
  }

  // ── client → child ───────────────────────────────────────────────────────────────────────────

  #forward(message: JsonRpcRequest, era: Era, session: Session | undefined, sink: ReplySink, signal: AbortSignal): void {
    const childId = this.#nextChildId++;
    let params = era === 'modern' ? withoutEnvelope(message.params) : message.params;
    const progressToken = progressTokenOf(params);
    if (progressToken !== undefined) params = withProgressToken(params, childId);
    const route: Route = { childId, clientId: message.id ?? null, method: message.method, era, session, progressToken, sink, detach: () => undefined };
    if (signal.aborted) return sink.abort();
    const onAbort = (): void => this.#cancel(route, 'client disconnected');
    signal.addEventListener('abort', onAbort, { once: true });
    route.detach = () => signal.removeEventListener('abort', onAbort);
    this.#routes.set(childId, route);
    session?.running.set(idKey(route.clientId), childId);
    const outgoing: JsonObject = { ...message, id: childId };
    if (params === undefined) delete outgoing.params;
    else outgoing.params = params;
    if (!this.#supervisor.write(outgoing)) this.#settle(route, exited(route.clientId));
  }

  /** Notifications and responses a legacy client POSTs. */
  #fromClient(message: JsonRpcRequest | JsonRpcResponse, session: Session): void {
    if (isResponseLike(message)) {
      const relay = typeof message.id === 'number' ? this.#relays.get(message.id) : undefined;
      if (relay === undefined || relay.sessionId !== session.id) {
        this.#logger.debug({ evt: 'stdio_stray_response' }, 'a client answered a request the gateway is not waiting for');
        return;
      }
      this.#relays.delete(message.id as number);
      const { id: _clientFacing, ...answer } = message;
      this.#supervisor.write({ ...answer, id: relay.childRequestId });
      return;
    }
    if (!isRequestLike(message)) return;
    if (message.method === 'notifications/initialized') return; // the gateway initialised the child itself
    if (message.method === 'notifications/cancelled') {
      const params = isObject(message.params) ? message.params : {};
      const requestId = params.requestId;
      const childId = typeof requestId === 'string' || typeof requestId === 'number' ? session.running.get(idKey(requestId)) : undefined;
      const route = childId === undefined ? undefined : this.#routes.get(childId);
      const reason = typeof params.reason === 'string' ? params.reason : 'cancelled by the client';
      // The POST that carried the request still waits for an answer: close it with one the client will ignore.
      if (route) this.#cancel(route, reason, errorResponse(route.clientId, REQUEST_CANCELLED, 'Request cancelled'));
      return;
    }
    this.#supervisor.write(message);
  }

  /** Stops a running request: the child hears notifications/cancelled, the client gets `answer` or a closed stream. */
  #cancel(route: Route, reason: string, answer?: JsonRpcResponse): void {
    if (!this.#drop(route)) return;
    this.#supervisor.write({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: route.childId, reason } });
    for (const [relayId, relay] of this.#relays) if (relay.routeChildId === route.childId) this.#refuseRelay(relayId, relay, 'the client went away');
    if (answer === undefined) route.sink.abort();
    else route.sink.finish(answer);
  }

  #settle(route: Route, message: JsonRpcResponse): void {
    if (this.#drop(route)) route.sink.finish(message);
  }

  /** Forgets a route; false when it was already gone. */
  #drop(route: Route): boolean {
    if (this.#routes.get(route.childId) !== route) return false;
    this.#routes.delete(route.childId);
    route.detach();
    const key = idKey(route.clientId);
    if (route.session?.running.get(key) === route.childId) route.session.running.delete(key);
    return true;
  }

  // ── child → clients ──────────────────────────────────────────────────────────────────────────

  #fromChild(message: unknown): void {
    if (isResponseLike(message)) return this.#responseFromChild(message);
    if (isRequestLike(message)) return message.id === undefined ? this.#notificationFromChild(message) : this.#requestFromChild(message);
    this.#logger.debug({ evt: 'stdio_child_invalid' }, 'stdio child sent something that is not JSON-RPC');
  }

  #responseFromChild(message: JsonRpcResponse): void {
    const route = typeof message.id === 'number' ? this.#routes.get(message.id) : undefined;
    if (route === undefined) return; // answered after a cancel or a disconnect
    const restored: JsonRpcResponse = { ...message, id: route.clientId };
    if (route.era === 'modern' && 'result' in message) restored.result = stampModernResult(route.method, message.result, this.#identity.serverInfo);
    this.#settle(route, restored);
  }

  #notificationFromChild(message: JsonRpcRequest): void {
    const params = isObject(message.params) ? message.params : {};
    if (message.method === 'notifications/progress') {
      const route = typeof params.progressToken === 'number' ? this.#routes.get(params.progressToken) : undefined;
      if (route?.progressToken !== undefined) route.sink.event({ ...message, params: { ...params, progressToken: route.progressToken } });
      return;
    }
    if (message.method === 'notifications/cancelled') {
      // The child gave up on a request it had sent to a client.
      const entry = [...this.#relays].find(([, relay]) => params.requestId !== undefined && idKey(relay.childRequestId) === idKey(params.requestId as JsonRpcId));
      if (entry === undefined) return;
      const [relayId, relay] = entry;
      this.#relays.delete(relayId);
      const cancelled = { ...message, params: { ...params, requestId: relayId } };
      const route = relay.routeChildId === undefined ? undefined : this.#routes.get(relay.routeChildId);
      if (route?.sink.event(cancelled) !== true) this.#streams.get(relay.sessionId)?.send(cancelled);
      return;
    }
    if (SERVER_WIDE_NOTIFICATIONS.has(message.method)) return this.#broadcast(message);
    // stdio does not say which request a notification belongs to: the only running one, or nobody's.
    const running = [...this.#routes.values()];
    if (running.length === 1) running[0]!.sink.event(message);
    else if (running.length === 0) this.#broadcast(message);
    else this.#logger.debug({ evt: 'stdio_notification_dropped', method: message.method }, 'several calls running: cannot tell whose notification this is');
  }

  #broadcast(message: unknown): void {
    for (const stream of this.#streams.values()) stream.send(message);
  }

  #requestFromChild(message: JsonRpcRequest): void {
    const id = message.id ?? null;
    const refuse = (code: number, text: string): void => void this.#supervisor.write(errorResponse(id, code, text));
    if (message.method === 'ping') return void this.#supervisor.write(resultResponse(id, {}));
    const capability = RELAY_CAPABILITY[message.method];
    if (capability === undefined) return refuse(METHOD_NOT_FOUND, `Method not found: ${message.method}`);

    const candidates = [...this.#routes.values()]
      .filter((route) => route.session !== undefined && route.sink.canStream && hasCapability(route.session.capabilities, capability))
      .map((route) => ({ sessionId: route.session!.id, seq: route.childId, route }));
    const target = chooseRelayTarget(candidates);
    if (target === 'ambiguous') {
      this.#logger.warn({ evt: 'stdio_relay_ambiguous', method: message.method }, 'a server→client request arrived while calls of several clients were running; refused it');
      return refuse(INTERNAL_ERROR, `${message.method}: several clients have calls running; the gateway cannot tell which one this is for`);
    }
    const relayId = this.#nextRelayId++;
    const relayed = { ...message, id: relayId };
    if (target !== 'none') {
      this.#relays.set(relayId, { childRequestId: id, sessionId: target.sessionId, routeChildId: target.route.childId });
      if (target.route.sink.event(relayed)) return;
      this.#relays.delete(relayId);
    } else {
      // Nothing running can take it (e.g. roots/list after roots changed): a single listening client may.
      const listening = [...this.#sessions.values()].filter((s) => this.#streams.get(s.id)?.open === true && hasCapability(s.capabilities, capability));
      if (listening.length === 1) {
        this.#relays.set(relayId, { childRequestId: id, sessionId: listening[0]!.id, routeChildId: undefined });
        if (this.#streams.get(listening[0]!.id)!.send(relayed)) return;
        this.#relays.delete(relayId);
      }
    }
    refuse(METHOD_NOT_FOUND, `${message.method}: no connected client can answer it`);
  }

  #refuseRelay(relayId: number, relay: Relay, why: string): void {
    this.#relays.delete(relayId);
    this.#supervisor.write(errorResponse(relay.childRequestId, INTERNAL_ERROR, why));
  }

  /** The child died: calls in flight get an error result; relayed requests died with it. */
  #childExited(): void {
    for (const route of [...this.#routes.values()]) this.#settle(route, exited(route.clientId));
    this.#relays.clear();
  }

  /** Set once start() resolved; a restart keeps the last identity until the new child has answered. */
  get #identity(): ChildIdentity {
    const identity = this.#supervisor.identity;
    if (identity === undefined) throw new Error('the stdio child was never initialised');
    return identity;
  }
}
