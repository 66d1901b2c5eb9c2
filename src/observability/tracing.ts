// OpenTelemetry traces (SPEC §17), the part every module may import. It loads nothing from
// OpenTelemetry: with tracing off (`tracing.otlpEndpoint` empty, exporter otlp) the SDK is never imported, no span or attribute
// object is built, and every hook below is one null check (bench: "gateway-paid-traced" vs
// "gateway-paid-memory"). On (an endpoint, or `exporter: console`), startTracing() imports tracing-sdk.ts (the SDK, the
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
import type { TracingConfig } from '../config/schema.js';
import type { Logger } from './logger.js';
import type { PaidOutcome } from './metrics.js';
import type { SpanExporter, Tracing } from './trace-types.js';

export type { DescribedBody, DispatchCallback, ForwardedRequest, RequestTrace, SpanExporter, TraceableProvider, Tracing } from './trace-types.js';

type PaidCallRecorder = (tool: string, sku: string, outcome: PaidOutcome, cost: number) => void;

/** Set once any gateway in this process turns tracing on: until then recordPaidCall is one null check. */
let paidCallRecorder: PaidCallRecorder | null = null;

/** Whether a gateway with this config traces: an OTLP endpoint is set, or the console exporter is chosen. */
export function tracingEnabled(config: TracingConfig): boolean {
  return config.exporter === 'console' || config.otlpEndpoint !== '';
}

/**
 * null when tracing is off (nothing is imported); otherwise the gateway's Tracing. `exporter` replaces the
 * configured one and turns tracing on (tests collect spans in memory).
 */
export async function startTracing(config: TracingConfig, logger: Logger, exporter?: SpanExporter): Promise<Tracing | null> {
  if (exporter === undefined && !tracingEnabled(config)) return null;
  const sdk = await import('./tracing-sdk.js');
  paidCallRecorder = sdk.recordPaidCallOnActiveRequest;
  return sdk.createTracing(config, logger, exporter);
}

/** The paywall's one log line of a priced call (SPEC §10) also goes on the active request's span. */
export function recordPaidCall(tool: string, sku: string, outcome: PaidOutcome, cost: number): void {
  if (paidCallRecorder === null) return;
  paidCallRecorder(tool, sku, outcome, cost);
}
