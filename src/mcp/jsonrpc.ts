// JSON-RPC 2.0 envelopes as they cross the gateway: what counts as a message, ids, error objects.
// Wire error numbers live in errors.ts (one table); this module only shapes them.

export type JsonRpcId = string | number | null;
export type JsonObject = Record<string, unknown>;

export interface JsonRpcRequest {
  jsonrpc: '2.0';
  id?: JsonRpcId;
  method: string;
  params?: unknown;
}

export interface JsonRpcResponse {
  jsonrpc: '2.0';
  id: JsonRpcId;
  result?: unknown;
  error?: { code: number; message: string; data?: unknown };
}

export type JsonRpcMessage = JsonRpcRequest | JsonRpcResponse;

export const isObject = (value: unknown): value is JsonObject => typeof value === 'object' && value !== null && !Array.isArray(value);

const isId = (value: unknown): value is JsonRpcId =>
  typeof value === 'string' || (typeof value === 'number' && Number.isFinite(value)) || value === null;

/** A request or notification (has a string method). */
export function isRequestLike(value: unknown): value is JsonRpcRequest {
  return isObject(value) && value.jsonrpc === '2.0' && typeof value.method === 'string' && (!('id' in value) || isId(value.id));
}

/** A response the client POSTs back to a server-initiated request. */
export function isResponseLike(value: unknown): value is JsonRpcResponse {
  return isObject(value) && value.jsonrpc === '2.0' && !('method' in value) && 'id' in value && isId(value.id) && ('result' in value || 'error' in value);
}

export const isValidMessage = (value: unknown): value is JsonRpcMessage => isRequestLike(value) || isResponseLike(value);

export const hasId = (message: JsonRpcRequest): boolean => message.id !== undefined;

export function errorResponse(id: JsonRpcId, code: number, message: string, data?: unknown): JsonRpcResponse {
  return { jsonrpc: '2.0', id, error: data === undefined ? { code, message } : { code, message, data } };
}

export function resultResponse(id: JsonRpcId, result: unknown): JsonRpcResponse {
  return { jsonrpc: '2.0', id, result };
}

/** The id of a message when it has a usable one, else null (for error replies). */
export function idOf(value: unknown): JsonRpcId {
  return isObject(value) && isId(value.id) ? value.id : null;
}
