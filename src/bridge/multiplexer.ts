// One child shared by many clients (SPEC §5.5: `sessions: shared`, and each 2026-07-28 child, which serves
// every request declaring the same capabilities). The bridge initialised the child itself; every request
// gets a bridge-unique JSON-RPC id (and progress token) on its way in, so clients never collide, and
// whatever the child sends back is routed to the request it belongs to:
// - responses by their rewritten id, progress by its rewritten token;
// - list_changed/updated to every legacy session (their GET streams);
// - other notifications to the only running call, or to the GET streams when none runs, and dropped when
//   several run (stdio does not say whose they are);
// - a server→client request to the running call of the one session that declared the capability it needs,
//   else to the one listening session that declared it, else it is refused.
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { errorResponse, isObject, isRequestLike, isResponseLike, resultResponse, type JsonObject, type JsonRpcId, type JsonRpcRequest, type JsonRpcResponse } from '../mcp/jsonrpc.js';
import { RPC } from '../errors.js';
import type { Logger } from '../observability/logger.js';
import type { WriteOutcome } from './child.js';
import {
  BRIDGE_ERROR, RELAY_CAPABILITY, SERVER_WIDE_NOTIFICATIONS, chooseRelayTarget, hasCapability, idKey, progressTokenOf, stampModernResult,
  withProgressToken, withoutEnvelope, type ChildIdentity,
} from './protocol.js';
import type { SessionChannel } from './session-channel.js';


/** What the multiplexer needs from the child under it (the shared supervisor, or one 2026-07-28 child). */
export interface ChildPort {
  write(message: unknown): WriteOutcome;
  readonly identity: ChildIdentity | undefined;
}

/** Where the messages of one running request go. */
export interface ReplySink {
  /** Whether messages before the result (notifications, relayed server→client requests) can reach the client. */
  readonly canStream: boolean;
  /** A message before the result; false when it could not be delivered. */
  event(message: unknown, bytes?: number): boolean;
  /** The result (or error) of the request; nothing is sent after it. */
  finish(message: unknown, bytes?: number): void;
}

/** A legacy client session on a shared child. */
export interface MuxSession {
  readonly id: string;
  readonly capabilities: JsonObject;
  readonly channel: SessionChannel;
  /** Client request id → child id, for the requests of this session still running. */
  readonly running: Map<string, number>;
}

type Era = 'legacy' | 'modern';

/** One client request running in the child. */
interface Route {
  /** The id the child knows it by (also its progress token there); increases with every request. */
  readonly childId: number;
  readonly clientId: JsonRpcId;
  readonly method: string;
  readonly era: Era;
  readonly session: MuxSession | undefined;
  /** The client's own progress token, restored on the way back. */
  readonly progressToken: string | number | undefined;
  readonly sink: ReplySink;
  detach: () => void;
}

/** A server→client request relayed to a client under a bridge id, waiting for the client's answer. */
interface Relay {
  readonly childRequestId: JsonRpcId;
  readonly sessionId: string;
  readonly routeChildId: number | undefined;
}

/** The sink of a legacy request on a session channel: everything on that request's stream. */
export function channelSink(channel: SessionChannel, clientId: JsonRpcId): ReplySink {
  return {
    canStream: true,
    event: (message, bytes) => {
      channel.sendRelated(message as JSONRPCMessage, clientId as string | number, bytes);
      return true;
    },
    finish: (message, bytes) => channel.sendResponse(message as JSONRPCMessage, bytes),
  };
}

export class Multiplexer {
  readonly #port: ChildPort;
  readonly #logger: Logger;
  readonly #sessions = new Map<string, MuxSession>();
  readonly #routes = new Map<number, Route>();
  readonly #relays = new Map<number, Relay>();
  #nextChildId = 1;
  #nextRelayId = 1;

  constructor(port: ChildPort, logger: Logger) {
    this.#port = port;
    this.#logger = logger;
  }

  /** Requests running in the child right now. */
  get running(): number {
    return this.#routes.size;
  }

  addSession(session: MuxSession): void {
    this.#sessions.set(session.id, session);
  }

