// Free traffic: forward and relay (SPEC §5.2). Bodies stream through untouched, except that replies
// which may carry a tools/list result are rewritten for priced tools (JSON parsed whole, SSE per event).
import type { ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { GatewayError } from '../errors.js';
import { errorResponse, type JsonRpcId } from '../mcp/jsonrpc.js';
import { rewriteSse, type SseHook } from '../mcp/sse.js';
import { looksLikeToolsListResponse, rewriteToolsListResult, type ToolPricing } from '../mcp/tools-list.js';
import { discard, parseJsonOrUndefined, readCapped, relayBody } from './body.js';
import { clientResponseHeaders, isEventStream, isJson } from './headers.js';
import type { Upstream, UpstreamRequest, UpstreamResponse } from './upstream.js';

export interface ForwardOptions {
  /** The reply may hold a tools/list result (a POST that asked for one) — JSON replies get parsed. */
  expectsToolsList: boolean;
  /** Any priced tool configured: event streams are watched for tools/list results too. */
  pricing: ToolPricing | null;
  maxResponseBytes: number;
  /** Id for an error reply when the upstream cannot be reached. */
  requestId: JsonRpcId;
}

/** Forwards one request and relays the answer on `res`. Resolves with the HTTP status sent. */
export async function forwardAndRelay(upstream: Upstream, request: UpstreamRequest, res: ServerResponse, options: ForwardOptions): Promise<number> {
  let response: UpstreamResponse;
  try {
    response = await upstream.send(request);
  } catch (error) {
    if (request.signal.aborted) return 499;
    const gatewayError = error instanceof GatewayError ? error : new GatewayError('TB_ERR_UPSTREAM_UNAVAILABLE', 'the upstream MCP server could not be reached', { cause: error });
    return sendJson(res, gatewayError.status, errorResponse(options.requestId, gatewayError.rpcCode, gatewayError.message));
  }

  const contentType = response.headers['content-type'];
  if (options.pricing && isEventStream(contentType)) return relayStream(response, res, toolsListHook(options.pricing), options.maxResponseBytes);
  if (options.pricing && options.expectsToolsList && isJson(contentType) && !response.headers['content-encoding']) {
    return relayRewrittenJson(response, res, options);
  }
  res.writeHead(response.status, clientResponseHeaders(response.headers, false));
  if (isEventStream(contentType)) res.flushHeaders();
  await relayBody(response.body, res);
  return response.status;
}

async function relayRewrittenJson(response: UpstreamResponse, res: ServerResponse, options: ForwardOptions): Promise<number> {
  let text: string;
  try {
    text = await readCapped(response.body, options.maxResponseBytes);
  } catch (error) {
    const gatewayError = error instanceof GatewayError ? error : new GatewayError('TB_ERR_UPSTREAM_BAD_RESPONSE', 'the upstream reply could not be read', { cause: error });
    return sendJson(res, gatewayError.status, errorResponse(options.requestId, gatewayError.rpcCode, gatewayError.message));
  }
  const parsed = parseJsonOrUndefined(text);
  const rewritten = parsed === undefined ? undefined : rewriteMessages(parsed, options.pricing as ToolPricing);
  const body = rewritten === undefined ? text : JSON.stringify(rewritten);
  res.writeHead(response.status, { ...clientResponseHeaders(response.headers, true), 'content-length': Buffer.byteLength(body) });
  res.end(body);
  return response.status;
}

async function relayStream(response: UpstreamResponse, res: ServerResponse, hook: SseHook, maxEventBytes: number): Promise<number> {
  res.writeHead(response.status, clientResponseHeaders(response.headers, true));
  res.flushHeaders();
  await pipeline(Readable.from(rewriteSse(response.body, hook, { maxEventBytes })), res).catch(() => discard(response.body));
  return response.status;
}

/** Rewrites tools/list results inside one message or a batch; undefined when nothing changed. */
function rewriteMessages(parsed: unknown, pricing: ToolPricing): unknown {
  if (Array.isArray(parsed)) {
    let changed = false;
    const out = parsed.map((message) => {
      const one = rewriteOne(message, pricing);
      if (one === undefined) return message;
      changed = true;
      return one;
    });
    return changed ? out : undefined;
  }
  return rewriteOne(parsed, pricing);
}

function rewriteOne(message: unknown, pricing: ToolPricing): unknown {
  if (!looksLikeToolsListResponse(message)) return undefined;
  const result = rewriteToolsListResult(message.result, pricing);
  return result === null ? undefined : { ...(message as object), result };
}

export function toolsListHook(pricing: ToolPricing): SseHook {
  return (event) => {
    // Cheap filter first: only events that can hold a tools array are parsed.
    if (event.data === null || !event.data.includes('"tools"')) return undefined;
    const parsed = parseJsonOrUndefined(event.data);
    if (parsed === undefined) return undefined;
    const rewritten = rewriteMessages(parsed, pricing);
    return rewritten === undefined ? undefined : JSON.stringify(rewritten);
  };
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): number {
  if (res.headersSent) {
    res.destroy();
    return status;
  }
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
  return status;
}

