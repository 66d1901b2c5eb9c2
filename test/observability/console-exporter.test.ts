// tracing.exporter: console — one JSON span per line on stderr, for seeing spans without a collector.
// In process: the exporter's lines for real SDK spans. As an operator runs it: `tollbooth start` with
// `exporter: console`, a real MCP request, and the span lines on the process's stderr.
import { spawn } from 'node:child_process';
import { PassThrough } from 'node:stream';
import t from 'tap';
import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { BasicTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { JsonLinesSpanExporter, type JsonSpan } from '../../src/observability/console-exporter.js';
import { assertBuilt, childEnv, CLI, ROOT, writeConfig } from '../helpers/gateway-process.js';
import { freePort, testConfig } from '../helpers/gateway.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';
import { waitFor } from '../helpers/clock.js';

t.test('each finished span is one JSON line: ids, parent, name, kind, times, status, attributes, events', async (t) => {
  const out = new PassThrough();
  let text = '';
  out.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(new JsonLinesSpanExporter(out))] });
  const tracer = provider.getTracer('test');
  const parent = tracer.startSpan('tools/call fetch_readable', { kind: SpanKind.SERVER, attributes: { 'mcp.method': 'tools/call' } });
  parent.addEvent('tollbooth.paid_call', { 'tollbooth.cost': 1 });
  const { trace, context } = await import('@opentelemetry/api');
  const child = tracer.startSpan('upstream POST', { kind: SpanKind.CLIENT }, trace.setSpan(context.active(), parent));
  child.setStatus({ code: SpanStatusCode.ERROR });
  child.end();
  parent.end();
  await provider.shutdown();

  const lines = text.split('\n').filter(Boolean);
  t.equal(lines.length, 2, 'one line per span');
  const [upstream, server] = lines.map((line) => JSON.parse(line) as JsonSpan);
  t.match(server, { name: 'tools/call fetch_readable', kind: 'SERVER', parentSpanId: null, status: { code: 'UNSET' }, attributes: { 'mcp.method': 'tools/call' } });
  t.match(server?.events, [{ name: 'tollbooth.paid_call', attributes: { 'tollbooth.cost': 1 } }]);
  t.match(upstream, { name: 'upstream POST', kind: 'CLIENT', parentSpanId: server?.spanId, traceId: server?.traceId, status: { code: 'ERROR' } });
  t.match(server?.traceId, /^[0-9a-f]{32}$/);
  t.ok(!Number.isNaN(Date.parse(server?.start ?? '')), 'start is an ISO 8601 time');
  t.equal(typeof server?.durationMs, 'number');
});

t.test('`tollbooth start` with tracing.exporter console writes the request spans to stderr, logs stay on stdout', async (t) => {
  assertBuilt();
  const upstream = await startPaidUpstream();
  t.teardown(() => upstream.close());
  const port = await freePort();
  const configPath = writeConfig(t, { ...testConfig(upstream.url), server: { host: '127.0.0.1', port }, tracing: { exporter: 'console', serviceName: 'console-test' }, logging: { level: 'warn' } });
  const child = spawn(process.execPath, [CLI, 'start', '--config', configPath], { cwd: ROOT, env: childEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
  t.teardown(() => child.kill('SIGKILL'));
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString('utf8')));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  await waitFor(() => fetch(`http://127.0.0.1:${port}/healthz`).then((r) => r.ok, () => false), 'the gateway to answer /healthz', { timeoutMs: 30_000, everyMs: 50 });

  const response = await fetch(`http://127.0.0.1:${port}/mcp`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} }),
  });
  t.equal(response.status, 200);
  await response.arrayBuffer();
  child.kill('SIGTERM'); // shutdown exports what is queued
  t.equal(await exited, 0);

  const spans = stderr.split('\n').filter((line) => line.startsWith('{')).map((line) => JSON.parse(line) as JsonSpan);
  const server = spans.find((span) => span.kind === 'SERVER');
  t.match(server, { name: 'tools/list', service: 'console-test', attributes: { 'mcp.method': 'tools/list', 'http.response.status_code': 200 } }, 'the request span, on stderr');
  t.ok(spans.some((span) => span.name === 'upstream POST' && span.parentSpanId === server?.spanId), 'its upstream child');
  t.notOk(stdout.includes('"traceId"'), 'no span on stdout (the log lines)');
});