  /** The session is over: its running calls are cancelled in the child, its relayed requests refused. */
  removeSession(session: MuxSession): void {
    this.#sessions.delete(session.id);
    for (const childId of session.running.values()) {
      const route = this.#routes.get(childId);
      if (route) this.#cancel(route, 'session ended');
    }
    for (const [relayId, relay] of this.#relays) if (relay.sessionId === session.id) this.#refuseRelay(relayId, relay, 'the client ended its session');
  }

  // ── client → child ───────────────────────────────────────────────────────────────────────────

  /** Sends a client request to the child under a fresh id; `signal` (2026-07-28) cancels it when the client goes. */
  forward(message: JsonRpcRequest, era: Era, session: MuxSession | undefined, sink: ReplySink, signal?: AbortSignal): void {
    const childId = this.#nextChildId++;
    let params = era === 'modern' ? withoutEnvelope(message.params) : message.params;
    const progressToken = progressTokenOf(params);
    if (progressToken !== undefined) params = withProgressToken(params, childId);
    const route: Route = { childId, clientId: message.id ?? null, method: message.method, era, session, progressToken, sink, detach: () => undefined };
    if (signal?.aborted) return;
    if (signal) {
      const onAbort = (): void => this.#cancel(route, 'client disconnected');
      signal.addEventListener('abort', onAbort, { once: true });
      route.detach = () => signal.removeEventListener('abort', onAbort);
    }
    this.#routes.set(childId, route);
    session?.running.set(idKey(route.clientId), childId);
    const outgoing: JsonObject = { ...message, id: childId };
    if (params === undefined) delete outgoing.params;
    else outgoing.params = params;
    const outcome = this.#port.write(outgoing);
    if (outcome === 'full') {
      this.#settle(route, errorResponse(route.clientId, BRIDGE_ERROR.stdinFull.code, 'the stdio server is not reading its input; the request was refused (try again later)', { reason: BRIDGE_ERROR.stdinFull.reason }));
    } else if (outcome === 'gone') {
      this.#settle(route, errorResponse(route.clientId, BRIDGE_ERROR.childGone.code, 'the stdio server is not running', { reason: BRIDGE_ERROR.childGone.reason }));
    }
  }

  /** Notifications and responses a legacy client POSTs. */
  fromClient(message: JsonRpcRequest | JsonRpcResponse, session: MuxSession): void {
    if (isResponseLike(message)) {
      const relay = typeof message.id === 'number' ? this.#relays.get(message.id) : undefined;
      if (relay === undefined || relay.sessionId !== session.id) {
        this.#logger.debug({ evt: 'bridge_stray_response' }, 'a client answered a request the bridge is not waiting for');
        return;
      }
      this.#relays.delete(message.id as number);
      const { id: _clientFacing, ...answer } = message;
      this.#port.write({ ...answer, id: relay.childRequestId });
      return;
    }
    if (!isRequestLike(message)) return;
    if (message.method === 'notifications/initialized') return; // the bridge initialised the child itself
    if (message.method === 'notifications/cancelled') {
      const params = isObject(message.params) ? message.params : {};
      const requestId = params.requestId;
      const childId = typeof requestId === 'string' || typeof requestId === 'number' ? session.running.get(idKey(requestId)) : undefined;
      const route = childId === undefined ? undefined : this.#routes.get(childId);
      const reason = typeof params.reason === 'string' ? params.reason : 'cancelled by the client';
      // The POST that carried the request still waits for an answer: close it with one the client will ignore.
      if (route) this.#cancel(route, reason, errorResponse(route.clientId, BRIDGE_ERROR.cancelled.code, 'Request cancelled', { reason: BRIDGE_ERROR.cancelled.reason }));
      return;
    }
    this.#port.write(message);
  }

  /** Stops a running request: the child hears notifications/cancelled, the client gets `answer` (if any). */
  #cancel(route: Route, reason: string, answer?: JsonRpcResponse): void {
    if (!this.#drop(route)) return;
    this.#port.write({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: route.childId, reason } });
    for (const [relayId, relay] of this.#relays) if (relay.routeChildId === route.childId) this.#refuseRelay(relayId, relay, 'the client went away');
    if (answer !== undefined) route.sink.finish(answer);
  }

  #settle(route: Route, message: JsonRpcResponse, bytes?: number): void {
    if (this.#drop(route)) route.sink.finish(message, bytes);
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

  fromChild(message: unknown, bytes: number): void {
    if (isResponseLike(message)) return this.#responseFromChild(message, bytes);
    if (isRequestLike(message)) return message.id === undefined ? this.#notificationFromChild(message, bytes) : this.#requestFromChild(message);
    this.#logger.debug({ evt: 'bridge_child_invalid' }, 'the stdio server wrote something that is not JSON-RPC');
  }

  /** The child died: calls in flight get an error result; relayed requests died with it. */
  childExited(why: string): void {
    for (const route of [...this.#routes.values()]) {
      this.#settle(route, errorResponse(route.clientId, BRIDGE_ERROR.childGone.code, why, { reason: BRIDGE_ERROR.childGone.reason }));
    }
    this.#relays.clear();
  }

  #responseFromChild(message: JsonRpcResponse, bytes: number): void {
    const route = typeof message.id === 'number' ? this.#routes.get(message.id) : undefined;
    if (route === undefined) return; // answered after a cancel or a disconnect
    const restored: JsonRpcResponse = { ...message, id: route.clientId };
    const identity = this.#port.identity;
    if (route.era === 'modern' && 'result' in message && identity) {
      restored.result = stampModernResult(route.method, message.result, identity.serverInfo);
      this.#settle(route, restored);
    } else this.#settle(route, restored, bytes);
  }

  #notificationFromChild(message: JsonRpcRequest, bytes: number): void {
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
      if (route?.sink.event(cancelled) !== true) this.#sessions.get(relay.sessionId)?.channel.sendStandalone(cancelled);
      return;
    }
    if (SERVER_WIDE_NOTIFICATIONS.has(message.method)) return this.#broadcast(message, bytes);
    // stdio does not say which request a notification belongs to: the only running one, or nobody's.
    const running = [...this.#routes.values()];
    if (running.length === 1) running[0]!.sink.event(message, bytes);
    else if (running.length === 0) this.#broadcast(message, bytes);
    else this.#logger.debug({ evt: 'bridge_notification_dropped', method: message.method }, 'several calls running: cannot tell whose notification this is');
  }

  #broadcast(message: unknown, bytes: number): void {
    for (const session of this.#sessions.values()) session.channel.sendStandalone(message as JSONRPCMessage, bytes);
  }

  #requestFromChild(message: JsonRpcRequest): void {
    const id = message.id ?? null;
    const refuse = (code: number, text: string): void => void this.#port.write(errorResponse(id, code, text));
    if (message.method === 'ping') return void this.#port.write(resultResponse(id, {}));
    const capability = RELAY_CAPABILITY[message.method];
    if (capability === undefined) return refuse(RPC.METHOD_NOT_FOUND, `Method not found: ${message.method}`);

    const candidates = [...this.#routes.values()]
      .filter((route) => route.session !== undefined && route.sink.canStream && hasCapability(route.session.capabilities, capability))
      .map((route) => ({ sessionId: route.session!.id, seq: route.childId, route }));
    const target = chooseRelayTarget(candidates);
    if (target === 'ambiguous') {
      this.#logger.warn({ evt: 'bridge_relay_ambiguous', method: message.method }, 'a server→client request arrived while calls of several clients were running; refused it');
      return refuse(RPC.INTERNAL_ERROR, `${message.method}: several clients have calls running; the bridge cannot tell which one this is for`);
    }
    const relayId = this.#nextRelayId++;
    const relayed = { ...message, id: relayId };
    if (target !== 'none') {
      this.#relays.set(relayId, { childRequestId: id, sessionId: target.sessionId, routeChildId: target.route.childId });
      if (target.route.sink.event(relayed)) return;
      this.#relays.delete(relayId);
    } else {
      // Nothing running can take it (e.g. roots/list after roots changed): a single listening client may.
      const listening = [...this.#sessions.values()].filter((s) => s.channel.listening && hasCapability(s.capabilities, capability));
      if (listening.length === 1) {
        this.#relays.set(relayId, { childRequestId: id, sessionId: listening[0]!.id, routeChildId: undefined });
        listening[0]!.channel.sendStandalone(relayed as JSONRPCMessage);
        return;
      }
    }
    refuse(RPC.METHOD_NOT_FOUND, `${message.method}: no connected client can answer it`);
  }

  #refuseRelay(relayId: number, relay: Relay, why: string): void {
    this.#relays.delete(relayId);
    this.#port.write(errorResponse(relay.childRequestId, RPC.INTERNAL_ERROR, why));
  }
}
