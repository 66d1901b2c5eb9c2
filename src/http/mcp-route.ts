// The MCP endpoint (SPEC §5): POST, GET and DELETE on mcpPath. The POST path reads top to bottom:
// parse → classify → authenticate → (priced call | batch with priced calls | pass-through).
import type { ServerResponse } from 'node:http';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { GatewayError } from '../errors.js';
import { classifyBody, type ClassifiedBody, type Era, type ToolCall } from '../mcp/classify.js';
import { errorResponse, idOf, isObject, type JsonRpcId, type JsonRpcMessage, type JsonRpcResponse } from '../mcp/jsonrpc.js';
import type { ToolCatalog } from '../mcp/tool-catalog.js';
import type { PriceTag, ToolPricing } from '../mcp/tools-list.js';
import type { Metrics } from '../observability/metrics.js';
import { methodLabel, statusClass } from '../observability/metrics.js';
import type { Logger } from '../observability/logger.js';
import type { Authorisation, Paywall, PricedCall } from '../paywall/decide.js';
import type { ResultShape } from '../paywall/challenge.js';
import { PricedExchange, type ExchangeOutcome } from '../proxy/exchange.js';
import { forwardAndRelay, sendJson, toolsListHook } from '../proxy/forward.js';
import { upstreamRequestHeaders, isEventStream, isJson } from '../proxy/headers.js';
import { parseJsonOrUndefined, readCapped } from '../proxy/body.js';
import { rewriteSse } from '../mcp/sse.js';
import type { Upstream } from '../proxy/upstream.js';
import { DeadlineQueue } from './deadlines.js';

export interface Authenticator {
  authenticate(authorization: string | undefined, needs: { tools: string[] }): Promise<
    { ok: true; principal: string } | { ok: false; status: 401 | 403; wwwAuthenticate: string; message: string }
  >;
}

export interface McpRouteDeps {
  mcpPath: string;
  upstream: Upstream;
  upstreamHeaders: Record<string, string>;
  pricing: ToolPricing;
  anyPriced: boolean;
  paywall: Paywall;
  catalog: ToolCatalog;
  authenticator: Authenticator | null;
  callDeadlineMs: number;
  maxResponseBytes: number;
  metrics: Metrics;
  logger: Logger;
  now: () => number;
  /** Long-lived GET streams, ended at shutdown (they never finish on their own). */
  openStreams: Set<ServerResponse>;
}

/** Priced-call deadlines, one timer for all calls (deadlines.ts). */
const deadlines = new DeadlineQueue();

export function registerMcpRoute(app: FastifyInstance, deps: McpRouteDeps): void {
  app.post(deps.mcpPath, (request, reply) => handlePost(request, reply, deps));
  app.get(deps.mcpPath, (request, reply) => handleGetOrDelete(request, reply, deps, 'GET'));
  app.delete(deps.mcpPath, (request, reply) => handleGetOrDelete(request, reply, deps, 'DELETE'));
  for (const method of ['PUT', 'PATCH', 'OPTIONS'] as const) {
    app.route({
      method,
      url: deps.mcpPath,
      handler: async (_request, reply) =>
        reply.code(405).header('allow', 'GET, POST, DELETE').send(errorResponse(null, -32600, `Method not allowed: the MCP endpoint takes POST, GET and DELETE`)),
    });
  }
}

async function handlePost(request: FastifyRequest, reply: FastifyReply, deps: McpRouteDeps): Promise<void> {
  const startedAt = deps.now();
  reply.hijack();
  const res = reply.raw;
  let label = { method: 'unknown', era: 'legacy' as Era };
  let status: number;
  try {
    // 1. Parse: the body arrives as text (server.ts registers no JSON parser of its own).
    if (!isJson(request.headers['content-type'])) {
      throw new GatewayError('TB_ERR_UNSUPPORTED_MEDIA_TYPE', 'Unsupported Media Type: MCP requests must be sent as Content-Type: application/json');
    }
    // The body is read as it came (nothing decompresses it) and forwarded re-serialised: a
    // Content-Encoding would describe bytes the gateway never parsed, or bytes the upstream never gets.
    const encoding = request.headers['content-encoding'];
    if (encoding !== undefined && encoding.trim().toLowerCase() !== 'identity') {
      throw new GatewayError('TB_ERR_UNSUPPORTED_MEDIA_TYPE', 'Unsupported Media Type: send MCP request bodies uncompressed, without Content-Encoding');
    }
    const body = parseBody(request.body);
    // 2. Classify and refuse what must never reach the upstream (SPEC §5.2).
    const classified = classifyBody(body, request.headers);
    label = { method: classified.method, era: classified.era };
    // 3. Authenticate (SPEC §9) when oauth is on.
    const principal = await authenticate(request, res, deps, classified);
    if (principal === undefined) return record(deps, label, res.statusCode, startedAt);
    // 4. Route.
    const priced = classified.toolCalls.filter((call) => deps.pricing.priceOf(call.name) !== undefined);
    if (priced.length === 0) status = await passThrough(request, res, deps, classified);
    else if (!classified.batch) status = await handlePricedCall(request, res, deps, classified, priced[0] as ToolCall, principal, startedAt);
    else status = await handleBatchWithPricedCalls(request, res, deps, classified, principal, startedAt);
  } catch (error) {
    status = sendError(res, error, request.body);
  }
  record(deps, label, status, startedAt);
}

