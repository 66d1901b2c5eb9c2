// The MCP endpoint's policy (SPEC §5, §6), run in the route's preHandler before the proxy forwards:
// parse → classify → authenticate → (free: forward as is | one priced call | a batch holding priced
// calls). Whatever the gateway answers itself — a JSON-RPC error, 401/403, a challenge or refusal — is
// this hook's reply and nothing is forwarded. Otherwise `request.body` becomes what the proxy sends:
// the parsed body (reply-from re-serialises it: the upstream sees exactly what was validated, §5.2),
// with the token argument stripped from every tools/call's arguments, priced (§5.4) or not (§20).
import type { ServerResponse } from 'node:http';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { SessionBindings } from '../auth/session-bindings.js';
import { GatewayError } from '../errors.js';
import { rpcErrorBody, sendRpcError } from '../io/error-reply.js';
import { classifyBody, type ClassifiedBody, type Era, type ToolCall } from '../mcp/classify.js';
import { idOf, type JsonRpcId, type JsonRpcMessage, type JsonRpcResponse } from '../mcp/jsonrpc.js';
import type { ToolCatalog } from '../proxy/tool-catalog.js';
import type { PaymentNonceKey, QuotaCounter, TaskRecord } from '../store/store.js';
import { carriesTokenArgument, withoutTokenArgument } from '../mcp/token-argument.js';
import { rewriteToolsListMessages, type PriceTag, type ToolPricing } from '../mcp/tools-list.js';
import { unknownToolMessage, type ToolVisibility } from '../mcp/visibility.js';
import type { Logger } from '../observability/logger.js';
import { withoutPayments } from '../payments/x402/payload.js';
import type { Paywall } from '../paywall/decide.js';
import type { HeldCall, PricedCall } from '../paywall/outcome.js';
import { IDEMPOTENCY_HEADER, idempotencyKeyOf } from '../paywall/idempotency-key.js';
import type { ResultShape } from '../mcp/challenge.js';
import { BatchExchange, type HeldEntry } from '../proxy/batch-call.js';
import type { McpCall } from '../proxy/call-state.js';
import { isJson, isPlainJson } from '../proxy/headers.js';
import { PricedExchange, type PricedCallDeps, type Registration } from '../proxy/priced-call.js';
import type { PricedRequests } from '../proxy/priced-requests.js';
import { TaskExchange, taskRequestOf } from '../proxy/task-call.js';
import { taskOwner } from '../paywall/tasks.js';
import { parseJsonOrUndefined } from '../io/json.js';
import { callerHandleOf, withoutCallerHandle } from '../mcp/caller-handle.js';
import { CallerPriceList } from '../paywall/price-list.js';

export interface Authenticator {
  authenticate(authorization: string | undefined, needs: { tools: string[] }): Promise<
    { ok: true; principal: string; scopes: ReadonlySet<string> } | { ok: false; status: 401 | 403; wwwAuthenticate: string; message: string }
  >;
}

/** What the policy gets from the endpoint's deps as it is (mcp-endpoint.ts). */
export interface PolicyInputs {
  pricing: ToolPricing;
  /** Hidden tools and what each caller may see in tools/list (SPEC §18). */
  visibility: ToolVisibility;
  anyPriced: boolean;
  paywall: Paywall;
  catalog: ToolCatalog;
  authenticator: Authenticator | null;
  /** Sessions bound to principals (auth.mode oauth), else null. SPEC §20. */
  sessions: SessionBindings | null;
  /** SPEC §23: the caller's own prices in tools/list (absent: the list is everyone's). */
  priceList?: CallerPriceList | null;
}

export interface McpPolicyDeps extends PolicyInputs {
  registry: PricedRequests;
  priced: PricedCallDeps;
  logger: Logger;
  /** Long-lived GET streams, ended at shutdown (they never finish on their own). */
  openStreams: Set<ServerResponse>;
}

