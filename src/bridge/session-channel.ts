// One legacy client session over HTTP: the MCP SDK's own Streamable HTTP server transport (session id, POST
// replies as SSE, the GET stream, DELETE, protocol-version and Accept checks, batches, Last-Event-ID replay)
// with a bounded event store, used without a Server object: raw JSON-RPC in through `onMessage`, raw
// JSON-RPC out through the send methods. What the channel adds:
// - sends are chained, so messages leave in the order the child wrote them;
// - messages for the GET stream wait (bounded) while the client has none open, instead of being lost
//   between `initialized` and the client's GET (a server asking `roots/list` right after initialize);
// - it knows whether the client is connected at all (any open response), for the idle reaper;
// - response backpressure is reported through `Flow`, so the owner can stop reading the child.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import type { JSONRPCMessage, RequestId } from '@modelcontextprotocol/sdk/types.js';
import type { Logger } from '../observability/logger.js';
import { BoundedEventStore, knownSizes, type EventBufferLimits } from './event-store.js';
import { pipeResponse, toWebRequest, type Flow } from './http.js';
import { systemClock } from '../clock.js';

/** The SDK transport's name for the GET stream (event ids of that stream start with it). */
const STANDALONE_STREAM_ID = '_GET_stream';
const MAX_HELD_MESSAGES = 100;
const MAX_HELD_BYTES = 1024 * 1024;

export interface ChannelOptions {
  logger: Logger;
  eventBuffer: EventBufferLimits;
  /** Set for a session whose own child can be paused; without it a slow reader's response is cut past `maxBufferedBytes`. */
  flow?: Flow;
  maxBufferedBytes: number;
  /** Every message the client POSTs (requests, notifications, responses), in order. */
  onMessage(message: JSONRPCMessage): void;
  /** A message waiting for the GET stream was dropped by the bound (the owner refuses it if it was a request). */
  onHeldDropped(message: JSONRPCMessage): void;
  /** The transport minted the session id (while answering initialize, before the client can use it). */
  onSessionId(sessionId: string): void;
  /** The client deleted the session (DELETE). */
  onDeleted(): void;
}

/** What a session hands its channel as it got it: the logger and the buffer bounds. */
export type ChannelLimits = Pick<ChannelOptions, 'logger' | 'eventBuffer' | 'maxBufferedBytes'>;

export const channelLimits = ({ logger, eventBuffer, maxBufferedBytes }: ChannelLimits): ChannelLimits => ({ logger, eventBuffer, maxBufferedBytes });

export class SessionChannel {
  readonly transport: WebStandardStreamableHTTPServerTransport;
  readonly #options: ChannelOptions;
  readonly #events: BoundedEventStore;
  #chain: Promise<void> = Promise.resolve();
  #openResponses = 0;
  /** Client request ids whose POST stream is open right now (key: JSON of the id). */
  readonly #streamingRequests = new Map<string, number>();
  #standaloneOpen = false;
  #held: JSONRPCMessage[] = [];
  #heldBytes = 0;
  #congested = 0;
  #closed = false;
  lastActivityAt = systemClock.monotonic();