function parseBody(raw: unknown): unknown {
  if (typeof raw !== 'string' || raw.trim() === '') throw new GatewayError('TB_ERR_PARSE', 'Parse error: the request body is empty');
  const parsed = parseJsonOrUndefined(raw);
  if (parsed === undefined) throw new GatewayError('TB_ERR_PARSE', 'Parse error: the request body is not valid JSON');
  return parsed;
}

/** Resolves with the principal (null when auth is off), or undefined after answering 401/403. */
async function authenticate(request: FastifyRequest, res: ServerResponse, deps: McpRouteDeps, classified: ClassifiedBody | null): Promise<string | null | undefined> {
  if (!deps.authenticator) return null;
  const tools = classified?.toolCalls.map((call) => call.name) ?? [];
  const outcome = await deps.authenticator.authenticate(request.headers.authorization, { tools });
  if (outcome.ok) return outcome.principal;
  const id = classified && !classified.batch ? idOf(classified.messages[0]) : null;
  sendJson(res, outcome.status, errorResponse(id, outcome.status === 401 ? -32001 : -32003, outcome.message), { 'www-authenticate': outcome.wwwAuthenticate });
  return undefined;
}

async function passThrough(request: FastifyRequest, res: ServerResponse, deps: McpRouteDeps, classified: ClassifiedBody): Promise<number> {
  const signal = abortOnClientGone(res);
  const expectsToolsList = deps.anyPriced && classified.listsTools;
  return forwardAndRelay(
    deps.upstream,
    { method: 'POST', path: request.url, headers: upstreamRequestHeaders(request.headers, { upstreamHeaders: deps.upstreamHeaders }, expectsToolsList), body: reserialise(classified), signal },
    res,
    { expectsToolsList, pricing: deps.anyPriced ? deps.pricing : null, maxResponseBytes: deps.maxResponseBytes, requestId: classified.batch ? null : idOf(classified.messages[0]) },
  );
}

/** SPEC §6.2 for one priced tools/call: authorise (steps 1–6), forward with the token stripped, conclude (step 7). */
async function handlePricedCall(
  request: FastifyRequest,
  res: ServerResponse,
  deps: McpRouteDeps,
  classified: ClassifiedBody,
  call: ToolCall,
  principal: string | null,
  startedAt: number,
): Promise<number> {
  const id = call.request.id ?? null;
  const priced = pricedCall(request, deps, classified.era, call, principal, startedAt);
  const authorisation = await deps.paywall.authorise(priced);
  if (authorisation.kind === 'answer') {
    deps.paywall.recordAnswer(priced, authorisation);
    return sendJson(res, 200, { jsonrpc: '2.0', id, result: authorisation.result });
  }
  // Forward: the deadline covers the whole call, upstream time included (SPEC §6.5).
  const { signal, reason } = deadlineSignal(res, startedAt + deps.callDeadlineMs - deps.now());
  const exchange = new PricedExchange(res, id, { maxResponseBytes: deps.maxResponseBytes });
  let outcome: ExchangeOutcome;
  try {
    const body = JSON.stringify({ ...call.request, params: authorisation.forwardParams });
    const headers = upstreamRequestHeaders(request.headers, { upstreamHeaders: deps.upstreamHeaders }, true);
    outcome = await exchange.run(deps.upstream, { method: 'POST', path: request.url, headers, body, signal }, reason);
  } catch (error) {
    // Nothing may leave a reservation held: an unexpected failure before the upstream answered releases it.
    outcome = { kind: 'failed', accepted: false, error: error instanceof GatewayError ? error : new GatewayError('TB_ERR_UPSTREAM_UNAVAILABLE', 'the call could not be forwarded', { cause: error }) };
  }
  deps.metrics.upstreamDuration.observe({ method: 'tools/call', outcome: outcome.kind }, (deps.now() - startedAt) / 1000);
  const final = await deps.paywall.conclude(priced, authorisation, outcome);
  if (final) await exchange.finish(final);
  return outcome.kind === 'http_refusal' ? outcome.status : 200;
}