/** The preHandler of every proxied MCP route. */
export async function applyMcpPolicy(deps: McpPolicyDeps, request: FastifyRequest, reply: FastifyReply): Promise<void> {
  const call = request.mcpCall;
  if (request.method !== 'POST') return allowStream(deps, call, request, reply);

  // 1. Parse: the body arrives as text (no JSON parser is registered), refused before anything else.
  const contentType = request.headers['content-type'];
  if (!isJson(contentType)) throw new GatewayError('TB_ERR_UNSUPPORTED_MEDIA_TYPE', 'Unsupported Media Type: MCP requests must be sent as Content-Type: application/json');
  // The body is read as it came (nothing decompresses it) and forwarded re-serialised: a
  // Content-Encoding would describe bytes the gateway never parsed, or bytes the upstream never gets.
  const encoding = request.headers['content-encoding'];
  if (encoding !== undefined && encoding.trim().toLowerCase() !== 'identity') {
    throw new GatewayError('TB_ERR_UNSUPPORTED_MEDIA_TYPE', 'Unsupported Media Type: send MCP request bodies uncompressed, without Content-Encoding');
  }
  const body = parseBody(request.body);
  // 2. Classify and refuse what must never reach the upstream (SPEC §5.2).
  const classified = classifyBody(body, request.headers);
  call.method = classified.method;
  call.era = classified.era;
  call.requestId = classified.batch ? null : idOf(classified.messages[0]);
  call.trace?.describe(classified);
  // 3. Authenticate (SPEC §9) when oauth is on. A hidden tool needs no scope: it does not exist (§18).
  const hidden = classified.toolCalls.filter((toolCall) => deps.visibility.isHidden(toolCall.name));
  const shown = hidden.length === 0 ? classified.toolCalls : classified.toolCalls.filter((toolCall) => !hidden.includes(toolCall));
  const principal = await authenticate(deps, request, shown.map((c) => c.name));
  await requireSessionOwner(deps, request, principal);
  // 4. A request in a legacy session may not reuse the id of a paid call forwarded in it (by any replica,
  // under any config generation): the upstream would route that call's result to it (SPEC §6.5, §21).
  const sessionId = classified.era === 'legacy' ? sessionOf(request) : undefined;
  if (sessionId !== undefined) await refuseReusedIds(deps.registry, sessionId, classified.messages, deps.anyPriced);
  // 5. Route by what the body holds. A call to a hidden tool is answered as for an unknown tool (§18).
  const hiddenCall = hidden[0];
  if (hiddenCall !== undefined && !classified.batch) return void sendRpcError(reply, unknownTool(hiddenCall), hiddenCall.request.id ?? null);
  const priced = classified.toolCalls.filter((toolCall) => deps.pricing.priceOf(toolCall.name) !== undefined);
  // A tasks/* request about a task holding a paid call's credit: its answer is concluded (SPEC §24).
  if (deps.anyPriced && !classified.batch && (await forwardHeldTask(deps, call, request, reply, classified, principal, sessionId))) return;
  if (deps.anyPriced && classified.batch) await refuseHeldTasksInBatch(deps, classified, principal, sessionId);
  if (priced.length === 0 && hidden.length === 0) {
    if (classified.listsTools) await ownPriceList(deps, call, request, classified, principal);
    return forwardFree(deps, call, request, classified, body, sessionId);
  }
  if (!classified.batch) return authorisePricedCall(deps, call, request, reply, classified.era, priced[0] as ToolCall, principal, sessionId);
  return authoriseBatch(deps, call, request, reply, classified, principal, sessionId);
}

/** GET (a stream) and DELETE: authentication only; a GET stream is read event by event (tools/list results shown as the caller may see them). */
async function allowStream(deps: McpPolicyDeps, call: McpCall, request: FastifyRequest, reply: FastifyReply): Promise<void> {
  call.method = request.method;
  const principal = await authenticate(deps, request, []);
  await requireSessionOwner(deps, request, principal);
  if (request.method === 'GET') {
    call.sessionId = sessionOf(request);
    deps.openStreams.add(reply.raw);
  }
}

function forwardFree(deps: McpPolicyDeps, call: McpCall, request: FastifyRequest, classified: ClassifiedBody, body: unknown, sessionId: string | undefined): void {
  call.rewriteJson = classified.listsTools;
  if (deps.anyPriced && sessionId !== undefined) {
    call.sessionId = sessionId;
    call.ownIds = requestIds(classified.messages);
  }
  // No handle (token argument, or the one a tools/list names for its own prices) and no signed x402 payment reaches the upstream.
  request.body = forwardedBody(request, withoutCallerHandle(withoutPayments(withoutTokenArguments(deps, classified, body))));
}

