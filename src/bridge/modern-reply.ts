// How a 2026-07-28 request is answered (POST only, no session): a JSON body when the result is all there is
// to say, an event stream once something has to come before it (only when the client's Accept allows one;
// otherwise those messages are dropped and only the result is sent). A reader too slow to take what the
// shared child produces has its stream cut instead of growing the bridge's memory.
import type { ServerResponse } from 'node:http';
import { SSE_HEADERS, sendJson } from './http.js';
import type { ReplySink } from './multiplexer.js';

const sseEvent = (message: unknown): string => `event: message\ndata: ${JSON.stringify(message)}\n\n`;

export class ModernReply implements ReplySink {
  readonly canStream: boolean;
  readonly #res: ServerResponse;
  readonly #maxBufferedBytes: number;
  readonly #onSlowReader: () => void;
  #streaming = false;

  constructor(res: ServerResponse, acceptsEventStream: boolean, maxBufferedBytes: number, onSlowReader: () => void) {
    this.#res = res;
    this.canStream = acceptsEventStream;
    this.#maxBufferedBytes = maxBufferedBytes;
    this.#onSlowReader = onSlowReader;
  }

  event(message: unknown): boolean {
    if (!this.canStream || this.#res.destroyed || this.#res.writableEnded) return false;
    if (!this.#streaming) {
      if (this.#res.headersSent) return false;
      this.#streaming = true;
      this.#res.writeHead(200, SSE_HEADERS);
      this.#res.flushHeaders();
    }
    this.#res.write(sseEvent(message));
    if (this.#res.writableLength > this.#maxBufferedBytes) {
      this.#onSlowReader();
      this.#res.destroy();
      return false;
    }
    return true;
  }

  finish(message: unknown): void {
    if (this.#res.destroyed || this.#res.writableEnded) return;
    if (this.#streaming) this.#res.end(sseEvent(message));
    else sendJson(this.#res, 200, message);
  }
}
