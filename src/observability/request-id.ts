// Request ids (issue 8): every request gets one, carried as `reqId` on the log lines written while
// handling it and echoed as the `x-request-id` response header. A caller's (or a load balancer's)
// `x-request-id` is kept when it is short and printable; anything else is replaced, so a header can
// never smuggle newlines or a megabyte of text into the logs.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { FastifyInstance } from 'fastify';

export const REQUEST_ID_HEADER = 'x-request-id';
const ACCEPTABLE = /^[\x21-\x7e]{1,128}$/;

/** fastify's `genReqId`: the incoming id when acceptable, else a fresh UUID. */
export function requestIdOf(req: IncomingMessage): string {
  const incoming = req.headers[REQUEST_ID_HEADER];
  return typeof incoming === 'string' && ACCEPTABLE.test(incoming) ? incoming : randomUUID();
}

/**
 * Echoes the id on every response. Set on the raw response so it survives `reply.hijack()` (the MCP
 * route writes to the socket itself; Node merges setHeader() headers into writeHead()).
 */
export function registerRequestIdEcho(app: FastifyInstance): void {
  app.addHook('onRequest', (request, reply, done) => {
    reply.raw.setHeader(REQUEST_ID_HEADER, request.id);
    done();
  });
}