/**
 * SPEC §23: a tools/list from a known caller (a principal, or a handle named in params._meta) shows that
 * caller's own prices, and its reply is private. A store that fails leaves the prices out, never the list.
 */
async function ownPriceList(deps: McpPolicyDeps, call: McpCall, request: FastifyRequest, classified: ClassifiedBody, principal: string | null): Promise<void> {
  if (!deps.priceList) return;
  const handle = classified.messages.map(callerHandleOf).find((named) => named !== null) ?? null;
  const caller = { principal, clientKey: principal ? `p:${principal}` : `ip:${request.ip}`, handle };
  if (!CallerPriceList.isKnown(caller)) return;
  call.privateList = true;
  try {
    call.ownPrices = await deps.priceList.forCaller(caller);
  } catch (error) {
    deps.logger.warn({ evt: 'paywall_unavailable', reqId: request.id, op: 'ownPriceList', code: (error as { code?: string }).code }, "a caller's own prices could not be read: its tools/list goes without them");
  }
}

/** SPEC §20: the body with the token argument removed from every call to a tool the gateway does not price. */
function withoutTokenArguments(deps: McpPolicyDeps, classified: ClassifiedBody, body: unknown): unknown {
  const argumentName = deps.pricing.argumentName;
  if (!classified.toolCalls.some((toolCall) => carriesTokenArgument(toolCall, argumentName))) return body;
  const stripped = classified.messages.map((message) => {
    const toolCall = classified.toolCalls.find((c) => c.request === message);
    return toolCall ? withoutTokenArgument(toolCall, argumentName) : message;
  });
  return classified.batch ? stripped : stripped[0];
}

/** True when the request names a task holding a reservation: it is then forwarded as is and concluded by TaskExchange. */
async function forwardHeldTask(deps: McpPolicyDeps, call: McpCall, request: FastifyRequest, reply: FastifyReply, classified: ClassifiedBody, principal: string | null, sessionId: string | undefined): Promise<boolean> {
  const named = taskRequestOf(classified.messages[0]);
  if (!named) return false;
  const held = await deps.paywall.heldTask(named.taskId, taskOwner(principal, sessionId));
  if (!held) return false;
  const id = idOf(classified.messages[0]);
  if (sessionId !== undefined && named.method !== 'tasks/cancel') await registerTaskRequest(deps, sessionId, id, held.record);
  const resultShape = async (): Promise<ResultShape> => ({ era: classified.era, structuredContentAllowed: false });
  const exchange = new TaskExchange(deps.priced, call, reply, { ...held, method: named.method, id, resultShape });
  call.priced = exchange;
  request.body = forwardedBody(request, classified.messages[0]);
  const concluded = exchange.run().catch((error: unknown) => exchange.abandon(error));
  call.trace?.until(concluded);
  return true;
}

/**
 * §6.5 for a held task's tasks/result or tasks/get in a legacy session: its answer is concluded only on
 * this request's own reply (TaskExchange). The same response turning up anywhere else — a Last-Event-ID
 * replay of this reply, the GET stream, another request's stream — must never carry the result unpaid,
 * so the request is registered as a released priced request before it is forwarded: the response screen
 * drops it there, whatever the task's state (the client asks again with tasks/result and is answered on
 * its own reply). A registry that cannot be written refuses the request (nothing forwarded).
 */
async function registerTaskRequest(deps: McpPolicyDeps, sessionId: string, id: JsonRpcId, record: TaskRecord): Promise<void> {
  const { handleHash, reservationId, tool, sku, cost, charge, deadline, fingerprint, startedAt } = record;
  await deps.registry.register(sessionId, id, { state: 'released', handleHash, reservationId, tool, sku, cost, charge, deadline, remaining: null, fingerprint, startedAt });
  deps.registry.noteConcluded(sessionId, id, 'released');
}

/**
 * A batch may not carry a tasks/* request about a task holding a paid call's credit: its answer would
 * share the batch's reply with others and could not be concluded on its own, so a result would go out
 * unpaid. The whole batch is refused, nothing forwarded; the request works sent alone (§24).
 */