/**
 * SPEC §5.6: a legacy batch holding priced calls is split. Entries the gateway answers itself are
 * answered here; the rest (free entries and authorised priced ones, token stripped) go upstream as
 * one batch; the replies are merged in the original order. A batch is never a way around the paywall.
 */
async function handleBatchWithPricedCalls(request: FastifyRequest, res: ServerResponse, deps: McpRouteDeps, classified: ClassifiedBody, principal: string | null, startedAt: number): Promise<number> {
  const ids = classified.messages.filter((m) => 'method' in m && m.id !== undefined).map((m) => JSON.stringify(idOf(m)));
  if (new Set(ids).size !== ids.length) throw new GatewayError('TB_ERR_INVALID_REQUEST', 'Invalid Request: a batch holding priced calls must not repeat request ids');

  const answers = new Map<JsonRpcMessage, JsonRpcResponse>();
  const held: { call: ToolCall; priced: PricedCall; authorisation: Extract<Authorisation, { kind: 'reserved' }> }[] = [];
  const forwarded: JsonRpcMessage[] = [];
  for (const message of classified.messages) {
    const call = classified.toolCalls.find((c) => c.request === message);
    if (!call || !deps.pricing.priceOf(call.name)) {
      forwarded.push(message);
      continue;
    }
    const priced = pricedCall(request, deps, 'legacy', call, principal, startedAt);
    const authorisation = await deps.paywall.authorise(priced);
    if (authorisation.kind === 'answer') {
      deps.paywall.recordAnswer(priced, authorisation);
      answers.set(message, { jsonrpc: '2.0', id: call.request.id ?? null, result: authorisation.result });
      continue;
    }
    held.push({ call, priced, authorisation });
    forwarded.push({ ...call.request, params: authorisation.forwardParams } as JsonRpcMessage);
  }

  let replies = new Map<string, JsonRpcResponse>();
  let failure: GatewayError | null = null;
  if (forwarded.length > 0) {
    const { signal } = deadlineSignal(res, startedAt + deps.callDeadlineMs - deps.now());
    try {
      replies = await forwardBatch(request, deps, forwarded, signal);
    } catch (error) {
      failure = error instanceof GatewayError ? error : new GatewayError('TB_ERR_UPSTREAM_UNAVAILABLE', 'the upstream batch failed', { cause: error });
    }
  }
  for (const { call, priced, authorisation } of held) {
    const reply = replies.get(JSON.stringify(call.request.id ?? null));
    const outcome = reply
      ? ({ kind: 'answered', message: reply } as const)
      : ({ kind: 'failed', accepted: failure === null, error: failure ?? new GatewayError('TB_ERR_UPSTREAM_BAD_RESPONSE', 'no reply for this batch entry') } as const);
    const final = await deps.paywall.conclude(priced, authorisation, outcome);
    if (final) answers.set(call.request as JsonRpcMessage, final);
  }
  const merged: JsonRpcResponse[] = [];
  for (const message of classified.messages) {
    const own = answers.get(message);
    if (own) merged.push(own);
    else if ('method' in message && message.id !== undefined) {
      const reply = replies.get(JSON.stringify(message.id));
      merged.push(reply ?? errorResponse(message.id, -32603, failure ? failure.message : 'the upstream gave no reply for this entry'));
    }
  }
  if (merged.length === 0) {
    res.writeHead(202).end();
    return 202;
  }
  return sendJson(res, 200, merged);
}

async function forwardBatch(request: FastifyRequest, deps: McpRouteDeps, entries: JsonRpcMessage[], signal: AbortSignal): Promise<Map<string, JsonRpcResponse>> {
  const response = await deps.upstream.send({
    method: 'POST',
    path: request.url,
    headers: upstreamRequestHeaders(request.headers, { upstreamHeaders: deps.upstreamHeaders }, true),
    body: JSON.stringify(entries),
    signal,
  });
  if (response.status >= 300) {
    response.body.resume();
    throw new GatewayError('TB_ERR_UPSTREAM_UNAVAILABLE', `the upstream answered the batch with HTTP ${response.status}`);
  }
  const messages: unknown[] = [];
  if (isEventStream(response.headers['content-type'])) {
    const hook = toolsListHook(deps.pricing);
    for await (const _text of rewriteSse(response.body, async (event) => {
      const data = await hook(event);
      const parsed = parseJsonOrUndefined(data ?? event.data ?? '');
      if (parsed !== undefined) messages.push(...(Array.isArray(parsed) ? parsed : [parsed]));
      return data;
    }, { maxEventBytes: deps.maxResponseBytes })) {
      // drained for its side effect: collecting the responses
    }
  } else {
    const parsed = parseJsonOrUndefined(await readCapped(response.body, deps.maxResponseBytes));
    if (parsed !== undefined) messages.push(...(Array.isArray(parsed) ? parsed : [parsed]));
  }
  const replies = new Map<string, JsonRpcResponse>();
  for (const message of messages) {
    if (isObject(message) && 'id' in message && ('result' in message || 'error' in message)) replies.set(JSON.stringify(message.id), message as unknown as JsonRpcResponse);
  }
  return replies;
}

