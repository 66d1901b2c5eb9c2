// A legacy client session on the shared child (`sessions: shared`). The bridge answers the client's
// initialize itself, from the child's own initialize result (the child was initialised once, by the bridge,
// with SHARED_CHILD_CAPABILITIES); everything else goes through the Multiplexer with rewritten ids.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { errorResponse, isObject, isRequestLike, resultResponse, type JsonObject, type JsonRpcRequest, type JsonRpcResponse } from '../mcp/jsonrpc.js';
import type { Logger } from '../observability/logger.js';
import type { EventBufferLimits } from './event-store.js';
import { channelSink, type MuxSession, type Multiplexer } from './multiplexer.js';
import { BRIDGE_ERROR, legacyInitializeResult } from './protocol.js';
import { channelLimits, SessionChannel } from './session-channel.js';
import type { StdioSupervisor } from './supervisor.js';

export interface SharedSessionOptions {
  mux: Multiplexer;
  supervisor: StdioSupervisor;
  logger: Logger;
  eventBuffer: EventBufferLimits;
  maxBufferedBytes: number;
  onSessionId(session: SharedSession, sessionId: string): void;
  onEnded(session: SharedSession): void;
}

export class SharedSession implements MuxSession {
  id = '';
  capabilities: JsonObject = {};
  readonly channel: SessionChannel;
  readonly running = new Map<string, number>();
  readonly #options: SharedSessionOptions;
  #ended = false;

  constructor(options: SharedSessionOptions) {
    this.#options = options;
    this.channel = new SessionChannel({
      ...channelLimits(options),
      onMessage: (message) => void this.#fromClient(message),
      onHeldDropped: () => undefined, // relayed requests time out in the child like any unanswered request
      onSessionId: (sessionId) => {
        this.id = sessionId;
        options.mux.addSession(this);
        options.onSessionId(this, sessionId);
      },
      onDeleted: () => void this.end('the client deleted the session'),
    });
  }

  get sessionId(): string | undefined {
    return this.channel.sessionId;
  }

  idleFor(now: number): number {
    return this.channel.connected ? 0 : now - this.channel.lastActivityAt;
  }

  handle(req: IncomingMessage, res: ServerResponse, parsedBody?: unknown): Promise<void> {
    return this.channel.handle(req, res, parsedBody);
  }

  async end(why: string): Promise<void> {
    if (this.#ended) return;
    this.#ended = true;
    this.#options.logger.debug({ evt: 'bridge_session_end', session: this.id, why }, 'shared-child session ended');
    this.#options.mux.removeSession(this);
    this.#options.onEnded(this);
    await this.channel.close();
  }

  async #fromClient(message: JSONRPCMessage): Promise<void> {
    if (!isRequestLike(message) || message.id === undefined) {
      this.#options.mux.fromClient(message as JsonRpcRequest | JsonRpcResponse, this);
      return;
    }
    const request = message as JsonRpcRequest;
    const id = request.id ?? null;
    // A request arriving while the child restarts waits for it (bounded); the order of this session's requests is kept.
    const ready = this.#options.supervisor.ready || (await this.#options.supervisor.waitReady());
    const identity = this.#options.supervisor.identity;
    if (!ready || identity === undefined) {
      this.channel.sendResponse(errorResponse(id, BRIDGE_ERROR.childGone.code, this.#options.supervisor.detail, { reason: BRIDGE_ERROR.childGone.reason }) as JSONRPCMessage);
      return;
    }
    if (request.method === 'initialize') {
      const params = isObject(request.params) ? request.params : {};
      this.capabilities = isObject(params.capabilities) ? params.capabilities : {};
      this.channel.sendResponse(resultResponse(id, legacyInitializeResult(params.protocolVersion, identity)) as JSONRPCMessage);
      return;
    }
    this.#options.mux.forward(request, 'legacy', this, channelSink(this.channel, id));
  }
}
