// A real OTLP/HTTP trace receiver for tests: an HTTP server on a free loopback port that takes what
// @opentelemetry/exporter-trace-otlp-http posts to {base}/v1/traces. That exporter sends JSON
// (Content-Type: application/json, the OTLP/JSON mapping: ids as hex strings, int64 as numbers or
// strings); the protobuf exporter is a different package, so a protobuf body is refused with 415 and
// counted, never guessed at. Each span comes back flattened with its resource's attributes.
//
// Modes: `ok` answers 200 {}; `hang` accepts the request and never answers (a wedged collector);
// `unavailable` answers 503 (the exporter retries).
import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

/** OTLP/JSON AnyValue (opentelemetry-proto common.proto). */
interface AnyValue {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: number | string;
  doubleValue?: number;
  arrayValue?: { values?: AnyValue[] };
  kvlistValue?: { values?: KeyValue[] };
  bytesValue?: string;
}
interface KeyValue {
  key: string;
  value?: AnyValue;
}
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  traceState?: string;
  name: string;
  kind?: number;
  startTimeUnixNano?: string | number;
  endTimeUnixNano?: string | number;
  attributes?: KeyValue[];
  events?: { name: string; attributes?: KeyValue[] }[];
  status?: { code?: number; message?: string };
}
/** ExportTraceServiceRequest in OTLP/JSON. */
interface ExportTraceServiceRequest {
  resourceSpans?: { resource?: { attributes?: KeyValue[] }; scopeSpans?: { scope?: { name?: string }; spans?: OtlpSpan[] }[] }[];
}

/** OTLP SpanKind numbers (1 + the API's SpanKind). */
export const SPAN_KIND = { INTERNAL: 1, SERVER: 2, CLIENT: 3 } as const;
export const STATUS_ERROR = 2;

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  attributes: Record<string, unknown>;
  events: { name: string; attributes: Record<string, unknown> }[];
  statusCode: number;
  resource: Record<string, unknown>;
  scope: string;
}

export interface OtlpReceiver {
  /** The base URL to configure as tracing.otlpEndpoint (spans are posted to {base}/v1/traces). */
  url: string;
  mode: 'ok' | 'hang' | 'unavailable';
  spans: ReceivedSpan[];
  /** Every request received: path, headers, content type, the raw body text (for secret scans). */
  requests: { path: string; headers: IncomingHttpHeaders; body: string }[];
  /** Waits until `predicate(spans)` holds; throws after `timeoutMs`. */
  waitFor(predicate: (spans: ReceivedSpan[]) => boolean, timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

export async function startOtlpReceiver(mode: OtlpReceiver['mode'] = 'ok'): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const requests: OtlpReceiver['requests'] = [];
  const sockets = new Set<Socket>();
  const hanging = new Set<ServerResponse>();
  const receiver: OtlpReceiver = {
    url: '',
    mode,
    spans,
    requests,
    async waitFor(predicate, timeoutMs = 15_000) {
      const deadline = Date.now() + timeoutMs;
      while (!predicate(spans)) {
        if (Date.now() > deadline) throw new Error(`the OTLP receiver did not get the expected spans within ${timeoutMs} ms (got ${spans.length}: ${spans.map((s) => s.name).join(', ')})`);
        await sleep(50);
      }
    },
    async close() {
      for (const res of hanging) res.destroy();
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      requests.push({ path: req.url ?? '', headers: req.headers, body });
      if (receiver.mode === 'hang') {
        hanging.add(res);
        return;
      }
      if (receiver.mode === 'unavailable') return void res.writeHead(503).end();
      if (req.method !== 'POST' || req.url !== '/v1/traces') return void res.writeHead(404).end();
      if (!(req.headers['content-type'] ?? '').startsWith('application/json')) return void res.writeHead(415).end();
      spans.push(...flatten(JSON.parse(body) as ExportTraceServiceRequest));
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  receiver.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return receiver;
}

function flatten(request: ExportTraceServiceRequest): ReceivedSpan[] {
  const out: ReceivedSpan[] = [];
  for (const resourceSpans of request.resourceSpans ?? []) {
    const resource = attributesOf(resourceSpans.resource?.attributes);
    for (const scopeSpans of resourceSpans.scopeSpans ?? []) {
      for (const span of scopeSpans.spans ?? []) {
        out.push({
          traceId: span.traceId,
          spanId: span.spanId,
          parentSpanId: span.parentSpanId ?? '',
          name: span.name,
          kind: span.kind ?? 0,
          attributes: attributesOf(span.attributes),
          events: (span.events ?? []).map((event) => ({ name: event.name, attributes: attributesOf(event.attributes) })),
          statusCode: span.status?.code ?? 0,
          resource,
          scope: scopeSpans.scope?.name ?? '',
        });
      }
    }
  }
  return out;
}

function attributesOf(list: KeyValue[] | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const { key, value } of list ?? []) out[key] = valueOf(value);
  return out;
}

function valueOf(value: AnyValue | undefined): unknown {
  if (value === undefined) return undefined;
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.boolValue !== undefined) return value.boolValue;
  if (value.intValue !== undefined) return Number(value.intValue);
  if (value.doubleValue !== undefined) return value.doubleValue;
  if (value.arrayValue !== undefined) return (value.arrayValue.values ?? []).map(valueOf);
  if (value.kvlistValue !== undefined) return attributesOf(value.kvlistValue.values);
  return value.bytesValue;
}
