// How the stdio upstream answers an HTTP request the way a Streamable HTTP server would: a JSON body
// when the result is all there is to say, an event stream once something has to come before it.
import { PassThrough, Readable } from 'node:stream';
import { GatewayError } from '../errors.js';
import type { UpstreamResponse } from './upstream.js';

const SSE_HEADERS = { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-accel-buffering': 'no' } as const;

export const sseEvent = (message: unknown): string => `event: message\ndata: ${JSON.stringify(message)}\n\n`;

export function jsonReply(status: number, body: unknown, headers: Record<string, string> = {}): UpstreamResponse {
  return { status, headers: { 'content-type': 'application/json', ...headers }, body: Readable.from([JSON.stringify(body)]) };
}

export function emptyReply(status: number, headers: Record<string, string> = {}): UpstreamResponse {
  return { status, headers, body: Readable.from([]) };
}

const abortedError = (): GatewayError => new GatewayError('TB_ERR_UPSTREAM_TIMEOUT', 'the upstream request was aborted');

/** Where the messages of one running request go. */
export interface ReplySink {
  /** Whether messages before the result (notifications, relayed server→client requests) can reach the client. */
  readonly canStream: boolean;
  /** A message before the result; false when it could not be delivered. */
  event(message: unknown): boolean;
  /** The result (or error) of the request; nothing is sent after it. */
  finish(message: unknown): void;
  /** The client went away. */
  abort(): void;
}

/** A long-lived event stream: a session's GET stream. */
export class EventStream {
  readonly body = new PassThrough();
  readonly response: UpstreamResponse;

  constructor(headers: Record<string, string>) {
    this.response = { status: 200, headers: { ...SSE_HEADERS, ...headers }, body: this.body };
  }

  get open(): boolean {
    return !this.body.writableEnded && !this.body.destroyed;
  }

  send(message: unknown): boolean {
    if (!this.open) return false;
    this.body.write(sseEvent(message));
    return true;
  }

  end(): void {
    if (this.open) this.body.end();
  }
}

/**
 * The reply to a POST holding one request. `response` settles with the first message: the result alone
 * becomes `application/json`; anything before it turns the reply into `text/event-stream` (only when the
 * client's Accept allows one; otherwise those messages are refused and only the result is sent).
 */
export class LazyReply implements ReplySink {
  readonly response: Promise<UpstreamResponse>;
  readonly canStream: boolean;
  readonly #headers: Record<string, string>;
  #resolve!: (response: UpstreamResponse) => void;
  #reject!: (error: unknown) => void;
  #stream: EventStream | undefined;
  #settled = false;

  constructor(acceptsEventStream: boolean, headers: Record<string, string>) {
    this.canStream = acceptsEventStream;
    this.#headers = headers;
    this.response = new Promise((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
    this.response.catch(() => undefined); // settled by abort() after the caller stopped listening
  }

  event(message: unknown): boolean {
    if (!this.canStream) return false;
    if (this.#stream === undefined) {
      if (this.#settled) return false;
      this.#stream = new EventStream(this.#headers);
      this.#settled = true;
      this.#resolve(this.#stream.response);
    }
    return this.#stream.send(message);
  }

  finish(message: unknown): void {
    if (this.#stream !== undefined) {
      this.#stream.send(message);
      this.#stream.end();
      return;
    }
    if (this.#settled) return;
    this.#settled = true;
    this.#resolve(jsonReply(200, message, this.#headers));
  }

  abort(): void {
    if (this.#stream !== undefined) this.#stream.end();
    else if (!this.#settled) {
      this.#settled = true;
      this.#reject(abortedError());
    }
  }
}

/** The reply to a batch (2025-03-26): one JSON array, in request order, once every entry has its answer. */
export class BatchReply {
  readonly response: Promise<UpstreamResponse>;
  readonly #answers: unknown[];
  readonly #headers: Record<string, string>;
  #missing: number;
  #resolve!: (response: UpstreamResponse) => void;
  #reject!: (error: unknown) => void;
  #settled = false;

  constructor(size: number, headers: Record<string, string>) {
    this.#answers = new Array<unknown>(size);
    this.#missing = size;
    this.#headers = headers;
    this.response = new Promise((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
    this.response.catch(() => undefined);
    if (size === 0) this.#complete();
  }

  answer(index: number, message: unknown): void {
    if (this.#settled || this.#answers[index] !== undefined) return;
    this.#answers[index] = message;
    if (--this.#missing === 0) this.#complete();
  }

  /** A sink for one forwarded entry; batches carry no event stream, so only the result counts. */
  entry(index: number): ReplySink {
    return {
      canStream: false,
      event: () => false,
      finish: (message) => this.answer(index, message),
      abort: () => this.abort(),
    };
  }

  abort(): void {
    if (this.#settled) return;
    this.#settled = true;
    this.#reject(abortedError());
  }

  #complete(): void {
    this.#settled = true;
    this.#resolve(jsonReply(200, this.#answers, this.#headers));
  }
}