async function refuseHeldTasksInBatch(deps: McpPolicyDeps, classified: ClassifiedBody, principal: string | null, sessionId: string | undefined): Promise<void> {
  const owner = taskOwner(principal, sessionId);
  for (const message of classified.messages) {
    const named = taskRequestOf(message);
    if (named && (await deps.paywall.heldTask(named.taskId, owner))) {
      throw new GatewayError('TB_ERR_INVALID_REQUEST', `Invalid Request: ${named.method} for a paid task cannot be sent in a batch; send it alone`);
    }
  }
}

/** SPEC §6.2 steps 1–6 for one priced tools/call; an authorised call is forwarded and concluded by PricedExchange.run. */
async function authorisePricedCall(deps: McpPolicyDeps, call: McpCall, request: FastifyRequest, reply: FastifyReply, era: Era, toolCall: ToolCall, principal: string | null, sessionId: string | undefined): Promise<void> {
  const priced = pricedCall(deps, request, era, toolCall, principal, call.startedAt);
  const authorisation = await deps.paywall.authorise(priced);
  if (authorisation.kind === 'answer') {
    deps.paywall.recordAnswer(priced, authorisation);
    return sendJson(reply, 200, { jsonrpc: '2.0', id: toolCall.request.id ?? null, result: authorisation.result });
  }
  // Forwarded by the proxy once this hook returns: the token stripped, nothing else changed (§5.4).
  request.body = forwardedBody(request, { ...toolCall.request, params: authorisation.forwardParams });
  const registration = sessionId === undefined ? null : register(deps, request, sessionId, toolCall, priced, authorisation);
  const exchange = new PricedExchange(deps.priced, call, reply, priced, authorisation, registration);
  call.priced = exchange;
  const concluded = exchange.run().catch((error: unknown) => exchange.abandon(error));
  call.trace?.until(concluded);
}

/**
 * SPEC §5.6: a legacy batch holding priced calls (or calls to hidden tools, §18) is split. Entries the
 * gateway answers itself are answered here; the rest (free entries and authorised priced ones, token
 * stripped) go upstream as one batch; BatchExchange merges the replies in the original order (and shows
 * a tools/list result in it as the caller may see it).
 */
async function authoriseBatch(deps: McpPolicyDeps, call: McpCall, request: FastifyRequest, reply: FastifyReply, classified: ClassifiedBody, principal: string | null, sessionId: string | undefined): Promise<void> {
  const ids = requestIds(classified.messages).map((id) => JSON.stringify(id));
  if (new Set(ids).size !== ids.length) throw new GatewayError('TB_ERR_INVALID_REQUEST', 'Invalid Request: a batch holding priced calls or calls to unknown tools must not repeat request ids');

  const answers = new Map<JsonRpcMessage, JsonRpcResponse>();
  const held: HeldEntry[] = [];
  const forwarded: JsonRpcMessage[] = [];
  for (const message of classified.messages) {
    const toolCall = classified.toolCalls.find((c) => c.request === message);
    if (toolCall && deps.visibility.isHidden(toolCall.name)) {
      answers.set(message, rpcErrorBody(unknownTool(toolCall), toolCall.request.id ?? null));
      continue;
    }
    if (!toolCall || !deps.pricing.priceOf(toolCall.name)) {
      forwarded.push(withoutCallerHandle(withoutPayments(toolCall ? withoutTokenArgument(toolCall, deps.pricing.argumentName) : message)) as JsonRpcMessage);
      continue;
    }
    const priced = pricedCall(deps, request, 'legacy', toolCall, principal, call.startedAt, true);
    const authorisation = await deps.paywall.authorise(priced);
    if (authorisation.kind === 'answer') {
      deps.paywall.recordAnswer(priced, authorisation);
      answers.set(message, { jsonrpc: '2.0', id: toolCall.request.id ?? null, result: authorisation.result });
      continue;
    }
    const registration = sessionId === undefined ? null : register(deps, request, sessionId, toolCall, priced, authorisation);
    held.push({ call: toolCall, priced, authorisation, registration });
    forwarded.push({ ...toolCall.request, params: authorisation.forwardParams });
  }
  // Every entry answered by the gateway: nothing goes upstream.
  if (forwarded.length === 0) return sendJson(reply, 200, classified.messages.flatMap((message) => answers.get(message) ?? []));
  request.body = forwardedBody(request, forwarded);
  const view = call.toolView;
  const rewriteList = classified.listsTools ? (responses: JsonRpcResponse[]) => (rewriteToolsListMessages(responses, deps.pricing, view) as JsonRpcResponse[] | undefined) ?? responses : null;
  const exchange = new BatchExchange(deps.priced, call, reply, { messages: classified.messages, answers, held, rewriteList }, call.startedAt);
  call.priced = exchange;
  const concluded = exchange.run().catch((error: unknown) => exchange.abandon(error));
  call.trace?.until(concluded);
}

