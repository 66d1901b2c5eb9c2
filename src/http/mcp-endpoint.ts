// The MCP endpoint (SPEC §4, §5, §16): `@fastify/http-proxy` registered on mcpPath, with the gateway's
// policy in fastify's lifecycle around it — one encapsulated scope, so every hook applies to exactly the
// routes the router matched as the endpoint:
//   onRequest   the call's state, the one metrics record at close, the Origin/Host guards
//   preHandler  parse, classify, authenticate, paywall (http/mcp-policy.ts); its reply ends the request
//   handler     http-proxy → reply-from → undici (CallDispatcher: the call's abort signal)
//   reply hooks rewriteRequestHeaders / rewriteHeaders (§5.2 header rules), onResponse (free replies
//               relayed, priced ones to their exchange), onError (failures told apart, §16)
// Nothing else in the gateway forwards MCP traffic.
import type { ServerResponse } from 'node:http';
import httpProxy from '@fastify/http-proxy';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { GatewayError } from '../errors.js';
import type { DeadlineQueue } from '../proxy/deadlines.js';
import { createRequestGuard, type GuardSettings } from './guards.js';
import { applyMcpPolicy, type PolicyInputs } from './mcp-policy.js';
import { idOf, type JsonRpcId } from '../mcp/jsonrpc.js';
import { asGatewayError, sendRpcError } from '../io/error-reply.js';
import type { Logger } from '../observability/logger.js';
import type { Metrics } from '../observability/metrics.js';
import type { Tracing } from '../observability/tracing.js';
import type { Store } from '../store/store.js';
import { sessionHandedOut, type SessionBindings } from '../auth/session-bindings.js';
import { kCall, McpCall, type UpstreamHead } from '../proxy/call-state.js';
import { CallDispatcher } from '../proxy/dispatcher.js';
import { relayFreeReply } from '../proxy/free-reply.js';
import { normaliseUpstreamHeaders, toClientHeaders, toUpstreamHeaders, type HeaderMap } from '../proxy/headers.js';
import type { PricedCallDeps } from '../proxy/priced-call.js';
import type { PricedRequests } from '../proxy/priced-requests.js';
import { ProxyRecorder } from '../proxy/recorder.js';
import { discard } from '../io/body.js';
import { parseJsonOrUndefined } from '../io/json.js';
import { ResponseScreen } from '../proxy/response-screen.js';
import { classifyUpstreamError, UpstreamAbort } from '../proxy/upstream-failure.js';
import type { UpstreamTarget } from '../proxy/upstream-target.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The MCP endpoint's per-request state (proxy/call-state.ts); null outside the endpoint. */
    mcpCall: McpCall;
  }
}

export interface McpEndpointDeps extends PolicyInputs {
  /** SPEC §18: `default` for the top-level endpoint, else its `servers` key (a metric label, a log field). */
  server?: string;
  mcpPath: string;
  target: UpstreamTarget;
  upstreamHeaders: Record<string, string>;
  guards: GuardSettings;
  store: Store;
  callDeadlineMs: number;
  maxResponseBytes: number;
  bodyLimit: number;
  metrics: Metrics;
  logger: Logger;
  now: () => number;
  /** The gateway's deadline queue (one per gateway, closed with it). */
  deadlines: DeadlineQueue;
  /** The process's priced-request registry (SPEC §6.5, §21): outlives this endpoint's config generation. */
  registry: PricedRequests;
  /** Long-lived GET streams, ended at shutdown (they never finish on their own). */
  openStreams: Set<ServerResponse>;
  /** null when tracing is off: no span is ever built. */
  tracing?: Tracing | null;
}

/** A free call whose client went away: its upstream request is aborted with this (one instance, no per-call error). */
const CLIENT_GONE = new UpstreamAbort('client_gone');

export async function registerMcpEndpoint(app: FastifyInstance, deps: McpEndpointDeps): Promise<void> {
  const upstreamHeaders = normaliseUpstreamHeaders(deps.upstreamHeaders);
  const recorder = new ProxyRecorder({ metrics: deps.metrics, logger: deps.logger, now: deps.now, server: deps.server });
  const registry = deps.registry;
  const screen = new ResponseScreen({ registry, paywall: deps.paywall, logger: deps.logger });
  const pricedDeps: PricedCallDeps = {
    paywall: deps.paywall,
    registry,
    recorder,
    deadlines: deps.deadlines,
    cancel: { target: deps.target, upstreamHeaders: upstreamHeaders.values, logger: deps.logger },
    maxResponseBytes: deps.maxResponseBytes,
    callDeadlineMs: deps.callDeadlineMs,
    now: deps.now,
  };
  const freeDeps = { pricing: deps.pricing, screen: deps.anyPriced ? screen : null, recorder, maxResponseBytes: deps.maxResponseBytes };
  const policyDeps = {
    pricing: deps.pricing,
    visibility: deps.visibility,
    anyPriced: deps.anyPriced,
    paywall: deps.paywall,
    priceList: deps.priceList ?? null,
    catalog: deps.catalog,
    authenticator: deps.authenticator,
    registry,
    sessions: deps.sessions,
    priced: pricedDeps,
    logger: deps.logger,
    openStreams: deps.openStreams,
  };
  const guard = createRequestGuard(deps.guards);
  const tracing = deps.tracing ?? null;

  /** The one record of a request on the endpoint, when its response closes (finished, or cut by the client). */
  function onResponseClosed(this: ServerResponse): void {
    const call = (this as ServerResponse & { [kCall]: McpCall })[kCall];
    deps.openStreams.delete(this);
    recorder.request(call, this.writableFinished || this.headersSent ? this.statusCode : 499);
    // A free call's upstream request ends with its client (§5.2); a priced call is read to its end (§6.5).
    // A GET stream the gateway ended itself (endStreams: shutdown, reload) finished on our side only: its
    // upstream stream is cut too, or it stays open on the upstream agent (a reload keeps the agent).
    if (call.priced === null && (!this.writableFinished || call.method === 'GET')) call.abort(CLIENT_GONE);
  }

  await app.register(async (scope) => {
    scope.decorateRequest('mcpCall', null as unknown as McpCall);

    scope.addHook('onRequest', (request, reply, done) => {
      const call = new McpCall(deps.now());
      request.mcpCall = call;
      if (tracing) call.trace = tracing.startRequest(request.method, deps.mcpPath, request.headers, reply.raw);
      (reply.raw as ServerResponse & { [kCall]: McpCall })[kCall] = call;
      reply.raw.on('close', onResponseClosed); // 'close' fires once; `on` spares the once-wrapper
      const refused = guard(request.headers);
      if (refused) return void sendRpcError(reply, refused, null);
      done();
    });

    scope.setErrorHandler((error, request, reply) => {
      const code = (error as { code?: string }).code;
      const gatewayError = asGatewayError(error, deps.bodyLimit);
      if (gatewayError.code === 'TB_ERR_INTERNAL') recorder.internalError(request.id, error);
      const id = gatewayError.code === 'TB_ERR_PARSE' || code === 'FST_ERR_CTP_BODY_TOO_LARGE' ? null : (request.mcpCall?.requestId ?? idFromRaw(request.body));
      sendRpcError(reply, gatewayError, id);
    });

    await scope.register(httpProxy, {
      upstream: deps.target.url,
      prefix: deps.mcpPath,
      routes: [''], // exactly mcpPath: `/mcp/` is not the endpoint
      httpMethods: ['GET', 'POST', 'DELETE'],
      proxyPayloads: false, // bodies are parsed by the gateway's own parser (server.ts) and replaced by the policy
      // Traced: the policy runs in the request span's context, so its store and provider calls are the span's children.
      // Fastify awaits an async preHandler (a rejection becomes the route's error); @fastify/http-proxy's
      // types say it returns void. (A callback-style rewrite seemed to break Last-Event-ID replays in
      // test/e2e/visibility.test.ts; that failure was the test upstream's event store replaying out of
      // order, since fixed in test/helpers/ordered-event-store.ts. The async form stays: fastify's own.)
      // eslint-disable-next-line @typescript-eslint/no-misused-promises -- see above: the plugin's type is narrower than fastify's
      preHandler: (request: FastifyRequest, reply: FastifyReply) => (request.mcpCall.trace ? request.mcpCall.trace.within(() => applyMcpPolicy(policyDeps, request, reply)) : applyMcpPolicy(policyDeps, request, reply)),
      undici: new CallDispatcher(deps.target.dispatcher, deps.now) as never,
      retryMethods: [], // never replay a request: the upstream decides what a repeat means
      disableRequestLogging: true,
      internalRewriteLocationHeader: false,
      replyOptions: {
        rewriteRequestHeaders: (request: FastifyRequest, headers: HeaderMap) => {
          const call = request.mcpCall;
          // Every reply may be read (the namespace screen, SPEC §20): Accept-Encoding is never forwarded.
          toUpstreamHeaders(headers, upstreamHeaders.values, upstreamHeaders.names, true);
          (headers as HeaderMap & { [kCall]: McpCall })[kCall] = call;
          return headers as Record<string, string>;
        },
        // The priced path writes its own headers once it knows its answer. A free JSON body the gateway
        // changes is sent whole, and fastify sets its length.
        rewriteHeaders: (headers: HeaderMap, request: FastifyRequest) => (request.mcpCall.priced ? {} : toClientHeaders(headers, false)),
        onResponse: (request: FastifyRequest, reply: FastifyReply, head: UpstreamHead) => {
          const call = request.mcpCall;
          const handedOut = deps.sessions && call.principal !== null ? sessionHandedOut(request.headers['mcp-session-id'], head.headers['mcp-session-id']) : undefined;
          if (handedOut !== undefined) {
            bindThenRelay(deps.sessions as SessionBindings, handedOut, call, reply, head).catch((error: unknown) => {
              recorder.internalError(request.id, error);
              reply.raw.destroy();
            });
            return;
          }
          relay(call, reply, head);
        },
        onError: (reply: FastifyReply, { error }: { error: Error }) => {
          const call = reply.request.mcpCall;
          if (call.priced) return call.priced.onError(error);
          const failure = classifyUpstreamError(error);
          recorder.failure(call, reply.request.id, failure);
          if (reply.sent || reply.raw.headersSent || reply.raw.destroyed) return;
          sendRpcError(reply, failure.error, call.requestId);
        },
      } as never,
    });

    function relay(call: McpCall, reply: FastifyReply, head: UpstreamHead): void {
      if (call.priced) return call.priced.onHead(head);
      relayFreeReply(freeDeps, call, reply, head);
    }

    /** SPEC §20: the session a reply hands out is bound to the requester's principal before the reply's headers go out. */
    async function bindThenRelay(sessions: SessionBindings, sessionId: string, call: McpCall, reply: FastifyReply, head: UpstreamHead): Promise<void> {
      const principal = call.principal as string;
      let refusal: GatewayError | null = null;
      try {
        const owner = await sessions.bind(sessionId, principal);
        if (owner !== principal) refusal = new GatewayError('TB_ERR_UPSTREAM_BAD_RESPONSE', 'the upstream handed out a session that belongs to another client');
      } catch (error) {
        refusal = error instanceof GatewayError ? error : new GatewayError('TB_ERR_STORE_UNAVAILABLE', 'the session could not be recorded', { cause: error });
      }
      if (refusal === null) return relay(call, reply, head);
      // Not bound to the requester: nothing of the reply goes out (the client never holds an unbound session).
      discard(head.stream);
      deps.logger.warn({ evt: 'session_bind_failed', reqId: reply.request.id, code: refusal.code }, 'a reply handing out an MCP session was not relayed: the session could not be bound to the principal');
      if (call.priced) return call.priced.onError(new UpstreamAbort('bad_response'));
      reply.removeHeader('mcp-session-id');
      sendRpcError(reply, refusal, call.requestId);
    }

    scope.route({
      method: ['PUT', 'PATCH', 'OPTIONS'],
      url: deps.mcpPath,
      handler: async (request, reply) => {
        request.mcpCall.method = request.method;
        sendRpcError(reply, new GatewayError('TB_ERR_METHOD_NOT_ALLOWED', 'Method not allowed: the MCP endpoint takes POST, GET and DELETE', { headers: { allow: 'GET, POST, DELETE' } }), null);
        return reply;
      },
    });
  });
}

function idFromRaw(raw: unknown): JsonRpcId {
  if (typeof raw !== 'string') return null;
  const parsed = parseJsonOrUndefined(raw);
  return Array.isArray(parsed) ? null : idOf(parsed);
}
