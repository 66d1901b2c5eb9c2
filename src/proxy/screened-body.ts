// An upstream body on its way to the client, with the gateway's namespace removed (SPEC §20; what is
// removed: mcp/namespace.ts). The status and headers are already on the reply.
// - JSON: held whole (within upstream.maxResponseBytes) before its first byte goes out, so a key can be
//   removed wherever it is. Parsed only when its text may hold such a key (or the caller rewrites it, a
//   tools/list reply); otherwise the very bytes go. A parsed body goes re-serialised, so what the client
//   parses is what the gateway checked (duplicate keys, a BOM). A body larger than the cap that cannot be
//   held is streamed on while no chunk may hold such a key, and cut if one does.
// - An event stream: event by event through the caller's hook (never buffered whole).
// - Anything else: as it comes. MCP clients read only JSON and event-stream bodies as messages.
// A JSON or event-stream body with a Content-Encoding is refused: the gateway never asks for one
// (Accept-Encoding is not forwarded) and cannot screen it.
import { Readable } from 'node:stream';
import type { FastifyReply } from 'fastify';
import { sendRpcError } from '../io/error-reply.js';
import type { JsonRpcId } from '../mcp/jsonrpc.js';
import { mayHoldGatewayMeta, mayHoldGatewayMetaBytes, stripGatewayMeta } from '../mcp/namespace.js';
import { DROP_DATA, rewriteSse, type SseHook } from '../mcp/sse.js';
import type { UpstreamHead } from './call-state.js';
import { isEventStream, isJson } from './headers.js';
import { discard } from '../io/body.js';
import { parseJsonOrUndefined } from '../io/json.js';
import { classifyUpstreamError, upstreamFailure, type UpstreamFailure } from './upstream-failure.js';

export interface ScreenedBodyOptions {
  maxBytes: number;
  /** The JSON-RPC id of an error the gateway answers instead of the body. */
  requestId: JsonRpcId;
  /** Rewrites a parsed JSON body (undefined: unchanged); null when a JSON body is only screened. */
  rewriteJson: ((parsed: unknown) => unknown) | null;
  /** Each event-stream event that has data. */
  sseHook: SseHook;
  /** Told once about a body that could not be relayed (headers may be out already: the reply is then cut). */
  onFailure(failure: UpstreamFailure): void;
}

export function sendScreenedBody(reply: FastifyReply, head: UpstreamHead, options: ScreenedBodyOptions): void {
  const contentType = head.headers['content-type'];
  const sse = isEventStream(contentType);
  if (!sse && !isJson(contentType)) {
    head.stream.once('error', (error: unknown) => options.onFailure(classifyUpstreamError(error)));
    reply.send(head.stream);
    return;
  }
  if (isEncoded(head.headers['content-encoding'])) {
    discard(head.stream);
    failBeforeHeaders(reply, options, upstreamFailure('bad_response', undefined, 'the upstream sent a compressed reply the gateway did not ask for'));
    return;
  }
  if (sse) {
    reply.send(Readable.from(screenedEvents(head, options)));
    return;
  }
  void relayJson(reply, head, options);
}

/** The SSE hook of a body that is only screened: an event that may hold a key of the namespace is parsed and sent without it. */
export const namespaceHook: SseHook = (event) => {
  const data = event.data as string;
  if (!mayHoldGatewayMeta(data)) return undefined;
  const parsed = parseJsonOrUndefined(data);
  if (parsed === undefined) return DROP_DATA; // unreadable here, maybe not to a more lenient client
  stripGatewayMeta(parsed);
  return JSON.stringify(parsed);
};

async function* screenedEvents(head: UpstreamHead, options: ScreenedBodyOptions): AsyncGenerator<string> {
  try {
    yield* rewriteSse(head.stream, options.sseHook, { maxEventBytes: options.maxBytes });
  } catch (error) {
    // Headers are out: the client's stream is cut (and the reason logged).
    options.onFailure(classifyUpstreamError(error));
    throw error;
  }
}

const FAILED = Symbol('screen failed');

