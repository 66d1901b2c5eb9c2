// The node:http side of the bridge: bodies read with a limit, JSON answers, and the two adapters around the
// SDK's web-standard transport (IncomingMessage → Request, Response → ServerResponse). Response bodies are
// pumped eagerly, so what a slow reader has not taken yet sits in the ServerResponse where it can be
// measured; `Flow` hears when a response backs up and when it drained.
import type { IncomingMessage, ServerResponse } from 'node:http';

export const SSE_HEADERS = { 'content-type': 'text/event-stream', 'cache-control': 'no-cache, no-transform', 'x-accel-buffering': 'no' } as const;

export type BodyRead = { text: string } | { tooLarge: true };

export async function readBody(req: IncomingMessage, limit: number): Promise<BodyRead> {
  if (Number(req.headers['content-length'] ?? 0) > limit) {
    req.resume();
    return { tooLarge: true };
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > limit) {
      req.resume();
      return { tooLarge: true };
    }
    chunks.push(chunk as Buffer);
  }
  return { text: Buffer.concat(chunks, size).toString('utf8') };
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (res.headersSent || res.destroyed) return;
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)), ...headers });
  res.end(text);
}

export const acceptsEventStream = (req: IncomingMessage): boolean => (req.headers.accept ?? '').includes('text/event-stream');

/** The request as the SDK's web-standard transport reads it: method, URL and headers (the body is passed parsed). */
export function toWebRequest(req: IncomingMessage): Request {
  const headers = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    if (value === undefined) continue;
    for (const one of Array.isArray(value) ? value : [value]) headers.append(name, one);
  }
  return new Request(`http://bridge.local${req.url ?? '/'}`, { method: req.method ?? 'GET', headers });
}

export interface Flow {
  /** The response has more unsent bytes than its high-water mark. */
  onCongested(): void;
  /** It drained (called once after each onCongested, also when the response closes while congested). */
  onDrained(): void;
}

export interface PipeOptions {
  flow?: Flow;
  /** A response holding more unsent bytes than this is cut: the reader is too slow (it may resume). */
  maxBufferedBytes?: number;
  onSlowReader?(): void;
  /**
   * Send the status line and headers now instead of with the first event. A GET stream may carry no
   * event for minutes; without this its client learns the stream is open only at the transport's first
   * keep-alive comment (15 s).
   */
  flushHeaders?: boolean;
}

/** Writes a web Response to a ServerResponse; resolves when the body ended or either side went away. */
export async function pipeResponse(response: Response, res: ServerResponse, options: PipeOptions = {}): Promise<void> {
  const headers: Record<string, string> = {};
  response.headers.forEach((value, name) => (headers[name] = value));
  res.writeHead(response.status, headers);
  if (response.body === null) {
    res.end();
    return;
  }
  if (options.flushHeaders) res.flushHeaders();
  const reader = response.body.getReader();
  // Writes that come in one burst leave in one packet (headers with the first event, the last event with
  // the end of the stream): the response is corked on a write and uncorked once the burst is over.
  let corked = false;
  const uncork = (): void => {
    corked = false;
    if (!res.destroyed && !res.writableEnded) res.uncork();
  };
  let congested = false;
  const drained = (): void => {
    if (!congested) return;
    congested = false;
    options.flow?.onDrained();
  };
  const gone = (): void => {
    drained();
    reader.cancel().catch(() => undefined);
  };
  res.on('drain', drained);
  res.once('close', gone);
  try {
    for (;;) {
      const { done, value } = (await reader.read()) as { done: true; value?: undefined } | { done: false; value: Uint8Array }; // a fetch body's chunks are bytes
      if (done || res.destroyed) break;
      if (!corked) {
        corked = true;
        res.cork();
        setImmediate(uncork);
      }
      if (!res.write(value) && !congested) {
        congested = true;
        options.flow?.onCongested();
      }
      if (options.maxBufferedBytes !== undefined && res.writableLength > options.maxBufferedBytes) {
        options.onSlowReader?.();
        res.destroy();
        break;
      }
    }
  } catch {
    // the stream was cancelled (client gone) or errored: nothing more to write
  } finally {
    res.off('drain', drained);
    res.off('close', gone);
    drained();
    if (!res.destroyed && !res.writableEnded) res.end();
  }
}
