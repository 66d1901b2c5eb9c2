// Span status on paid calls, collected in process (an InMemorySpanExporter in place of the configured
// exporter): a served paid call has no span with status ERROR — its `upstream POST` child used to end
// with ABORT_ERR, from the call's abort signal firing after the reply was complete — while a real
// upstream failure still marks the upstream span ERROR.
import t, { type Test } from 'tap';
import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { InMemorySpanExporter, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { freePort, startTestGateway, testConfig, type TestGateway } from '../helpers/gateway.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';

type Json = Record<string, any>;

let nextId = 1;
async function call(gateway: TestGateway, name: string, args: Json): Promise<Json> {
  const response = await fetch(gateway.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' },
    body: JSON.stringify({ jsonrpc: '2.0', id: nextId++, method: 'tools/call', params: { name, arguments: args } }),
  });
  const text = await response.text();
  return (response.headers.get('content-type') ?? '').startsWith('text/event-stream') ? JSON.parse(text.split('\n').filter((line) => line.startsWith('data:')).at(-1)?.slice(5) ?? 'null') : JSON.parse(text);
}

/** Challenge, pay on the dev checkout, retry with the handle: the paid call's JSON-RPC reply. */
async function paidCall(gateway: TestGateway, tool = 'fetch_readable'): Promise<Json> {
  const challenge = await call(gateway, tool, { url: 'https://example.com/' });
  const offer = challenge.result._meta['xyz.tollbooth/challenge'];
  const pay = await fetch(`${offer.checkoutUrl as string}/pay`, { method: 'POST', redirect: 'manual' });
  if (pay.status !== 303) throw new Error(`pay answered ${pay.status}`);
  return call(gateway, tool, { url: 'https://example.com/', tollboothToken: offer.retry.value });
}

/** The SDK's in-memory exporter forgets its spans on shutdown; this one keeps them for the assertions after close. */
class CollectingExporter extends InMemorySpanExporter {
  override shutdown(): Promise<void> {
    return Promise.resolve();
  }
}

async function tracedGateway(t: Test, upstreamUrl: string): Promise<{ gateway: TestGateway; exporter: InMemorySpanExporter }> {
  const exporter = new CollectingExporter();
  const gateway = await startTestGateway(t, testConfig(upstreamUrl, { logging: { level: 'silent' } }), { spanExporter: exporter });
  return { gateway, exporter };
}

const describe = (span: ReadableSpan): string => `${span.name} ${JSON.stringify(span.status)} ${String(span.attributes['error.type'] ?? '')}`;

t.test('a served paid call: no span of it has status ERROR', async (t) => {
    const upstream = await startPaidUpstream('stateless-json');
    t.teardown(() => upstream.close());
    const { gateway, exporter } = await tracedGateway(t, upstream.url);
    const paid = await paidCall(gateway);
    t.ok(paid.result?._meta?.['xyz.tollbooth/receipt'], 'the paid call was served with a receipt');
    await gateway.close(); // flushes the span queue
    const spans = exporter.getFinishedSpans();
    const server = spans.find((span) => span.kind === SpanKind.SERVER && span.attributes['tollbooth.outcome'] === 'authorised');
    if (!server) throw new Error(`no authorised SERVER span among: ${spans.map(describe).join('; ')}`);
    const ofCall = spans.filter((span) => span.spanContext().traceId === server.spanContext().traceId);
    const upstreamSpan = ofCall.find((span) => span.name === 'upstream POST');
    t.ok(upstreamSpan, 'the paid call has its upstream span');
    t.equal(upstreamSpan?.attributes['http.response.status_code'], 200);
    t.same(ofCall.filter((span) => span.status.code === SpanStatusCode.ERROR).map(describe), [], 'no span of the served paid call is ERROR');
    t.equal(upstreamSpan?.attributes['error.type'], undefined, 'no error.type on the upstream span');
});

for (const mode of ['sessions-sse', 'sessions-resumable'] as const) {
  t.test(`a paid call through the SDK client (${mode} upstream): no span of it has status ERROR`, async (t) => {
    const upstream = await startPaidUpstream(mode);
    t.teardown(() => upstream.close());
    const { gateway, exporter } = await tracedGateway(t, upstream.url);
    const client = new Client({ name: 'trace-status', version: '1' });
    await client.connect(new StreamableHTTPClientTransport(new URL(gateway.url)));
    const challenge = await client.callTool({ name: 'fetch_readable', arguments: { url: 'https://example.com/' } });
    const offer = (challenge._meta as Json)['xyz.tollbooth/challenge'];
    const pay = await fetch(`${offer.checkoutUrl as string}/pay`, { method: 'POST', redirect: 'manual' });
    t.equal(pay.status, 303);
    const paid = await client.callTool({ name: 'fetch_readable', arguments: { url: 'https://example.com/', tollboothToken: offer.retry.value } });
    t.ok((paid._meta)?.['xyz.tollbooth/receipt'], 'served with a receipt');
    await client.close();
    await gateway.close();
    const spans = exporter.getFinishedSpans();
    const server = spans.find((span) => span.kind === SpanKind.SERVER && span.attributes['tollbooth.outcome'] === 'authorised');
    if (!server) throw new Error(`no authorised SERVER span among: ${spans.map(describe).join('; ')}`);
    const ofCall = spans.filter((span) => span.spanContext().traceId === server.spanContext().traceId);
    t.ok(ofCall.some((span) => span.name === 'upstream POST'), 'the paid call has its upstream span');
    t.same(ofCall.filter((span) => span.status.code === SpanStatusCode.ERROR).map(describe), [], 'no span of the served paid call is ERROR');
  });
}

t.test('a real upstream failure (connection refused) still marks the upstream span ERROR', async (t) => {
  const { gateway, exporter } = await tracedGateway(t, `http://127.0.0.1:${await freePort()}/mcp`);
  const refused = await paidCall(gateway);
  t.equal(refused.result?._meta?.['xyz.tollbooth/refusal']?.reason, 'upstream_unavailable', 'the paid call was refused upstream_unavailable');
  await gateway.close();
  const upstreamSpan = exporter.getFinishedSpans().find((span) => span.name === 'upstream POST');
  if (!upstreamSpan) throw new Error('no upstream span');
  t.equal(upstreamSpan.status.code, SpanStatusCode.ERROR, 'the upstream span is ERROR');
  t.equal(upstreamSpan.attributes['error.type'], 'ECONNREFUSED');
});
