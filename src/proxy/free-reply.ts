// The reply to a free request (SPEC §5.2, §5.3), handed over by the proxy's response hook with status and
// headers already on the reply: streamed as it comes, except
// - a JSON reply to a POST that asked for tools/list: parsed whole (within maxResponseBytes) and its
//   priced tools rewritten;
// - an event stream, when any tool is priced: read event by event — tools/list results rewritten (ids
//   and `retry:` lines kept), and responses that are not the request's own screened against the paid
//   calls (response-screen.ts). Without a session there is nothing to screen against.
import { Readable } from 'node:stream';
import type { FastifyReply } from 'fastify';
import { errorResponse } from '../mcp/jsonrpc.js';
import { rewriteSse, type SseHook } from '../mcp/sse.js';
import { rewriteToolsListMessages, type ToolPricing } from '../mcp/tools-list.js';
import type { McpCall, UpstreamHead } from './call-state.js';
import { isEventStream, isJson } from './headers.js';
import type { ProxyRecorder } from './recorder.js';
import { parseJsonOrUndefined, readCapped } from './reply-reader.js';
import type { ResponseScreen } from './response-screen.js';
import { classifyUpstreamError } from './upstream-failure.js';

export interface FreeReplyDeps {
  /** null when no tool is priced: nothing is ever rewritten or screened. */
  pricing: ToolPricing | null;
  screen: ResponseScreen;
  recorder: ProxyRecorder;
  maxResponseBytes: number;
}

export function relayFreeReply(deps: FreeReplyDeps, call: McpCall, reply: FastifyReply, head: UpstreamHead): void {
  deps.recorder.upstream(call, head.statusCode >= 500 ? 'http_5xx' : head.statusCode >= 400 ? 'http_4xx' : 'answered');
  const contentType = head.headers['content-type'];
  const encoded = head.headers['content-encoding'] !== undefined;
  if (call.filterStream && !encoded && isEventStream(contentType)) {
    reply.send(Readable.from(screenedStream(deps, call, reply, head)));
    return;
  }
  if (call.rewriteJson && !encoded && isJson(contentType)) {
    void relayRewrittenJson(deps, call, reply, head);
    return;
  }
  // A body that breaks off mid-way cuts the client's reply (fastify destroys it); it is logged here.
  head.stream.once('error', (error: unknown) => deps.recorder.failure(call, reply.request.id, classifyUpstreamError(error), { observe: false }));
  reply.send(head.stream);
}

async function relayRewrittenJson(deps: FreeReplyDeps, call: McpCall, reply: FastifyReply, head: UpstreamHead): Promise<void> {
  let text: string;
  try {
    text = await readCapped(head.stream, deps.maxResponseBytes);
  } catch (error) {
    const failure = classifyUpstreamError(error);
    deps.recorder.failure(call, reply.request.id, failure, { observe: false });
    if (reply.sent || reply.raw.destroyed) return;
    reply.code(failure.error.status).header('content-type', 'application/json').send(JSON.stringify(errorResponse(call.requestId, failure.error.rpcCode, failure.error.message)));
    return;
  }
  const parsed = parseJsonOrUndefined(text);
  const rewritten = parsed === undefined ? undefined : rewriteToolsListMessages(parsed, deps.pricing as ToolPricing);
  reply.send(rewritten === undefined ? text : JSON.stringify(rewritten));
}

async function* screenedStream(deps: FreeReplyDeps, call: McpCall, reply: FastifyReply, head: UpstreamHead): AsyncGenerator<string> {
  try {
    yield* rewriteSse(head.stream, streamHook(deps, call), { maxEventBytes: deps.maxResponseBytes });
  } catch (error) {
    // Headers are out: the client's stream is cut (and the reason logged).
    deps.recorder.failure(call, reply.request.id, classifyUpstreamError(error), { observe: false });
    throw error;
  }
}

function streamHook(deps: FreeReplyDeps, call: McpCall): SseHook {
  const pricing = deps.pricing as ToolPricing;
  const sessionId = call.sessionId;
  const ownIds = call.ownIds;
  return (event) => {
    const data = event.data as string;
    // Cheap filters first: only events that can hold a tools array or a response are parsed.
    const tools = data.includes('"tools"');
    const screened = sessionId !== undefined && (data.includes('"result"') || data.includes('"error"'));
    if (!tools && !screened) return undefined;
    const parsed = parseJsonOrUndefined(data);
    if (parsed === undefined) return undefined;
    const rewritten = tools ? rewriteToolsListMessages(parsed, pricing) : undefined;
    const value = rewritten ?? parsed;
    if (screened && deps.screen.holdsForeignResponse(value, ownIds)) return deps.screen.screen(sessionId, value, ownIds, rewritten !== undefined);
    return rewritten === undefined ? undefined : JSON.stringify(rewritten);
  };
}
