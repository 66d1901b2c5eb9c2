// The one reader of upstream replies the gateway has to understand ("my reply by id", SPEC §5.4, §5.6,
// §6.5): a JSON body or an event stream, read within upstream.maxResponseBytes, as a sequence of parsed
// values. The priced path reads it value by value (events before the result stream on to the client),
// batches and the tool catalog collect every response. Matching is exact: a response answers request
// `id` only when its id has the same JSON type and value (5 is not "5"), and it is not inside an array
// unless the request was a batch. Every value comes without the upstream's keys under the gateway's
// namespace (SPEC §20, mcp/namespace.ts).
import type { Readable } from 'node:stream';
import { GatewayError } from '../errors.js';
import { discard, readCapped as readCappedBody } from '../io/body.js';
import { parseJsonOrUndefined } from '../io/json.js';
import { isObject, isResponseLike, type JsonRpcId, type JsonRpcResponse } from '../mcp/jsonrpc.js';
import { mayHoldGatewayMeta, stripGatewayMeta } from '../mcp/namespace.js';
import { BLANK_LINE, DROP_DATA, SseSplitter, type SseEvent, type SseReplacement } from '../mcp/sse.js';
import { isEventStream, isJson } from './headers.js';

export interface ReplyValue {
  /** The SSE event this value came from, or null for a JSON body. */
  event: SseEvent | null;
  /** The parsed JSON (a message or an array); undefined for an event without data or with data that is not JSON. */
  value: unknown;
  /**
   * The event's data when it is passed on to the client as it is: undefined (unchanged), the value
   * re-serialised without the gateway's namespace, or DROP_DATA (unreadable, and it may spell such a key).
   */
  relayed: SseReplacement;
}

/**
 * The values of a reply in arrival order; a JSON body yields once. Throws GatewayError
 * TB_ERR_UPSTREAM_BAD_RESPONSE for a content type that is neither, TB_ERR_UPSTREAM_RESPONSE_TOO_LARGE
 * past the cap (SseEventTooLargeError for one event), or the transport's own error.
 */
export async function* readReply(body: Readable, contentType: string | string[] | undefined, maxBytes: number): AsyncGenerator<ReplyValue> {
  for await (const values of readReplyChunks(body, contentType, maxBytes)) yield* values;
}

/**
 * As readReply, with the values that arrived together (one network chunk) in one array: the priced
 * path sees what came right after its result before it concludes (a second result fails closed).
 */
export async function* readReplyChunks(body: Readable, contentType: string | string[] | undefined, maxBytes: number): AsyncGenerator<ReplyValue[]> {
  if (isEventStream(contentType)) {
    const splitter = new SseSplitter({ maxEventBytes: maxBytes });
    for await (const chunk of body) {
      const values: ReplyValue[] = [];
      for (const event of splitter.push(chunk as Buffer | string)) if (event !== BLANK_LINE) values.push(valueOf(event));
      if (values.length > 0) yield values;
    }
    const last = splitter.end();
    if (last) yield [valueOf(last)];
    return;
  }
  if (!isJson(contentType)) {
    discard(body);
    throw new GatewayError('TB_ERR_UPSTREAM_BAD_RESPONSE', 'the upstream reply was neither JSON nor an event stream');
  }
  yield [screenedValue(await readCapped(body, maxBytes), null)];
}

const valueOf = (event: SseEvent): ReplyValue => (event.data === null ? { event, value: undefined, relayed: undefined } : screenedValue(event.data, event));

/** The parsed text without the namespace; an event's relayed data is re-serialised only when the text may hold a key of it. */
function screenedValue(text: string, event: SseEvent | null): ReplyValue {
  const value = parseJsonOrUndefined(text);
  if (!mayHoldGatewayMeta(text)) return { event, value, relayed: undefined };
  if (value === undefined) return { event, value, relayed: DROP_DATA };
  stripGatewayMeta(value);
  return { event, value, relayed: event === null ? undefined : serialisedOrDrop(value) };
}

function serialisedOrDrop(value: unknown): SseReplacement {
  try {
    return JSON.stringify(value);
  } catch {
    return DROP_DATA; // nested too deep to serialise
  }
}

/** Every response in a reply (batches, the tool catalog), flattened out of arrays, in order. */
export async function collectResponses(body: Readable, contentType: string | string[] | undefined, maxBytes: number): Promise<JsonRpcResponse[]> {
  const responses: JsonRpcResponse[] = [];
  for await (const { value } of readReply(body, contentType, maxBytes)) responses.push(...responsesIn(value));
  return responses;
}

/** The responses a parsed value holds: itself, or the responses of an array. */
export function responsesIn(value: unknown): JsonRpcResponse[] {
  if (Array.isArray(value)) return value.filter(isResponseLike);
  return isResponseLike(value) ? [value] : [];
}

/** True for a JSON-RPC response (not a request or notification) whose id is exactly `id`. */
export function answers(message: unknown, id: JsonRpcId): message is JsonRpcResponse {
  return isResponseLike(message) && sameId(message.id, id);
}

/** JSON-RPC ids compare by type and value: 5 and "5" are different requests. */
export function sameId(a: unknown, b: JsonRpcId): boolean {
  return a === b && typeof a === typeof b;
}

/** A request id as a map key that keeps its type (5 → '5', "5" → '"5"'). */
export const idKey = (id: JsonRpcId): string => JSON.stringify(id);

/** The one response to `id` among `responses`: null when there is none, 'ambiguous' when there are several. */
export function responseTo(responses: JsonRpcResponse[], id: JsonRpcId): JsonRpcResponse | null | 'ambiguous' {
  let found: JsonRpcResponse | null = null;
  for (const response of responses) {
    if (!sameId(response.id, id)) continue;
    if (found) return 'ambiguous';
    found = response;
  }
  return found;
}

/** True when a parsed value holds a response anywhere (an object response, or an array with one). */
export function holdsResponse(value: unknown): boolean {
  return Array.isArray(value) ? value.some(isResponseLike) : isResponseLike(value);
}

/** A parsed value that is a request or notification (server→client), or an array of only those. */
export function isRequestOrNotification(value: unknown): boolean {
  return isObject(value) && typeof value.method === 'string';
}

/** The whole reply as UTF-8 text within upstream.maxResponseBytes (io/body.ts's reader, with the gateway's error). */
export function readCapped(body: Readable, maxBytes: number): Promise<string> {
  return readCappedBody(body, maxBytes, () => new GatewayError('TB_ERR_UPSTREAM_RESPONSE_TOO_LARGE', `the upstream reply exceeded upstream.maxResponseBytes (${maxBytes} bytes)`));
}
