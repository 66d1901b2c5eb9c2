// OpenTelemetry traces (SPEC §17), the part every module may import. It loads nothing from
// OpenTelemetry: with `tracing.otlpEndpoint` empty the SDK is never imported, no span or attribute
// object is built, and every hook below is one null check (bench: "gateway-paid-traced" vs
// "gateway-paid-memory"). With an endpoint, startTracing() imports tracing-sdk.ts (the SDK, the
// OTLP/HTTP exporter, the W3C propagator) and returns the one Tracing of the gateway.
//
// Spans (docs/operations.md, "Tracing", says what each carries):
//   SERVER  one per request on the MCP endpoint, its parent the client's `traceparent`
//     ├ store <op>       each store operation made on the request's behalf
//     ├ provider <op>    openCharge / readCharge
//     └ upstream <verb>  CLIENT: the proxied request, until its reply is read to the end; the
//                        upstream gets a `traceparent` naming this span
// No span or attribute ever holds a handle, token, URL, argument value, checkout URL, link id,
// session id or principal: attributes are set in tracing-sdk.ts only, from the values listed there.
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import type { TracingConfig } from '../config/schema.js';
import type { Logger } from './logger.js';
import type { PaidOutcome } from './metrics.js';

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

type PaidCallRecorder = (tool: string, sku: string, outcome: PaidOutcome, cost: number) => void;

/** Set once any gateway in this process turns tracing on: until then recordPaidCall is one null check. */
let paidCallRecorder: PaidCallRecorder | null = null;

/** null when `tracing.otlpEndpoint` is empty (nothing is imported); otherwise the gateway's Tracing. */
export async function startTracing(config: TracingConfig, logger: Logger): Promise<Tracing | null> {
  if (config.otlpEndpoint === '') return null;
  const sdk = await import('./tracing-sdk.js');
  paidCallRecorder = sdk.recordPaidCallOnActiveRequest;
  return sdk.createTracing(config, logger);
}

/** The paywall's one log line of a priced call (SPEC §10) also goes on the active request's span. */
export function recordPaidCall(tool: string, sku: string, outcome: PaidOutcome, cost: number): void {
  if (paidCallRecorder === null) return;
  paidCallRecorder(tool, sku, outcome, cost);
}