/** Records the forwarded priced request in its upstream session (in process at once, in the store before any of its reply goes out). */
function register(deps: McpPolicyDeps, request: FastifyRequest, sessionId: string, toolCall: ToolCall, priced: PricedCall, authorisation: HeldCall): Registration {
  const id = toolCall.request.id ?? null;
  const written = deps.registry
    .register(sessionId, id, {
      state: 'in_flight',
      // An x402-paid call holds no reservation: its record names the authorization instead (settled only by this exchange).
      ...heldReservation(authorisation),
      tool: toolCall.name,
      sku: priced.price.sku,
      cost: priced.price.cost,
      charge: priced.price.charge,
      deadline: priced.startedAt + deps.priced.callDeadlineMs,
      remaining: null,
      fingerprint: authorisation.facts.tokenFingerprint,
      startedAt: priced.startedAt,
    })
    .then(
      () => true,
      (error: unknown) => {
        deps.logger.warn({ evt: 'paywall_unavailable', reqId: request.id, op: 'registerPricedRequest', code: (error as { code?: string }).code }, 'a paid call could not be registered: its reply is held until it is concluded');
        return false;
      },
    );
  const version = request.headers['mcp-protocol-version'];
  return { sessionId, protocolVersion: typeof version === 'string' ? version : undefined, key: deps.registry.key(sessionId, id), written };
}

/** What the registry needs to conclude the call elsewhere: its reservation (and budget draws), its free call (§23), or its x402 authorization. */
function heldReservation(authorisation: HeldCall): { handleHash: string; reservationId: string; x402?: PaymentNonceKey; allowance?: string; quotas?: { holdId: string; counters: QuotaCounter[] } } {
  const { kind } = authorisation;
  if (kind === 'reserved') return { handleHash: authorisation.handleHash, reservationId: authorisation.reservationId, ...(authorisation.quotas ? { quotas: authorisation.quotas } : {}) };
  if (kind === 'allowance') return { handleHash: '', reservationId: '', allowance: authorisation.hold.allowance, quotas: { holdId: authorisation.hold.holdId, counters: authorisation.hold.counters } };
  return { handleHash: '', reservationId: '', x402: authorisation.claim.key };
}

function pricedCall(deps: McpPolicyDeps, request: FastifyRequest, era: Era, toolCall: ToolCall, principal: string | null, startedAt: number, inBatch = false): PricedCall {
  const price = deps.pricing.priceOf(toolCall.name) as PriceTag;
  // structuredContent only for a tool known to declare no outputSchema (unknown → omitted).
  const resultShape = async (): Promise<ResultShape> => {
    const declares = await deps.catalog.declaresOutputSchema(toolCall.name).catch(() => undefined);
    return { era, structuredContentAllowed: declares === false };
  };
  const taskOwnerOf = taskOwner(principal, era === 'legacy' ? sessionOf(request) : undefined);
  // §24: one Idempotency-Key header cannot key several calls, so a batch's entries take only their own _meta key.
  const idempotencyKey = idempotencyKeyOf(inBatch ? undefined : request.headers[IDEMPOTENCY_HEADER], toolCall.request.params);
  return { call: toolCall, price, principal, clientKey: principal ? `p:${principal}` : `ip:${request.ip}`, resultShape, startedAt, reqId: request.id, taskOwner: taskOwnerOf, idempotencyKey };
}

