// The shapes of tracing (SPEC §17) that tracing.ts (what the request path calls) and tracing-sdk.ts
// (the OpenTelemetry side, imported only when tracing is on) share, so neither imports the other's types.
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import type { SpanExporter } from '@opentelemetry/sdk-trace-base';

/** Where finished spans go instead of the configured exporter (tests: an in-memory collector). A type only: importing it loads nothing. */
export type { SpanExporter };

/** What the classified body says about a POST (mcp/classify.ts's ClassifiedBody has these). */
export interface DescribedBody {
  readonly method: string;
  readonly era: string;
  readonly batch: boolean;
  readonly toolCalls: readonly { readonly name: string }[];
}

/** What the proxy hands undici (proxy/dispatcher.ts): the headers object is the one sent upstream. */
export interface ForwardedRequest {
  method?: string;
  origin?: string | URL;
  headers?: Record<string | symbol, unknown>;
}

export type DispatchCallback<D> = (error: Error | null, data: D) => void;

/** The trace of one request on the MCP endpoint (McpCall.trace; null when tracing is off). */
export interface RequestTrace {
  /** Runs `fn` with the request's span as the active context: store and provider calls made from it become its children. */
  within<T>(fn: () => T): T;
  /** The body is classified: MCP method, era, the tool of a single tools/call. */
  describe(body: DescribedBody): void;
  /** The proxy sends the request upstream: a CLIENT span, `traceparent`/`tracestate` for the upstream, and the callback that ends the span once the reply is read. */
  forward<D extends { statusCode: number; body: NodeJS.ReadableStream }>(request: ForwardedRequest, callback: DispatchCallback<D>): DispatchCallback<D>;
  /** The request's span stays open until `work` settles too (a paid call read to its end after its client left). */
  until(work: Promise<unknown>): void;
}

/** What traceProvider wraps: payments/provider.ts's PaymentProvider, as observability sees it (it sits below payments). */
export interface TraceableProvider {
  readonly name: string;
  openCharge(...args: never[]): Promise<unknown>;
  readCharge(...args: never[]): Promise<unknown>;
  close?(): Promise<void>;
}

export interface Tracing {
  /** The SERVER span of a request on `route`; it ends when `response` closes (and what `until` was given has settled). */
  startRequest(httpMethod: string, route: string, headers: IncomingHttpHeaders, response: ServerResponse): RequestTrace;
  /** The store with a child span around each operation made on a request's behalf (none elsewhere: reconciler, admin). */
  traceStore<S extends object>(store: S): S;
  /** The provider with a CLIENT span around openCharge and readCharge made on a request's behalf. */
  traceProvider<P extends TraceableProvider>(provider: P): P;
  /** Exports what is queued and stops; bounded, never throws (the collector may be down). */
  shutdown(): Promise<void>;
}
