// Incremental Server-Sent Events parsing. One splitter turns a byte stream into events as soon as each
// terminating blank line arrives (never buffering the stream); two readers sit on it:
// - `rewriteSse` passes every event through (ids, `retry:` lines, comments and empty priming events
//   kept) and lets a hook replace an event's data (tools/list results, filtered responses);
// - `readSseEvents` hands the events themselves to a caller that decides per event (proxy/reply-reader.ts).
// Data lines are joined with "\n" and lose one leading space, as the WHATWG parser does.
import { StringDecoder } from 'node:string_decoder';

export interface SseEvent {
  /** The event's lines (without line terminators), exactly as received. */
  lines: string[];
  /** The data lines joined with "\n", or null when the event has no data field. */
  data: string | null;
}

/** A hook's answer that removes an event's data: its id and other fields still pass, nothing is dispatched. */
export const DROP_DATA: unique symbol = Symbol('sse.dropData');

/** Returns replacement data for an event, DROP_DATA, or undefined to pass it unchanged. May be async (a lookup first). */
export type SseHook = (event: SseEvent) => SseReplacement | Promise<SseReplacement>;
export type SseReplacement = string | typeof DROP_DATA | undefined;

export interface SseLimits {
  /** Largest single event accepted; a bigger one ends the stream with an error (SPEC upstream.maxResponseBytes). */
  maxEventBytes: number;
}

export class SseEventTooLargeError extends Error {
  constructor(limit: number) {
    super(`an event stream event exceeded ${limit} bytes`);
    this.name = 'SseEventTooLargeError';
  }
}

/** A stray blank line between events: no event, but a byte a pass-through keeps. */
export const BLANK_LINE = null;

/** Splits decoded text into SSE events. Feed chunks in order; `end()` flushes a final event without its blank line. */
export class SseSplitter {
  readonly #decoder = new StringDecoder('utf8');
  readonly #maxEventBytes: number;
  #pending = ''; // text after the last complete line
  #lines: string[] = [];
  #eventBytes = 0;
  #carriageReturn = false; // the previous chunk ended with \r (maybe half of \r\n)

  constructor(limits: SseLimits) {
    this.#maxEventBytes = limits.maxEventBytes;
  }

  /** The events (and stray blank lines, as BLANK_LINE) completed by this chunk, in order. */
  push(chunk: Buffer | string): (SseEvent | typeof BLANK_LINE)[] {
    let text = typeof chunk === 'string' ? chunk : this.#decoder.write(chunk);
    const out: (SseEvent | typeof BLANK_LINE)[] = [];
    if (text === '') return out; // an empty chunk (or half a character) must not forget a pending \r
    if (this.#carriageReturn && text.charCodeAt(0) === 10) text = text.slice(1);
    this.#carriageReturn = text.charCodeAt(text.length - 1) === 13;
    // The text kept from earlier chunks holds no line end: only the new text is scanned (a long line
    // arriving in many chunks costs its length once, not once per chunk).
    const scanFrom = this.#pending.length;
    const pending = this.#pending + text;
    let start = 0;
    for (;;) {
      const end = lineEnd(pending, Math.max(start, scanFrom));
      if (end === -1) break;
      const line = pending.slice(start, end);
      start = end + (pending.charCodeAt(end) === 13 && pending.charCodeAt(end + 1) === 10 ? 2 : 1);
      if (line === '') {
        out.push(this.#lines.length === 0 ? BLANK_LINE : this.#finish());
        continue;
      }
      this.#eventBytes += line.length + 1;
      if (this.#eventBytes > this.#maxEventBytes) throw new SseEventTooLargeError(this.#maxEventBytes);
      this.#lines.push(line);
    }
    this.#pending = pending.slice(start);
    if (this.#pending.length + this.#eventBytes > this.#maxEventBytes) throw new SseEventTooLargeError(this.#maxEventBytes);
    return out;
  }

  /**
   * The final event when the stream ended without its blank line. It is dispatched anyway (the WHATWG
   * parser would drop it; a proxy should not invent or lose bytes the client may still want to read).
   */
  end(): SseEvent | null {
    const rest = this.#pending + this.#decoder.end();
    this.#pending = '';
    if (rest) this.#lines.push(rest);
    return this.#lines.length > 0 ? this.#finish() : null;
  }

  #finish(): SseEvent {
    const event = toEvent(this.#lines);
    this.#lines = [];
    this.#eventBytes = 0;
    return event;
  }
}

/** Index of the next \r or \n at or after `from`, or -1. */
function lineEnd(text: string, from: number): number {
  for (let i = from; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code === 10 || code === 13) return i;
  }
  return -1;
}

/** The events of a stream, one at a time, as they complete. */
export async function* readSseEvents(source: AsyncIterable<Buffer | string>, limits: SseLimits): AsyncGenerator<SseEvent> {
  const splitter = new SseSplitter(limits);
  for await (const chunk of source) {
    for (const event of splitter.push(chunk)) if (event !== BLANK_LINE) yield event;
  }
  const last = splitter.end();
  if (last) yield last;
}

/** Splits a byte stream into SSE events, calling `hook` on each; yields the bytes to send downstream. */
export async function* rewriteSse(source: AsyncIterable<Buffer | string>, hook: SseHook, limits: SseLimits): AsyncGenerator<string> {
  const splitter = new SseSplitter(limits);
  for await (const chunk of source) {
    let out = '';
    for (const event of splitter.push(chunk)) {
      if (event === BLANK_LINE) {
        out += '\n'; // stray blank line: keep the byte, it carries no event
        continue;
      }
      const replacement = event.data === null ? undefined : hook(event);
      if (!(replacement instanceof Promise)) {
        out += serialiseEvent(event, replacement);
        continue;
      }
      // A held event must not hold the events before it in the same chunk (progress before a result).
      if (out) yield out;
      out = serialiseEvent(event, await replacement);
    }
    if (out) yield out;
  }
  const last = splitter.end();
  if (last) {
    const replacement = last.data === null ? undefined : hook(last);
    yield serialiseEvent(last, replacement instanceof Promise ? await replacement : replacement);
  }
}

function toEvent(lines: string[]): SseEvent {
  let data: string | null = null;
  for (const line of lines) {
    let part: string | null = null;
    if (line.startsWith('data:')) part = line.charCodeAt(5) === 32 ? line.slice(6) : line.slice(5);
    else if (line === 'data') part = '';
    if (part !== null) data = data === null ? part : `${data}\n${part}`;
  }
  return { lines, data };
}

/** The event as text. With a replacement, the data lines are replaced and every other line kept. */
export function serialiseEvent(event: SseEvent, replacement?: SseReplacement): string {
  if (replacement === undefined) return `${event.lines.join('\n')}\n\n`;
  if (replacement === DROP_DATA) return withoutData(event);
  const kept = event.lines.filter((line) => !(line.startsWith('data:') || line === 'data'));
  const dataLines = replacement.split('\n').map((part) => `data: ${part}`);
  // Keep the field order readable: id/event/retry/comments first, then the data.
  return `${[...kept, ...dataLines].join('\n')}\n\n`;
}

/** The event without its data: its id (and other fields) still reach the client, but nothing is dispatched. */
export function withoutData(event: SseEvent): string {
  const kept = event.lines.filter((line) => !(line.startsWith('data:') || line === 'data'));
  return kept.length > 0 ? `${kept.join('\n')}\n\n` : '';
}
