// The one place the MCP endpoint records request metrics and upstream failures (SPEC §10, §16):
// tollbooth_mcp_requests_total / _request_duration_seconds when a response closes (finished or cut),
// tollbooth_upstream_duration_seconds{method,outcome} when the upstream's part is known, and a log line
// for every upstream failure. Label children are cached: the free path builds no label objects.
import type { Counter } from 'prom-client';
import type { BucketHistogramChild } from '../observability/bucket-histogram.js';
import type { Logger } from '../observability/logger.js';
import { methodLabel, statusClass, type Metrics } from '../observability/metrics.js';
import type { McpCall } from './call-state.js';
import type { UpstreamFailure, UpstreamOutcome } from './upstream-failure.js';

const OBSERVE = { observe: true };

type CounterChild = ReturnType<Counter<'method' | 'era' | 'status'>['labels']>;

export class ProxyRecorder {
  readonly #metrics: Metrics;
  readonly #logger: Logger;
  readonly #now: () => number;
  readonly #requests = new Map<string, Map<string, Map<string, CounterChild>>>();
  readonly #durations = new Map<string, BucketHistogramChild>();
  readonly #upstream = new Map<string, Map<string, BucketHistogramChild>>();

  /** The endpoint (SPEC §18): `default` or its `servers` key. */
  readonly #server: string;

  constructor(deps: { metrics: Metrics; logger: Logger; now: () => number; server?: string }) {
    this.#server = deps.server ?? 'default';
    this.#metrics = deps.metrics;
    this.#logger = deps.logger;
    this.#now = deps.now;
  }

  /** A response on the MCP endpoint closed; `status` 499 (a 4xx) when the client left before it was sent. Labelled by class (SPEC §20). */
  request(call: McpCall, code: number): void {
    const method = methodLabel(call.method);
    const status = statusClass(code);
    let byEra = this.#requests.get(method);
    if (!byEra) this.#requests.set(method, (byEra = new Map<string, Map<string, CounterChild>>()));
    let byStatus = byEra.get(call.era);
    if (!byStatus) byEra.set(call.era, (byStatus = new Map<string, CounterChild>()));
    let counter = byStatus.get(status);
    if (!counter) byStatus.set(status, (counter = this.#metrics.mcpRequests.labels(this.#server, method, call.era, status)));
    counter.inc();
    let duration = this.#durations.get(method);
    if (!duration) this.#durations.set(method, (duration = this.#metrics.mcpRequestDuration.labels(this.#server, method)));
    duration.observe((this.#now() - call.startedAt) / 1000);
  }

  /** The upstream's part of a call: how long from forwarding, and how it went. */
  upstream(call: McpCall, outcome: UpstreamOutcome): void {
    const method = methodLabel(call.method);
    let byOutcome = this.#upstream.get(method);
    if (!byOutcome) this.#upstream.set(method, (byOutcome = new Map<string, BucketHistogramChild>()));
    let histogram = byOutcome.get(outcome);
    if (!histogram) byOutcome.set(outcome, (histogram = this.#metrics.upstreamDuration.labels(this.#server, method, outcome)));
    histogram.observe((this.#now() - (call.forwardedAt || call.startedAt)) / 1000);
  }

  /** A bug on the request path: logged with the error's name and code only (never its message: it may hold a value). */
  internalError(reqId: string, error: unknown): void {
    this.#logger.error({ evt: 'internal_error', reqId, code: (error as { code?: unknown } | null)?.code ?? (error as Error | null)?.name ?? 'unknown' }, 'request failed');
  }

  /**
   * An upstream failure: counted under its outcome and logged (the cause's code, never its text: it may
   * hold a URL). `observe: false` for a failure after the upstream's answer was already counted.
   */
  failure(call: McpCall, reqId: string, failure: UpstreamFailure, options: { observe: boolean } = OBSERVE): void {
    if (options.observe) this.upstream(call, failure.outcome);
    if (failure.outcome === 'client_gone') return;
    const cause = failure.error.cause as { code?: unknown } | undefined;
    this.#logger.warn(
      { evt: 'upstream_failed', reqId, server: this.#server, method: methodLabel(call.method), outcome: failure.outcome, code: failure.error.code, cause: typeof cause?.code === 'string' ? cause.code : undefined },
      failure.error.message,
    );
  }
}
