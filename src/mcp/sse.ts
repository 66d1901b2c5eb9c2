// Incremental Server-Sent Events parser and rewriter. It passes every event through as soon as its
// terminating blank line arrives (never buffering the stream), keeps ids, `retry:` lines, comments and
// empty priming events, and lets a hook replace the data of an event (tools/list, paid-call result).
import { StringDecoder } from 'node:string_decoder';

export interface SseEvent {
  /** The event's lines (without line terminators), exactly as received. */
  lines: string[];
  /** The data lines joined with "\n", or null when the event has no data field. */
  data: string | null;
}

/** Returns replacement data for an event, or undefined to pass it unchanged. May be async (paid calls commit first). */
export type SseHook = (event: SseEvent) => string | undefined | Promise<string | undefined>;

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

/** Splits a byte stream into SSE events, calling `hook` on each; yields the bytes to send downstream. */
export async function* rewriteSse(source: AsyncIterable<Buffer | string>, hook: SseHook, limits: SseLimits): AsyncGenerator<string> {
  const decoder = new StringDecoder('utf8');
  let pending = ''; // text after the last complete line
  let lines: string[] = [];
  let eventBytes = 0;
  let carriageReturn = false; // the previous chunk ended with \r (maybe half of \r\n)

  /** A string when the hook answered at once, a promise when it holds the event (a paid call's result). */
  const finishEvent = (): string | Promise<string> => {
    const event = toEvent(lines);
    lines = [];
    eventBytes = 0;
    const replacement = event.data === null ? undefined : hook(event);
    return replacement instanceof Promise ? replacement.then((data) => serialise(event, data)) : serialise(event, replacement);
  };

  for await (const chunk of source) {
    let text = typeof chunk === 'string' ? chunk : decoder.write(chunk);
    if (text === '') continue; // an empty chunk (or half a character) must not forget a pending \r
    if (carriageReturn && text.startsWith('\n')) text = text.slice(1);
    carriageReturn = text.endsWith('\r');
    pending += text;
    let out = '';
    let start = 0;
    for (;;) {
      const match = /\r\n|\r|\n/g;
      match.lastIndex = start;
      const found = match.exec(pending);
      if (!found) break;
      const line = pending.slice(start, found.index);
      start = found.index + found[0].length;
      if (line === '') {
        if (lines.length === 0) {
          out += '\n'; // stray blank line: keep the byte, it carries no event
          continue;
        }
        const finished = finishEvent();
        if (typeof finished === 'string') {
          out += finished;
          continue;
        }
        // A held event must not hold the events before it in the same chunk (progress before a result).
        if (out) yield out;
        out = await finished;
        continue;
      }
      eventBytes += line.length + 1;
      if (eventBytes > limits.maxEventBytes) throw new SseEventTooLargeError(limits.maxEventBytes);
      lines.push(line);
    }
    pending = pending.slice(start);
    if (pending.length + eventBytes > limits.maxEventBytes) throw new SseEventTooLargeError(limits.maxEventBytes);
    if (out) yield out;
  }
  pending += decoder.end();
  if (pending) lines.push(pending);
  // A final event without its blank line is dispatched anyway (the WHATWG parser would drop it; a proxy
  // should not invent or lose bytes the client may still want to read).
  if (lines.length > 0) yield await finishEvent();
}

function toEvent(lines: string[]): SseEvent {
  const data: string[] = [];
  for (const line of lines) {
    if (line.startsWith('data:')) data.push(line.startsWith('data: ') ? line.slice(6) : line.slice(5));
    else if (line === 'data') data.push('');
  }
  return { lines, data: data.length > 0 ? data.join('\n') : null };
}

function serialise(event: SseEvent, replacement: string | undefined): string {
  if (replacement === undefined) return `${event.lines.join('\n')}\n\n`;
  const kept = event.lines.filter((line) => !(line.startsWith('data:') || line === 'data'));
  const dataLines = replacement.split('\n').map((part) => `data: ${part}`);
  // Keep the field order readable: id/event/retry/comments first, then the data.
  return `${[...kept, ...dataLines].join('\n')}\n\n`;
}