async function relayJson(reply: FastifyReply, head: UpstreamHead, options: ScreenedBodyOptions): Promise<void> {
  const chunks = head.stream[Symbol.asyncIterator]();
  const held: Buffer[] = [];
  let size = 0;
  try {
    for (let next = await chunks.next(); next.done !== true; next = await chunks.next()) {
      const chunk = asBuffer(next.value);
      if (size + chunk.length > options.maxBytes) return relayOversized(reply, head, options, [...held, chunk], chunks);
      held.push(chunk);
      size += chunk.length;
    }
  } catch (error) {
    return failBeforeHeaders(reply, options, classifyUpstreamError(error));
  }
  const screened = screenJson(held.length === 1 ? (held[0] as Buffer) : Buffer.concat(held, size), options.rewriteJson);
  if (screened === FAILED) return failBeforeHeaders(reply, options, upstreamFailure('bad_response', undefined, 'the upstream JSON reply could not be read to check it'));
  reply.send(screened);
}

/** The body to send: the same bytes, the parsed body re-serialised (without the namespace, rewritten), or FAILED. */
function screenJson(body: Buffer, rewrite: ((parsed: unknown) => unknown) | null): Buffer | string | typeof FAILED {
  const namespaced = mayHoldGatewayMetaBytes(body);
  if (!namespaced && rewrite === null) return body;
  const text = body.toString('utf8');
  const parsed = parseJsonOrUndefined(text.charCodeAt(0) === 0xfeff ? text.slice(1) : text);
  if (parsed === undefined) return namespaced ? FAILED : body;
  if (namespaced) stripGatewayMeta(parsed);
  const rewritten = rewrite?.(parsed);
  if (!namespaced && rewritten === undefined) return body;
  try {
    return JSON.stringify(rewritten ?? parsed);
  } catch {
    return FAILED; // nested too deep to serialise
  }
}

/** Enough of the previous chunk to find a marker that straddles two chunks (`xyz.tollbooth` is 13 bytes). */
const CARRY_BYTES = 12;

/**
 * A JSON body larger than maxResponseBytes cannot be held. One the gateway must rewrite fails; any other
 * is streamed on while nothing in it may spell a key of the namespace, and cut (the client gets a body it
 * cannot parse) at the first chunk that may.
 */
function relayOversized(reply: FastifyReply, head: UpstreamHead, options: ScreenedBodyOptions, held: Buffer[], rest: AsyncIterator<unknown>): void {
  const first = Buffer.concat(held);
  if (options.rewriteJson !== null || mayHoldGatewayMetaBytes(first)) {
    discard(head.stream);
    failBeforeHeaders(reply, options, upstreamFailure('body_too_large'));
    return;
  }
  reply.send(Readable.from(guardedTail(first, rest, options)));
}

async function* guardedTail(first: Buffer, rest: AsyncIterator<unknown>, options: ScreenedBodyOptions): AsyncGenerator<Buffer> {
  yield first;
  let carry = first.subarray(Math.max(0, first.length - CARRY_BYTES));
  try {
    for (let next = await rest.next(); next.done !== true; next = await rest.next()) {
      const chunk = asBuffer(next.value);
      const window = Buffer.concat([carry, chunk]);
      if (mayHoldGatewayMetaBytes(window)) throw upstreamFailure('body_too_large', undefined, 'an upstream reply over upstream.maxResponseBytes may carry keys of the gateway namespace: cut').error;
      yield chunk;
      carry = window.subarray(Math.max(0, window.length - CARRY_BYTES));
    }
  } catch (error) {
    options.onFailure(classifyUpstreamError(error));
    throw error;
  }
}

function failBeforeHeaders(reply: FastifyReply, options: ScreenedBodyOptions, failure: UpstreamFailure): void {
  options.onFailure(failure);
  if (reply.sent || reply.raw.headersSent || reply.raw.destroyed) return;
  sendRpcError(reply, failure.error, options.requestId);
}

function isEncoded(encoding: string | string[] | undefined): boolean {
  if (encoding === undefined) return false;
  const value = Array.isArray(encoding) ? encoding.join(',') : encoding;
  return value.split(',').some((token) => {
    const name = token.trim().toLowerCase();
    return name !== '' && name !== 'identity';
  });
}

const asBuffer = (chunk: unknown): Buffer => (typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer));
