// `tracing.exporter: console`: each finished span as one JSON line on stderr, so an operator can see
// spans without an OTLP collector (`tollbooth start 2>spans.jsonl`, or `jq` on the terminal). stderr keeps
// spans apart from the JSON log lines on stdout. The SDK's own ConsoleSpanExporter prints util.inspect
// output over several lines; this one writes what a line-oriented tool can read. Imported by
// tracing-sdk.ts only. The attributes are the ones tracing-sdk.ts sets, never a secret.
import type { Writable } from 'node:stream';
import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { ExportResultCode, hrTimeToMilliseconds, type ExportResult } from '@opentelemetry/core';
import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace-base';

/** One span as it is written: ids in hex, times as ISO 8601 and milliseconds, kind and status by name. */
export interface JsonSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string | null;
  name: string;
  kind: string;
  start: string;
  durationMs: number;
  status: { code: 'UNSET' | 'OK' | 'ERROR'; message?: string };
  attributes: Record<string, unknown>;
  events: { name: string; at: string; attributes: Record<string, unknown> }[];
  service: unknown;
}

const STATUS: Record<SpanStatusCode, JsonSpan['status']['code']> = { [SpanStatusCode.UNSET]: 'UNSET', [SpanStatusCode.OK]: 'OK', [SpanStatusCode.ERROR]: 'ERROR' };

export function toJsonSpan(span: ReadableSpan): JsonSpan {
  const context = span.spanContext();
  return {
    traceId: context.traceId,
    spanId: context.spanId,
    parentSpanId: span.parentSpanContext?.spanId ?? null,
    name: span.name,
    kind: SpanKind[span.kind],
    start: new Date(hrTimeToMilliseconds(span.startTime)).toISOString(),
    durationMs: Math.round(hrTimeToMilliseconds(span.duration) * 1000) / 1000,
    status: span.status.message ? { code: STATUS[span.status.code], message: span.status.message } : { code: STATUS[span.status.code] },
    attributes: { ...span.attributes },
    events: span.events.map((event) => ({ name: event.name, at: new Date(hrTimeToMilliseconds(event.time)).toISOString(), attributes: { ...event.attributes } })),
    service: span.resource.attributes['service.name'],
  };
}

export class JsonLinesSpanExporter implements SpanExporter {
  readonly #out: Writable;

  constructor(out: Writable = process.stderr) {
    this.#out = out;
  }

  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    // One write per batch: lines of concurrent batches never interleave.
    this.#out.write(spans.map((span) => `${JSON.stringify(toJsonSpan(span))}\n`).join(''));
    done({ code: ExportResultCode.SUCCESS });
  }

  async shutdown(): Promise<void> {}

  async forceFlush(): Promise<void> {}
}
