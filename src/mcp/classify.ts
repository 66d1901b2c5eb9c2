// Classifies one parsed POST body: era (SPEC §5.1), the MCP method, the tool of a tools/call, and the
// checks that refuse a request before anything reaches the upstream (SPEC §5.2). Pure: no I/O.
import { GatewayError } from '../errors.js';
import { isObject, isRequestLike, isValidMessage, type JsonObject, type JsonRpcMessage, type JsonRpcRequest } from './jsonrpc.js';

export const MODERN_VERSION = '2026-07-28';
export const VERSION_META_KEY = 'io.modelcontextprotocol/protocolVersion';
export const LEGACY_VERSIONS = ['2025-03-26', '2025-06-18', '2025-11-25'] as const;

export type Era = 'legacy' | 'modern';

/** The params field whose value a modern request's Mcp-Name header repeats. */
const NAME_PARAM: Record<string, string> = { 'tools/call': 'name', 'prompts/get': 'name', 'resources/read': 'uri' };

export interface ToolCall {
  request: JsonRpcRequest & { params: { name: string; arguments: JsonObject } };
  name: string;
  args: JsonObject;
}

export interface ClassifiedBody {
  era: Era;
  batch: boolean;
  messages: JsonRpcMessage[];
  /** Method of a single request, or "batch" (metrics label). */
  method: string;
  /** tools/call requests (validated) in the body, in order. */
  toolCalls: ToolCall[];
  /** True when any request is tools/list (the reply must be parsed and rewritten). */
  listsTools: boolean;
}

/**
 * Validates the shape of a parsed body and classifies it.
 * @throws GatewayError TB_ERR_INVALID_REQUEST / TB_ERR_INVALID_PARAMS / TB_ERR_HEADER_MISMATCH
 */
export function classifyBody(body: unknown, headers: Record<string, string | string[] | undefined>): ClassifiedBody {
  if (nestsDeeperThan(body, MAX_NESTING_DEPTH)) {
    throw new GatewayError('TB_ERR_INVALID_REQUEST', `Invalid Request: the body nests objects and arrays deeper than ${MAX_NESTING_DEPTH} levels`);
  }
  const batch = Array.isArray(body);
  const messages: unknown[] = batch ? (body as unknown[]) : [body];
  if (messages.length === 0) throw new GatewayError('TB_ERR_INVALID_REQUEST', 'Invalid Request: an empty batch is not a JSON-RPC request');
  for (const message of messages) {
    if (!isValidMessage(message)) throw new GatewayError('TB_ERR_INVALID_REQUEST', 'Invalid Request: expected a JSON-RPC 2.0 request, notification or response object');
  }
  const valid = messages as JsonRpcMessage[];
  const first = valid[0] as JsonRpcMessage;
  const era: Era = !batch && isRequestLike(first) && isModernParams(first.params) ? 'modern' : 'legacy';

  const toolCalls: ToolCall[] = [];
  let listsTools = false;
  for (const message of valid) {
    if (!isRequestLike(message)) continue;
    if (message.method === 'tools/list') listsTools = true;
    if (message.method === 'tools/call') toolCalls.push(validateToolCall(message));
  }
  // Body errors (-32600/-32602) first: a header cannot "match" a name that is not a string.
  if (era === 'modern') checkModernHeaders(first as JsonRpcRequest, headers);
  const method = batch ? 'batch' : isRequestLike(first) ? first.method : 'response';
  return { era, batch, messages: valid, method, toolCalls, listsTools };
}

/**
 * JSON.parse accepts any depth, but re-serialising the body for the upstream (SPEC §5.2) overflows the
 * stack a few thousand levels down: a hostile body would fail after the paywall reserved credits.
 * No MCP request needs this much nesting, so deeper bodies are refused before anything else runs.
 */
export const MAX_NESTING_DEPTH = 128;

function nestsDeeperThan(root: unknown, max: number): boolean {
  const pending: { value: object; depth: number }[] = typeof root === 'object' && root !== null ? [{ value: root, depth: 1 }] : [];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    if (next.depth > max) return true;
    for (const child of Array.isArray(next.value) ? (next.value as unknown[]) : Object.values(next.value as Record<string, unknown>)) {
      if (typeof child === 'object' && child !== null) pending.push({ value: child, depth: next.depth + 1 });
    }
  }
  return false;
}

function isModernParams(params: unknown): boolean {
  return isObject(params) && isObject(params._meta) && Object.hasOwn(params._meta, VERSION_META_KEY);
}

function validateToolCall(message: JsonRpcRequest): ToolCall {
  if (message.id === undefined) {
    throw new GatewayError('TB_ERR_INVALID_REQUEST', 'Invalid Request: tools/call must be a request with an id, not a notification');
  }
  const params = message.params;
  if (!isObject(params) || typeof params.name !== 'string') {
    throw new GatewayError('TB_ERR_INVALID_PARAMS', 'Invalid params: tools/call needs params.name as a string');
  }
  if (params.arguments !== undefined && !isObject(params.arguments)) {
    throw new GatewayError('TB_ERR_INVALID_PARAMS', 'Invalid params: tools/call params.arguments must be an object');
  }
  const args = (params.arguments ?? {});
  return { request: message as ToolCall['request'], name: params.name, args };
}

/** SPEC §5.2: MCP-Protocol-Version, Mcp-Method and Mcp-Name must repeat the body. */
function checkModernHeaders(message: JsonRpcRequest, headers: Record<string, string | string[] | undefined>): void {
  const params = message.params as JsonObject;
  const meta = params._meta as JsonObject;
  expectHeader(headers, 'mcp-protocol-version', meta[VERSION_META_KEY]);
  expectHeader(headers, 'mcp-method', message.method);
  const nameParam = Object.hasOwn(NAME_PARAM, message.method) ? NAME_PARAM[message.method] : undefined;
  if (nameParam !== undefined) expectHeader(headers, 'mcp-name', params[nameParam]);
}

function expectHeader(headers: Record<string, string | string[] | undefined>, name: string, expected: unknown): void {
  const raw = headers[name];
  const actual = typeof raw === 'string' ? decodeHeaderValue(raw) : undefined;
  if (typeof expected !== 'string' || actual !== expected) {
    throw new GatewayError('TB_ERR_HEADER_MISMATCH', `Header mismatch: the ${name} header must repeat the body's value`);
  }
}

/** `=?base64?…?=` carries values that are not plain ASCII (SPEC §5.2). */
export function decodeHeaderValue(value: string): string {
  const match = /^=\?base64\?([A-Za-z0-9+/=]*)\?=$/.exec(value);
  return match ? Buffer.from(match[1] as string, 'base64').toString('utf8') : value;
}
