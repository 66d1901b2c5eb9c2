// The reply to a free request (SPEC §5.2, §5.3, §20), handed over by the proxy's response hook with
// status and headers already on the reply. Every JSON or event-stream body goes through the namespace
// screen (screened-body.ts): the upstream's keys under `xyz.tollbooth/` are removed. Beyond that:
// - a JSON reply to a POST that asked for tools/list is parsed whole and its tools rewritten (priced
//   tools gain the token argument and their price; other tools lose any token argument; tools the
//   caller may not see are left out, SPEC §18);
// - an event stream is read event by event: tools/list results rewritten (ids and `retry:` lines kept),
//   and, when any tool is priced, responses that are not the request's own screened against the paid
//   calls (response-screen.ts). Without a session there is nothing to screen against.
import type { FastifyReply } from 'fastify';
import { mayHoldGatewayMeta, stripGatewayMeta } from '../mcp/namespace.js';
import { DROP_DATA, type SseHook } from '../mcp/sse.js';
import { rewriteToolsListMessages, type ToolPricing } from '../mcp/tools-list.js';
import type { McpCall, UpstreamHead } from './call-state.js';
import type { ProxyRecorder } from './recorder.js';
import { parseJsonOrUndefined } from '../io/json.js';
import type { ResponseScreen } from './response-screen.js';
import { sendScreenedBody } from './screened-body.js';

export interface FreeReplyDeps {
  pricing: ToolPricing;
  /** null when no tool is priced: no response is ever screened against paid calls. */
  screen: ResponseScreen | null;
  recorder: ProxyRecorder;
  maxResponseBytes: number;
}

export function relayFreeReply(deps: FreeReplyDeps, call: McpCall, reply: FastifyReply, head: UpstreamHead): void {
  deps.recorder.upstream(call, head.statusCode >= 500 ? 'http_5xx' : head.statusCode >= 400 ? 'http_4xx' : 'answered');
  if (call.privateList) reply.header('cache-control', 'private, no-store'); // the caller's own prices (SPEC §23)
  sendScreenedBody(reply, head, {
    maxBytes: deps.maxResponseBytes,
    requestId: call.requestId,
    rewriteJson: call.rewriteJson ? (parsed) => rewriteToolsListMessages(parsed, deps.pricing, call.toolView, call.ownPrices) : null,
    sseHook: streamHook(deps, call),
    // A body that breaks off mid-way cuts the client's reply (fastify destroys it); it is logged here.
    onFailure: (failure) => deps.recorder.failure(call, reply.request.id, failure, { observe: false }),
  });
}

function streamHook(deps: FreeReplyDeps, call: McpCall): SseHook {
  const pricing = deps.pricing;
  const view = call.toolView;
  const own = call.ownPrices;
  const screen = deps.screen;
  const sessionId = screen ? call.sessionId : undefined;
  const ownIds = call.ownIds;
  return (event) => {
    const data = event.data as string;
    // Cheap filters first: only events that can hold a key of the gateway's namespace, a tools array or
    // a response are parsed. An escape can spell any key, so an event with one is judged by its shape.
    const namespaced = mayHoldGatewayMeta(data);
    const escaped = namespaced || data.includes('\\u');
    const tools = escaped || data.includes('"tools"');
    const screened = sessionId !== undefined && (escaped || data.includes('"result"') || data.includes('"error"'));
    if (!tools && !screened) return undefined;
    const parsed = parseJsonOrUndefined(data);
    if (parsed === undefined) return namespaced ? DROP_DATA : undefined;
    if (namespaced) stripGatewayMeta(parsed);
    const rewritten = rewriteToolsListMessages(parsed, pricing, view, own);
    const value = rewritten ?? parsed;
    // A screened event goes re-serialised: the client parses what the gateway checked (duplicate keys).
    const changed = namespaced || rewritten !== undefined;
    if (screened && (screen as ResponseScreen).holdsForeignResponse(value, ownIds)) return (screen as ResponseScreen).screen(sessionId, value, ownIds, changed);
    return changed ? JSON.stringify(value) : undefined;
  };
}
