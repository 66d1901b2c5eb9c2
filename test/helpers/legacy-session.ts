// A legacy (2025-11-25) MCP client written with fetch, for the tests that need to do what an SDK client
// would never do on its own: read the first event of a paid call and hang up, then resume with
// `GET` + `Last-Event-ID` whenever the test says (SPEC §5.1, §6.5).
import { setTimeout as sleep } from 'node:timers/promises';

type Json = Record<string, any>;

export const LEGACY_VERSION = '2025-11-25';

export interface SseEventRead {
  id: string | null;
  /** The data lines joined, or null for an event without data. */
  data: string | null;
  /** The data parsed when it is JSON. */
  message: Json | null;
}

export interface SessionHandle {
  url: string;
  sessionId: string;
  headers(extra?: Record<string, string>): Record<string, string>;
}

/** initialize + notifications/initialized; the session the upstream minted (through the gateway). */
export async function openSession(url: string): Promise<SessionHandle> {
  const base = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
  const response = await fetch(url, {
    method: 'POST',
    headers: base,
    body: JSON.stringify({ jsonrpc: '2.0', id: 'init', method: 'initialize', params: { protocolVersion: LEGACY_VERSION, capabilities: {}, clientInfo: { name: 'legacy-session', version: '1' } } }),
  });
  const sessionId = response.headers.get('mcp-session-id');
  await response.arrayBuffer();
  if (!sessionId) throw new Error(`no session id (HTTP ${response.status})`);
  const session: SessionHandle = {
    url,
    sessionId,
    headers: (extra = {}) => ({ ...base, 'mcp-session-id': sessionId, 'mcp-protocol-version': LEGACY_VERSION, ...extra }),
  };
  const initialized = await fetch(url, { method: 'POST', headers: session.headers(), body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) });
  await initialized.arrayBuffer();
  return session;
}

/** An open SSE (or JSON) reply being read event by event. */
export class EventReader {
  readonly #reader: ReadableStreamDefaultReader<Uint8Array>;
  readonly #decoder = new TextDecoder();
  #buffer = '';
  readonly events: SseEventRead[] = [];

  constructor(readonly response: Response, readonly controller: AbortController) {
    if (!response.body) throw new Error('no body');
    this.#reader = response.body.getReader();
  }

  /** The next event, or null when the stream ended (or `timeoutMs` passed with nothing new). */
  async next(timeoutMs = 10_000): Promise<SseEventRead | null> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const end = this.#buffer.search(/\r?\n\r?\n/);
      if (end !== -1) {
        const block = this.#buffer.slice(0, end);
        this.#buffer = this.#buffer.slice(end).replace(/^\r?\n\r?\n/, '');
        const event = parseEvent(block);
        this.events.push(event);
        return event;
      }
      const left = deadline - Date.now();
      if (left <= 0) return null;
      const chunk = await Promise.race([this.#reader.read(), sleep(left).then(() => 'timeout' as const)]);
      if (chunk === 'timeout') return null;
      if (chunk.done) return null;
      this.#buffer += this.#decoder.decode(chunk.value, { stream: true });
    }
  }

  /** Reads until an event carries a JSON-RPC response for `id` (or the stream ends / times out). */
  async responseFor(id: unknown, timeoutMs = 10_000): Promise<Json | null> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const event = await this.next(Math.max(1, deadline - Date.now()));
      if (!event) return null;
      const message = event.message;
      if (message && !('method' in message) && message.id === id) return message;
    }
  }

  /** Hangs up, as a client whose connection dropped. */
  abort(): void {
    this.controller.abort();
  }
}

function parseEvent(block: string): SseEventRead {
  let id: string | null = null;
  const data: string[] = [];
  for (const line of block.split(/\r?\n/)) {
    if (line.startsWith('id:')) id = line.slice(3).trim();
    else if (line.startsWith('data:')) data.push(line.slice(line.startsWith('data: ') ? 6 : 5));
  }
  const text = data.length > 0 ? data.join('\n') : null;
  let message: Json | null;
  try {
    message = text ? (JSON.parse(text) as Json) : null;
  } catch {
    message = null;
  }
  return { id, data: text, message };
}

/** POSTs one request in the session and returns the reply being read (SSE expected). */
export async function post(session: SessionHandle, body: unknown): Promise<EventReader> {
  const controller = new AbortController();
  const response = await fetch(session.url, { method: 'POST', headers: session.headers(), body: JSON.stringify(body), signal: controller.signal });
  return new EventReader(response, controller);
}

/** POSTs one request in the session; the plain Response (for replies that are not streams). */
export function postRaw(session: SessionHandle, body: unknown): Promise<Response> {
  return fetch(session.url, { method: 'POST', headers: session.headers(), body: JSON.stringify(body) });
}

/** GET {mcp} with Last-Event-ID: the upstream replays the stream after that event. */
export async function resume(session: SessionHandle, lastEventId: string): Promise<EventReader> {
  const controller = new AbortController();
  const response = await fetch(session.url, {
    method: 'GET',
    headers: { accept: 'text/event-stream', 'mcp-session-id': session.sessionId, 'mcp-protocol-version': LEGACY_VERSION, 'last-event-id': lastEventId },
    signal: controller.signal,
  });
  return new EventReader(response, controller);
}

export const toolCall = (id: unknown, name: string, args: Json): Json => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } });
