// The OpenTelemetry side of tracing.ts, imported only when tracing is on (SPEC §17).
// The official pieces: a BasicTracerProvider with ParentBased(TraceIdRatioBased(sampleRatio)), a
// BatchSpanProcessor (bounded queue; export never on the request path) in front of the OTLP/HTTP
// exporter, the W3C trace-context propagator, and the async-hooks context manager so that store and
// provider calls made while handling a request find its span.
//
// Every attribute is set here, from this list only: mcp.method, mcp.era, mcp.tool, tollbooth.outcome,
// tollbooth.sku, tollbooth.cost, tollbooth.paid_calls, tollbooth.store.op, tollbooth.provider(.op),
// http.request.method, http.route, http.response.status_code, server.address, server.port, error.type
// (a code, never a message). Never a handle, token, URL path or query, argument, checkout URL, link
// id, session id or principal; exceptions are not recorded (their messages may hold any of those).
import { createRequire } from 'node:module';
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import { context, defaultTextMapGetter, defaultTextMapSetter, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, createContextKey, type Context, type Span, type Tracer } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { setGlobalErrorHandler, W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { defaultResource, resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor, ParentBasedSampler, TraceIdRatioBasedSampler, type SpanExporter } from '@opentelemetry/sdk-trace-base';
import {
  ATTR_ERROR_TYPE,
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_HTTP_ROUTE,
  ATTR_SERVER_ADDRESS,
  ATTR_SERVER_PORT,
  ATTR_SERVICE_NAME,
  ATTR_SERVICE_VERSION,
} from '@opentelemetry/semantic-conventions';
import { systemClock } from '../clock.js';
import type { TracingConfig } from '../config/schema.js';
import { JsonLinesSpanExporter } from './console-exporter.js';
import type { Logger } from './logger.js';
import type { PaidOutcome } from './metrics.js';
import type { DescribedBody, DispatchCallback, ForwardedRequest, RequestTrace, TraceableProvider, Tracing } from './trace-types.js';

/** Spans waiting for export; beyond this they are dropped (counted by the SDK), never held against a request. */
const MAX_QUEUED_SPANS = 4096;
const MAX_EXPORT_BATCH = 512;
const EXPORT_DELAY_MS = 1_000;
/** One export attempt (with the exporter's retries inside it) gives up after this. */
const EXPORT_TIMEOUT_MS = 5_000;
/** Shutdown waits this long for the last export, then lets the gateway exit anyway. */
const SHUTDOWN_WAIT_MS = 2_000;
/** Tool names come from clients: long ones are cut here (and any attribute value by the SDK's limit). */
const MAX_ATTRIBUTE_LENGTH = 256;
/** An unreachable collector is logged at most this often. */
const EXPORT_FAILURE_LOG_INTERVAL_MS = 60_000;

/** Where the request's trace sits in the active context (store/provider wrappers and recordPaidCall read it). */
const REQUEST_TRACE = createContextKey('tollbooth.request-trace');

let contextManagerInstalled = false;

/** `given` (tests) replaces the exporter `tracing.exporter` names: OTLP/HTTP to otlpEndpoint, or JSON lines on stderr. */
export function createTracing(config: TracingConfig, logger: Logger, given?: SpanExporter): Tracing {
  installContextManager();
  reportExportFailures(logger);
  const exporter = given ?? (config.exporter === 'console' ? new JsonLinesSpanExporter() : new OTLPTraceExporter({ url: tracesUrl(config.otlpEndpoint), timeoutMillis: EXPORT_TIMEOUT_MS }));
  const provider = new BasicTracerProvider({
    resource: defaultResource().merge(resourceFromAttributes({ [ATTR_SERVICE_NAME]: config.serviceName, [ATTR_SERVICE_VERSION]: packageVersion() })),
    sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(config.sampleRatio) }),
    spanLimits: { attributeValueLengthLimit: MAX_ATTRIBUTE_LENGTH },
    spanProcessors: [
      new BatchSpanProcessor(exporter, { maxQueueSize: MAX_QUEUED_SPANS, maxExportBatchSize: MAX_EXPORT_BATCH, scheduledDelayMillis: EXPORT_DELAY_MS, exportTimeoutMillis: EXPORT_TIMEOUT_MS }),
    ],
  });
  // Not registered globally: each gateway in a process has its own provider (tests run several).
  return new SdkTracing(provider.getTracer('tollbooth'), provider);
}

/** `{base}/v1/traces`, as OTEL_EXPORTER_OTLP_ENDPOINT is read: the base's path kept, its query and userinfo too. */
export function tracesUrl(base: string): string {
  const url = new URL(base);
  url.pathname = `${url.pathname.replace(/\/+$/, '')}/v1/traces`;
  return url.href;
}

/** The paywall's log line of a priced call, on the span of the request it was made for (if any). */
export function recordPaidCallOnActiveRequest(tool: string, sku: string, outcome: PaidOutcome, cost: number): void {
  (context.active().getValue(REQUEST_TRACE) as ServerRequestTrace | undefined)?.paidCall(tool, sku, outcome, cost);
}

class SdkTracing implements Tracing {
  readonly #tracer: Tracer;
  readonly #provider: BasicTracerProvider;
  readonly #propagator = new W3CTraceContextPropagator();
  /** server.address/server.port of each upstream origin, parsed once. */
  readonly #origins = new Map<string, Record<string, string | number>>();

  constructor(tracer: Tracer, provider: BasicTracerProvider) {
    this.#tracer = tracer;
    this.#provider = provider;
  }

  startRequest(httpMethod: string, route: string, headers: IncomingHttpHeaders, response: ServerResponse): RequestTrace {
    const parent = this.#propagator.extract(ROOT_CONTEXT, headers, defaultTextMapGetter);
    const span = this.#tracer.startSpan(`${httpMethod} ${route}`, { kind: SpanKind.SERVER, attributes: { [ATTR_HTTP_REQUEST_METHOD]: httpMethod, [ATTR_HTTP_ROUTE]: route } }, parent);
    // Not sampled: nothing of this request is recorded, so it enters no context and builds no child span (bench/RESULTS.md: the
    // full path cost an unsampled paid call 66 µs); only its trace goes on to the upstream.
    if (!span.isRecording()) return new UnsampledRequestTrace(this, trace.setSpan(parent, span));
    return new ServerRequestTrace(this, span, parent, response);
  }

  /** A CLIENT span for the proxied request, a child of the request's span, and its context for the upstream's headers. */
  upstreamSpan(parent: Context, request: ForwardedRequest): Span {
    const method = request.method ?? 'GET';
    return this.#tracer.startSpan(`upstream ${method}`, { kind: SpanKind.CLIENT, attributes: { [ATTR_HTTP_REQUEST_METHOD]: method, ...this.#originAttributes(request.origin) } }, parent);
  }

  inject(spanContext: Context, headers: Record<string | symbol, unknown>): void {
    // The client's own trace headers were copied with the others: the upstream's parent is the gateway's span.
    delete headers.traceparent;
    delete headers.tracestate;
    this.#propagator.inject(spanContext, headers, defaultTextMapSetter);
  }

  childSpan(parent: Context, name: string, kind: SpanKind, attributes: Record<string, string>): Span {
    return this.#tracer.startSpan(name, { kind, attributes }, parent);
  }

  traceStore<S extends object>(store: S): S {
    const traced = Object.create(store) as Record<string, unknown>;
    for (const op of methodNames(store)) {
      const method = (store as unknown as Record<string, (...args: unknown[]) => unknown>)[op] as (...args: unknown[]) => unknown;
      const attributes = { 'tollbooth.store.op': op };
      traced[op] = (...args: unknown[]): unknown => {
        const request = context.active().getValue(REQUEST_TRACE) as ServerRequestTrace | undefined;
        if (request === undefined) return method.apply(store, args);
        return request.around(`store ${op}`, SpanKind.INTERNAL, attributes, () => method.apply(store, args));
      };
    }
    return traced as unknown as S;
  }

  traceProvider<P extends TraceableProvider>(provider: P): P {
    const around = <A extends unknown[], R>(op: string, method: (...args: A) => Promise<R>) => {
      const attributes = { 'tollbooth.provider': provider.name, 'tollbooth.provider.op': op };
      return (...args: A): Promise<R> => {
        const request = context.active().getValue(REQUEST_TRACE) as ServerRequestTrace | undefined;
        if (request === undefined) return method(...args);
        return request.around(`provider ${op}`, SpanKind.CLIENT, attributes, () => method(...args)) as Promise<R>;
      };
    };
    return {
      name: provider.name,
      openCharge: around('openCharge', (...args: never[]) => provider.openCharge(...args)),
      readCharge: around('readCharge', (...args: never[]) => provider.readCharge(...args)),
      ...(provider.close ? { close: () => (provider.close as () => Promise<void>).call(provider) } : {}),
    } as unknown as P; // the provider's interface is exactly these members
  }

  async shutdown(): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const waited = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, SHUTDOWN_WAIT_MS);
      timer.unref();
    });
    await Promise.race([this.#provider.shutdown().catch(() => undefined), waited]);
    clearTimeout(timer);
  }

  #originAttributes(origin: string | URL | undefined): Record<string, string | number> {
    const key = origin === undefined ? '' : String(origin);
    let attributes = this.#origins.get(key);
    if (attributes === undefined) {
      attributes = {};
      try {
        // Host and port only: an upstream URL's userinfo, path and query may carry credentials.
        const url = new URL(key);
        attributes = { [ATTR_SERVER_ADDRESS]: url.hostname, [ATTR_SERVER_PORT]: Number(url.port || (url.protocol === 'https:' ? 443 : 80)) };
      } catch {
        // not a URL (a socket path): no address attributes
      }
      this.#origins.set(key, attributes);
    }
    return attributes;
  }
}

/** The SERVER span of one request on the MCP endpoint, and what its children need. */
class ServerRequestTrace implements RequestTrace {
  readonly #owner: SdkTracing;
  readonly #span: Span;
  readonly #context: Context;
  #pending = 1; // the response; plus each `until`
  /** A single tools/call: its paid call's facts become the span's attributes (else events). */
  #singleToolCall = false;
  #paidCalls = 0;
  #cost = 0;

  constructor(owner: SdkTracing, span: Span, parent: Context, response: ServerResponse) {
    this.#owner = owner;
    this.#span = span;
    this.#context = trace.setSpan(parent, span).setValue(REQUEST_TRACE, this);
    response.once('close', () => {
      // As the request metrics count it: 499 when the client left before the response was sent.
      const status = response.writableFinished || response.headersSent ? response.statusCode : 499;
      span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, status);
      if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
      this.#settle();
    });
  }

  within<T>(fn: () => T): T {
    return context.with(this.#context, fn);
  }

  describe(body: DescribedBody): void {
    const span = this.#span;
    span.setAttribute('mcp.method', body.method);
    span.setAttribute('mcp.era', body.era);
    const tool = !body.batch && body.toolCalls.length === 1 ? (body.toolCalls[0] as { name: string }).name.slice(0, MAX_ATTRIBUTE_LENGTH) : null;
    if (tool !== null) {
      this.#singleToolCall = true;
      span.setAttribute('mcp.tool', tool);
    }
    // The MCP semantic conventions' span name: "{method} {target}".
    span.updateName(tool === null ? body.method : `${body.method} ${tool}`);
  }

  paidCall(tool: string, sku: string, outcome: PaidOutcome, cost: number): void {
    this.#paidCalls += 1;
    this.#cost += cost;
    if (this.#singleToolCall && this.#paidCalls === 1) {
      this.#span.setAttributes({ 'tollbooth.outcome': outcome, 'tollbooth.sku': sku, 'tollbooth.cost': cost });
      return;
    }
    // A batch (or a resumed call concluded on another request's stream): one event per paid call.
    this.#span.addEvent('tollbooth.paid_call', { 'mcp.tool': tool.slice(0, MAX_ATTRIBUTE_LENGTH), 'tollbooth.outcome': outcome, 'tollbooth.sku': sku, 'tollbooth.cost': cost });
    this.#span.setAttributes({ 'tollbooth.cost': this.#cost, 'tollbooth.paid_calls': this.#paidCalls });
  }

  forward<D extends { statusCode: number; body: NodeJS.ReadableStream }>(request: ForwardedRequest, callback: DispatchCallback<D>): DispatchCallback<D> {
    const span = this.#owner.upstreamSpan(this.#context, request);
    if (request.headers) this.#owner.inject(trace.setSpan(this.#context, span), request.headers);
    return (error, data) => {
      if (error) {
        failed(span, error);
        span.end();
      } else {
        span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, data.statusCode);
        if (data.statusCode >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
        // The upstream's part ends when its reply has been read to the end (relayed, or read for the conclusion) or cut.
        data.body.once('error', (bodyError: unknown) => {
          if (!stoppedByReader(bodyError)) failed(span, bodyError);
        });
        data.body.once('close', () => span.end());
      }
      callback(error, data);
    };
  }

  until(work: Promise<unknown>): void {
    this.#pending += 1;
    const settle = (): void => this.#settle();
    work.then(settle, settle);
  }

  /** A child span around one store or provider operation. */
  around(name: string, kind: SpanKind, attributes: Record<string, string>, operation: () => unknown): unknown {
    const span = this.#owner.childSpan(this.#context, name, kind, attributes);
    let result: unknown;
    try {
      result = operation();
    } catch (error) {
      failed(span, error);
      span.end();
      throw error;
    }
    if (!(result instanceof Promise)) {
      span.end();
      return result;
    }
    return result.then(
      (value: unknown) => {
        span.end();
        return value;
      },
      (error: unknown) => {
        failed(span, error);
        span.end();
        throw error;
      },
    );
  }

  #settle(): void {
    this.#pending -= 1;
    if (this.#pending === 0) this.#span.end();
  }
}

/**
 * A request the sampler (or the client's `traceparent`) left unsampled. Its store and provider calls run outside any
 * context, so the wrappers see no request and call straight through; the upstream still gets a `traceparent` in the
 * same trace, flagged unsampled, with the gateway's (unrecorded) span as parent.
 */
class UnsampledRequestTrace implements RequestTrace {
  readonly #owner: SdkTracing;
  readonly #context: Context;

  constructor(owner: SdkTracing, spanContext: Context) {
    this.#owner = owner;
    this.#context = spanContext;
  }

  within<T>(fn: () => T): T {
    return fn();
  }

  describe(): void {
    // nothing is recorded
  }

  forward<D extends { statusCode: number; body: NodeJS.ReadableStream }>(request: ForwardedRequest, callback: DispatchCallback<D>): DispatchCallback<D> {
    if (request.headers) this.#owner.inject(this.#context, request.headers);
    return callback;
  }

  until(): void {
    // no span waits for the work
  }
}

/**
 * The gateway's own reader stopped reading the body: a priced call's event stream once its result was read
 * (proxy/priced-call.ts returns from a `for await` over the body, and Node destroys a stream left that way
 * with its AbortError, code ABORT_ERR). The upstream did its part; a served paid call must not show ERROR.
 * undici's failures (UND_ERR_*, socket errors) and the gateway's aborts through the call's signal
 * (UpstreamAbort: deadline, client gone, bad response) are other errors and stay ERROR.
 */
function stoppedByReader(error: unknown): boolean {
  const candidate = error as { name?: unknown; code?: unknown } | null;
  return candidate?.name === 'AbortError' && candidate.code === 'ABORT_ERR';
}

/** ERROR status and `error.type` from the error's stable code (or kind, or class name); never its message. */
function failed(span: Span, error: unknown): void {
  const candidate = error as { code?: unknown; kind?: unknown; name?: unknown } | null;
  const type = typeof candidate?.kind === 'string' ? candidate.kind : typeof candidate?.code === 'string' ? candidate.code : typeof candidate?.name === 'string' ? candidate.name : 'unknown';
  span.setAttribute(ATTR_ERROR_TYPE, type);
  span.setStatus({ code: SpanStatusCode.ERROR });
}

/** Every method of a store instance (its class chain), so a store method added later is traced too. */
function methodNames(instance: object): string[] {
  const names = new Set<string>();
  for (let proto = Object.getPrototypeOf(instance) as object | null; proto && proto !== Object.prototype; proto = Object.getPrototypeOf(proto) as object | null) {
    for (const name of Object.getOwnPropertyNames(proto)) {
      const descriptor = Object.getOwnPropertyDescriptor(proto, name);
      if (name !== 'constructor' && typeof descriptor?.value === 'function') names.add(name);
    }
  }
  return [...names];
}

/** One context manager for the process (the API keeps one global); every gateway's spans use it. */
function installContextManager(): void {
  if (contextManagerInstalled) return;
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  contextManagerInstalled = true;
}

/**
 * The SDK reports a failed export through the global error handler (by default: nowhere). A collector
 * that is down is logged at most once a minute, with the error's code only (its message may name the
 * collector's URL, credentials included); requests never wait for it.
 */
function reportExportFailures(logger: Logger): void {
  // Process-wide (the SDK has one global error handler), so it reads the process's monotonic clock, not a gateway's.
  let lastLoggedAt = Number.NEGATIVE_INFINITY;
  setGlobalErrorHandler((error) => {
    const now = systemClock.monotonic();
    if (now - lastLoggedAt < EXPORT_FAILURE_LOG_INTERVAL_MS) return;
    lastLoggedAt = now;
    const code = (error as { code?: unknown } | null)?.code;
    logger.warn({ evt: 'tracing_export_failed', code: typeof code === 'string' || typeof code === 'number' ? String(code) : 'unknown' }, 'spans could not be sent to the OTLP collector (tracing.otlpEndpoint); requests are not affected, spans beyond the queue are dropped');
  });
}

function packageVersion(): string {
  try {
    return (createRequire(import.meta.url)('../../package.json') as { version: string }).version;
  } catch {
    return 'unknown';
  }
}
