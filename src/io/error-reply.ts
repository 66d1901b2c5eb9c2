// The two writers of a GatewayError to the wire (SPEC §4): every refusal the gateway answers itself goes
// through one of them, with the status and JSON-RPC code of the one table (errors.ts).
// - sendRpcError: the MCP endpoint (and the stdio bridge's), a JSON-RPC error object.
// - sendErrorReply: every other route, `{"error": message}` (the body SPEC §4 shows for the webhook).
// A reply whose headers are already out cannot carry an error any more: the connection is cut.
import type { ServerResponse } from 'node:http';
import type { FastifyReply } from 'fastify';
import { GatewayError } from '../errors.js';

type JsonRpcId = string | number | null;

/** The JSON-RPC error body for `error` answering request `id` (null when the request could not be read). */
export function rpcErrorBody(error: GatewayError, id: JsonRpcId, data?: unknown): { jsonrpc: '2.0'; id: JsonRpcId; error: { code: number; message: string; data?: unknown } } {
  return { jsonrpc: '2.0', id, error: data === undefined ? { code: error.rpcCode, message: error.message } : { code: error.rpcCode, message: error.message, data } };
}

/** The MCP endpoint's error answer: the table's status, the error's headers, a JSON-RPC error body. Returns the reply given. */
export function sendRpcError<R extends FastifyReply | ServerResponse>(reply: R, error: GatewayError, id: JsonRpcId, data?: unknown): R {
  write(reply, error, JSON.stringify(rpcErrorBody(error, id, data)));
  return reply;
}

/** Any other route's error answer: the table's status, the error's headers, `{"error": message}`. Returns the reply given. */
export function sendErrorReply<R extends FastifyReply | ServerResponse>(reply: R, error: GatewayError): R {
  write(reply, error, JSON.stringify({ error: error.message }));
  return reply;
}

function write(reply: FastifyReply | ServerResponse, error: GatewayError, text: string): void {
  const raw = 'raw' in reply ? reply.raw : reply;
  if (raw.destroyed) return;
  if (raw.headersSent || ('sent' in reply && reply.sent)) {
    raw.destroy();
    return;
  }
  if ('raw' in reply) {
    reply.removeHeader('content-length');
    reply.removeHeader('content-encoding');
    reply.code(error.status).headers(error.headers).header('content-type', 'application/json').send(text);
    return;
  }
  raw.writeHead(error.status, { ...error.headers, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)) }).end(text);
}

/**
 * What a route answers for a thrown error that is not a GatewayError (fastify's own: a body over the
 * limit, an unreadable request), or for a GatewayError as it is. Anything unexpected is TB_ERR_INTERNAL
 * (503: the gateway itself never answers 500, SPEC §5.2).
 */
export function asGatewayError(error: unknown, bodyLimit: number): GatewayError {
  if (error instanceof GatewayError) return error;
  const code = (error as { code?: string } | null)?.code;
  const status = (error as { statusCode?: number } | null)?.statusCode;
  if (code === 'FST_ERR_CTP_BODY_TOO_LARGE' || status === 413) return new GatewayError('TB_ERR_BODY_TOO_LARGE', `Request body too large: the limit is ${bodyLimit} bytes`);
  if (status === 415) return new GatewayError('TB_ERR_UNSUPPORTED_MEDIA_TYPE', 'Unsupported Media Type');
  if (status !== undefined && status < 500) return new GatewayError('TB_ERR_INVALID_REQUEST', 'Invalid Request: the request could not be read');
  return new GatewayError('TB_ERR_INTERNAL', 'the gateway could not complete the request', { cause: error });
}