function pricedCall(request: FastifyRequest, deps: McpRouteDeps, era: Era, call: ToolCall, principal: string | null, startedAt: number): PricedCall {
  const price = deps.pricing.priceOf(call.name) as PriceTag;
  // structuredContent only for a tool known to declare no outputSchema (unknown → omitted).
  const resultShape = async (): Promise<ResultShape> => {
    const declares = await deps.catalog.declaresOutputSchema(call.name).catch(() => undefined);
    return { era, structuredContentAllowed: declares === false };
  };
  return { call, price, principal, clientKey: principal ? `p:${principal}` : `ip:${request.ip}`, resultShape, startedAt, reqId: request.id };
}

async function handleGetOrDelete(request: FastifyRequest, reply: FastifyReply, deps: McpRouteDeps, method: 'GET' | 'DELETE'): Promise<void> {
  const startedAt = deps.now();
  reply.hijack();
  const res = reply.raw;
  const principal = await authenticate(request, res, deps, null).catch((error: unknown) => {
    sendError(res, error, undefined);
    return undefined;
  });
  if (principal === undefined) return record(deps, { method, era: 'legacy' }, res.statusCode, startedAt);
  const signal = abortOnClientGone(res);
  if (method === 'GET') {
    deps.openStreams.add(res);
    res.once('close', () => deps.openStreams.delete(res));
  }
  const status = await forwardAndRelay(
    deps.upstream,
    { method, path: request.url, headers: upstreamRequestHeaders(request.headers, { upstreamHeaders: deps.upstreamHeaders }, method === 'GET' && deps.anyPriced), signal },
    res,
    { expectsToolsList: false, pricing: deps.anyPriced ? deps.pricing : null, maxResponseBytes: deps.maxResponseBytes, requestId: null },
  ).catch((error: unknown) => sendError(res, error, undefined));
  record(deps, { method, era: 'legacy' }, status, startedAt);
}

/** The upstream sees exactly what the gateway validated: the re-serialised parsed body (SPEC §5.2). */
function reserialise(classified: ClassifiedBody): string {
  return JSON.stringify(classified.batch ? classified.messages : classified.messages[0]);
}

function abortOnClientGone(res: ServerResponse): AbortSignal {
  const controller = new AbortController();
  res.once('close', () => {
    if (!res.writableFinished) controller.abort();
  });
  return controller.signal;
}

/** One signal for the call: aborted when the deadline passes or the client goes away, whichever comes first. */
function deadlineSignal(res: ServerResponse, remainingMs: number): { signal: AbortSignal; reason: () => 'deadline' | 'client_gone' } {
  const controller = new AbortController();
  let expired = false;
  const cancel = deadlines.add(Math.max(1, remainingMs), () => {
    expired = true;
    controller.abort();
  });
  res.once('close', () => {
    cancel();
    if (!res.writableFinished) controller.abort();
  });
  return { signal: controller.signal, reason: () => (expired ? 'deadline' : 'client_gone') };
}

function sendError(res: ServerResponse, error: unknown, rawBody: unknown): number {
  const gatewayError = error instanceof GatewayError ? error : new GatewayError('TB_ERR_UPSTREAM_BAD_RESPONSE', 'the request could not be completed', { cause: error });
  const id = gatewayError.code === 'TB_ERR_PARSE' ? null : idFromRaw(rawBody);
  // -32602 is an answer to a well-formed request: it goes with 200 like any JSON-RPC error reply.
  const status = gatewayError.code === 'TB_ERR_INVALID_PARAMS' ? 200 : gatewayError.status;
  return sendJson(res, status, errorResponse(id, gatewayError.rpcCode, gatewayError.message));
}

function idFromRaw(raw: unknown): JsonRpcId {
  if (typeof raw !== 'string') return null;
  const parsed = parseJsonOrUndefined(raw);
  return Array.isArray(parsed) ? null : idOf(parsed);
}

function record(deps: McpRouteDeps, label: { method: string; era: Era }, status: number, startedAt: number): void {
  const method = methodLabel(label.method);
  deps.metrics.mcpRequests.inc({ method, era: label.era, status: statusClass(status) });
  deps.metrics.mcpRequestDuration.observe({ method }, (deps.now() - startedAt) / 1000);
}