/** Resolves with the principal (null when auth is off) and sets what the caller may see in tools/list; throws TB_ERR_UNAUTHENTICATED (401) / TB_ERR_INSUFFICIENT_SCOPE (403) with its WWW-Authenticate. */
async function authenticate(deps: McpPolicyDeps, request: FastifyRequest, tools: string[]): Promise<string | null> {
  if (!deps.authenticator) {
    request.mcpCall.toolView = deps.visibility.viewFor(null);
    return null;
  }
  const outcome = await deps.authenticator.authenticate(request.headers.authorization, { tools });
  if (outcome.ok) {
    request.mcpCall.toolView = deps.visibility.viewFor(outcome.scopes);
    return outcome.principal;
  }
  const code = outcome.status === 401 ? 'TB_ERR_UNAUTHENTICATED' : 'TB_ERR_INSUFFICIENT_SCOPE';
  throw new GatewayError(code, outcome.message, { headers: { 'www-authenticate': outcome.wwwAuthenticate } });
}

/**
 * SPEC §20 (oauth): a request on a legacy session must come from the principal that created it. Anyone
 * else — and anyone at all on a session with no recorded owner — gets 404, as for a session that does not
 * exist; nothing is forwarded. The principal is kept for the reply (a session it hands out is bound to it).
 */
async function requireSessionOwner(deps: McpPolicyDeps, request: FastifyRequest, principal: string | null): Promise<void> {
  if (!deps.sessions || principal === null) return;
  request.mcpCall.principal = principal;
  const sessionId = request.headers['mcp-session-id'];
  if (sessionId === undefined) return;
  const owner = await deps.sessions.ownerOf(sessionId as string);
  if (owner === principal) return;
  deps.logger.info({ evt: 'session_refused', reqId: request.id, reason: owner === null ? 'unbound' : 'other_principal' }, 'a request on a session that is not its principal\'s was answered 404');
  throw new GatewayError('TB_ERR_SESSION_NOT_FOUND', 'Session not found');
}

/** SPEC §18: a call to a hidden tool is answered as the upstream would answer an unknown tool. */
function unknownTool(toolCall: ToolCall): GatewayError {
  return new GatewayError('TB_ERR_INVALID_PARAMS', unknownToolMessage(toolCall.name));
}

async function refuseReusedIds(registry: PricedRequests, sessionId: string, messages: JsonRpcMessage[], shared: boolean): Promise<void> {
  const ids: JsonRpcId[] = [];
  for (const message of messages) if (message.id !== undefined && message.id !== null && 'method' in message) ids.push(message.id);
  if (ids.length === 0) return;
  if ((await registry.reusedId(sessionId, ids, shared)) !== undefined) {
    throw new GatewayError('TB_ERR_INVALID_REQUEST', 'Invalid Request: this request id was already used by a paid call in this session; use a new id');
  }
}

function parseBody(raw: unknown): unknown {
  if (typeof raw !== 'string' || raw.trim() === '') throw new GatewayError('TB_ERR_PARSE', 'Parse error: the request body is empty');
  const parsed = parseJsonOrUndefined(raw);
  if (parsed === undefined) throw new GatewayError('TB_ERR_PARSE', 'Parse error: the request body is not valid JSON');
  return parsed;
}

/**
 * What the proxy sends: reply-from JSON.stringify's a parsed body when the content type is exactly
 * application/json; for a `+json` type it would send the value as it is, so that one is serialised here.
 */
function forwardedBody(request: FastifyRequest, value: unknown): unknown {
  return isPlainJson(request.headers['content-type']) ? value : JSON.stringify(value);
}

function requestIds(messages: JsonRpcMessage[]): JsonRpcId[] {
  const ids: JsonRpcId[] = [];
  for (const message of messages) if ('method' in message && message.id !== undefined) ids.push(message.id);
  return ids;
}

function sessionOf(request: FastifyRequest): string | undefined {
  const value = request.headers['mcp-session-id'];
  return typeof value === 'string' && value !== '' ? value : undefined;
}

function sendJson(reply: FastifyReply, status: number, body: unknown): void {
  reply.code(status).header('content-type', 'application/json').send(JSON.stringify(body));
}