  constructor(options: ChannelOptions) {
    this.#options = options;
    this.#events = new BoundedEventStore(options.eventBuffer, (count) =>
      options.logger.debug({ evt: 'bridge_events_dropped', session: this.transport.sessionId, count }, 'event buffer full: oldest events dropped'),
    );
    this.transport = new WebStandardStreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      eventStore: this.#events,
      onsessioninitialized: (sessionId) => options.onSessionId(sessionId),
      onsessionclosed: () => options.onDeleted(),
    });
    this.transport.onmessage = (message) => options.onMessage(message);
    this.transport.onerror = (error) => options.logger.debug({ evt: 'bridge_transport_error', session: this.transport.sessionId, err: error.message }, 'session transport error');
  }

  get sessionId(): string | undefined {
    return this.transport.sessionId;
  }

  /** Whether the client holds any response of this session open (a running call's stream, the GET stream). */
  get connected(): boolean {
    return this.#openResponses > 0;
  }

  /** Whether the POST that carried this request is still open (its stream can reach the client). */
  isStreaming(requestId: RequestId): boolean {
    return this.#streamingRequests.has(JSON.stringify(requestId));
  }

  /** Whether the client has its GET stream open. */
  get listening(): boolean {
    return this.#standaloneOpen;
  }

  /** Serves one HTTP request of this session (the body, when there is one, already parsed). */
  async handle(req: IncomingMessage, res: ServerResponse, parsedBody?: unknown): Promise<void> {
    this.lastActivityAt = systemClock.monotonic();
    this.#openResponses += 1;
    const requestKeys = requestKeysOf(parsedBody);
    for (const key of requestKeys) this.#streamingRequests.set(key, (this.#streamingRequests.get(key) ?? 0) + 1);
    let standalone = false;
    try {
      const lastEventId = req.headers['last-event-id'];
      if (typeof lastEventId === 'string' && this.#events.lostAfter(lastEventId)) {
        this.#options.logger.warn({ evt: 'bridge_resume_gap', session: this.sessionId }, 'a stream resumed after events the buffer had already dropped');
      }
      const response = await this.transport.handleRequest(toWebRequest(req), parsedBody === undefined ? undefined : { parsedBody });
      standalone = req.method === 'GET' && response.ok && (typeof lastEventId !== 'string' || lastEventId.startsWith(`${STANDALONE_STREAM_ID}.`));
      if (standalone) {
        this.#standaloneOpen = true;
        for (const message of this.takeHeld()) this.sendStandalone(message);
      }
      await pipeResponse(response, res, {
        flushHeaders: req.method === 'GET',
        flow: this.#options.flow === undefined ? undefined : { onCongested: () => this.#onCongested(), onDrained: () => this.#onDrained() },
        maxBufferedBytes: this.#options.flow === undefined ? this.#options.maxBufferedBytes : undefined,
        onSlowReader: () => this.#options.logger.warn({ evt: 'bridge_slow_reader', session: this.sessionId }, 'a client stopped reading its stream; the stream was cut (it may resume)'),
      });
    } finally {
      if (standalone) this.#standaloneOpen = false;
      this.#openResponses -= 1;
      for (const key of requestKeys) {
        const count = (this.#streamingRequests.get(key) ?? 1) - 1;
        if (count > 0) this.#streamingRequests.set(key, count);
        else this.#streamingRequests.delete(key);
      }
      this.lastActivityAt = systemClock.monotonic();
    }
  }

  /** A response to a client request: the transport routes it by id to that request's stream. */
  sendResponse(message: JSONRPCMessage, bytes?: number): void {
    this.#send(message, undefined, bytes);
  }

  /** A notification or server→client request on the stream of a running client request. */
  sendRelated(message: JSONRPCMessage, requestId: RequestId, bytes?: number): void {
    this.#send(message, requestId, bytes);
  }

  /** A message tied to no request: the GET stream, or held until the client opens one (or a request takes it). */
  sendStandalone(message: JSONRPCMessage, bytes?: number): void {
    if (this.#standaloneOpen) {
      this.#send(message, undefined, bytes);
      return;
    }
    const size = bytes ?? Buffer.byteLength(JSON.stringify(message));
    this.#held.push(message);
    knownSizes.set(message, size);
    this.#heldBytes += size;
    while (this.#held.length > MAX_HELD_MESSAGES || (this.#heldBytes > MAX_HELD_BYTES && this.#held.length > 1)) {
      const dropped = this.#held.shift() as JSONRPCMessage;
      this.#heldBytes -= knownSizes.get(dropped) ?? 0;
      this.#options.onHeldDropped(dropped);
    }
  }

  /** Messages held for a GET stream, handed to the caller (who sends them on a request's stream instead). */
  takeHeld(): JSONRPCMessage[] {
    const held = this.#held;
    this.#held = [];
    this.#heldBytes = 0;
    return held;
  }

  /** Ends the session: open streams end after what was already sent; the next request gets 404. */
  close(): Promise<void> {
    if (this.#closed) return this.#chain;
    this.#closed = true;
    this.#held = [];
    this.#chain = this.#chain.then(() => this.transport.close());
    return this.#chain;
  }

  #send(message: JSONRPCMessage, relatedRequestId: RequestId | undefined, bytes: number | undefined): void {
    if (this.#closed) return;
    if (bytes !== undefined) knownSizes.set(message, bytes);
    this.#chain = this.#chain
      .then(() => this.transport.send(message, relatedRequestId === undefined ? undefined : { relatedRequestId }))
      .catch((error: unknown) => {
        // The request's stream is gone and cannot be resumed (an older client disconnected): nobody to tell.
        this.#options.logger.debug({ evt: 'bridge_undeliverable', session: this.sessionId, err: (error as Error).message }, 'a message for a closed stream was dropped');
      });
  }

  #onCongested(): void {
    if (this.#congested++ === 0) this.#options.flow?.onCongested();
  }

  #onDrained(): void {
    if (--this.#congested === 0) this.#options.flow?.onDrained();
  }
}

/** The ids of the requests in a POST body (one message or a batch). */
function requestKeysOf(body: unknown): string[] {
  const messages = Array.isArray(body) ? body : body === undefined ? [] : [body];
  const keys: string[] = [];
  for (const message of messages) {
    if (typeof message === 'object' && message !== null && 'method' in message && 'id' in message) keys.push(JSON.stringify((message as { id: unknown }).id));
  }
  return keys;
}
