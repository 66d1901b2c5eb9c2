// OpenTelemetry traces (SPEC §17) end to end: a real gateway with tracing.otlpEndpoint set, a real
// OTLP/HTTP receiver (test/helpers/otlp-receiver.ts) decoding what the official exporter posts, a
// real MCP upstream recording the headers it got. Spans are flushed by closing the gateway (the
// shutdown path exports what is queued).
import t, { type Test } from 'tap';
import { waitFor } from '../helpers/clock.js';
import { startTestGateway, testConfig, type TestGateway } from '../helpers/gateway.js';
import { startOtlpReceiver, SPAN_KIND, type OtlpReceiver, type ReceivedSpan } from '../helpers/otlp-receiver.js';
import { startPaidUpstream, type PaidUpstream } from '../helpers/paid-upstream.js';
import { startRedis } from '../helpers/redis-server.js';

type Json = Record<string, any>;

const CLIENT_TRACE_ID = '0af7651916cd43dd8448eb211c80319c';
const CLIENT_SPAN_ID = 'b7ad6b7169203331';
const CLIENT_TRACE = { traceparent: `00-${CLIENT_TRACE_ID}-${CLIENT_SPAN_ID}-01`, tracestate: 'client=ab12' };
/** Sent on every request: auth is off, so it must go nowhere (not upstream, not into a span). */
const BEARER = 'Bearer bearer-secret-7f3a9c';
const ARGUMENT_SECRET = 'argument-secret-5d81e0';

let stateless: PaidUpstream;
t.before(async () => {
  stateless = await startPaidUpstream('stateless-json');
});
t.teardown(() => stateless.close());

let nextId = 1;
async function post(gateway: TestGateway, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; headers: Headers; json: Json }> {
  const response = await fetch(gateway.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25', authorization: BEARER, ...headers },
    body: JSON.stringify(body),
  });
  const text = await response.text();
  const json = (response.headers.get('content-type') ?? '').startsWith('text/event-stream') ? JSON.parse(text.split('\n').filter((line) => line.startsWith('data:')).at(-1)?.slice(5) ?? 'null') : text ? JSON.parse(text) : null;
  return { status: response.status, headers: response.headers, json };
}
const toolCall = (name: string, args: Json, id: number = nextId++) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } });

async function tracedGateway(t: Test, upstreamUrl: string, receiver: OtlpReceiver, tracing: Json = {}): Promise<TestGateway> {
  return startTestGateway(t, testConfig(upstreamUrl, { tracing: { otlpEndpoint: receiver.url, serviceName: 'tollbooth-test', ...tracing } }));
}

/** Challenge → pay on the dev checkout → the paid call; everything a secret scan must not find. */
async function paidFlow(gateway: TestGateway, headers: Record<string, string>, tool = 'fetch_readable') {
  const challenge = await post(gateway, toolCall(tool, { url: `https://example.com/?q=${ARGUMENT_SECRET}` }), headers);
  const offer = challenge.json.result._meta['xyz.tollbooth/challenge'];
  const checkoutUrl = offer.checkoutUrl as string;
  const handle = offer.retry.value as string;
  const pay = await fetch(`${checkoutUrl}/pay`, { method: 'POST', redirect: 'manual' });
  if (pay.status !== 303) throw new Error(`pay answered ${pay.status}`);
  const paid = await post(gateway, toolCall(tool, { url: `https://example.com/?q=${ARGUMENT_SECRET}`, tollboothToken: handle }), headers);
  return { challenge, paid, handle, checkoutUrl, linkId: new URL(checkoutUrl).pathname.split('/').at(-1) as string };
}

const childrenOf = (spans: ReceivedSpan[], parent: ReceivedSpan) => spans.filter((span) => span.parentSpanId === parent.spanId && span.traceId === parent.traceId);
const names = (spans: ReceivedSpan[]) => spans.map((span) => span.name).sort();

/** Every attribute value, event attribute and resource attribute, and the raw OTLP bodies: none holds a secret. */
function assertNoSecrets(t: Test, receiver: OtlpReceiver, secrets: Record<string, string>): void {
  const raw = receiver.requests.map((request) => request.body).join('\n');
  const values = receiver.spans.flatMap((span) => [span.name, ...Object.values(span.attributes), ...Object.values(span.resource), ...span.events.flatMap((event) => [event.name, ...Object.values(event.attributes)])]).map(String);
  t.ok(values.length > 0, 'there is something to scan');
  for (const [what, secret] of Object.entries(secrets)) {
    t.notOk(raw.includes(secret), `no OTLP request body holds the ${what}`);
    t.notOk(values.some((value) => value.includes(secret)), `no span attribute or resource holds the ${what}`);
  }
}

t.test('a paid flow: each request a SERVER span under the client traceparent, with store, provider and upstream children', async (t) => {
  const receiver = await startOtlpReceiver();
  t.teardown(() => receiver.close());
  const gateway = await tracedGateway(t, stateless.url, receiver);
  const flow = await paidFlow(gateway, CLIENT_TRACE);
  t.ok(flow.challenge.json.result._meta['xyz.tollbooth/challenge'], 'the first call was challenged');
  t.ok(flow.paid.json.result._meta['xyz.tollbooth/receipt'], 'the paid call ran');
  await gateway.close(); // flushes the span queue
  await receiver.waitFor((spans) => spans.filter((span) => span.kind === SPAN_KIND.SERVER).length >= 2);
  const spans = receiver.spans;

  const servers = spans.filter((span) => span.kind === SPAN_KIND.SERVER);
  t.equal(servers.length, 2, 'one SERVER span per MCP request (the dev checkout is not the MCP endpoint)');
  for (const server of servers) {
    t.equal(server.traceId, CLIENT_TRACE_ID, "the client's trace");
    t.equal(server.parentSpanId, CLIENT_SPAN_ID, "the server span's parent is the client's span");
    t.equal(server.name, 'tools/call fetch_readable');
    t.match(server.attributes, { 'mcp.method': 'tools/call', 'mcp.tool': 'fetch_readable', 'mcp.era': 'legacy', 'http.request.method': 'POST', 'http.route': '/mcp', 'http.response.status_code': 200 });
    t.equal(server.resource['service.name'], 'tollbooth-test');
  }
  const [challenged, authorised] = [servers.find((s) => s.attributes['tollbooth.outcome'] === 'challenged'), servers.find((s) => s.attributes['tollbooth.outcome'] === 'authorised')];
  if (!challenged || !authorised) throw new Error(`outcomes: ${servers.map((s) => s.attributes['tollbooth.outcome']).join(', ')}`);
  t.match(challenged.attributes, { 'tollbooth.sku': 'research', 'tollbooth.cost': 0 });
  t.match(authorised.attributes, { 'tollbooth.sku': 'research', 'tollbooth.cost': 1 });

  const challengeChildren = childrenOf(spans, challenged);
  t.same(names(challengeChildren), ['provider openCharge', 'store attachLink', 'store beginCharge', 'store createHandle', 'store takeChallengeToken', 'store takeChallengeToken'], 'a challenge: its store operations and the provider call, no upstream');
  t.match(challengeChildren.find((s) => s.name === 'provider openCharge')?.attributes, { 'tollbooth.provider': 'dev', 'tollbooth.provider.op': 'openCharge' });
  t.equal(challengeChildren.find((s) => s.name === 'provider openCharge')?.kind, SPAN_KIND.CLIENT);
  t.match(challengeChildren.find((s) => s.name === 'store beginCharge')?.attributes, { 'tollbooth.store.op': 'beginCharge' });

  const paidChildren = childrenOf(spans, authorised);
  // The dev checkout's pay action settled the charge already: the retry reserves, runs and commits.
  t.same(names(paidChildren), ['store commit', 'store reserve', 'upstream POST'], 'a paid call: reserve, the upstream, commit');
  const upstreamSpans = paidChildren.filter((span) => span.kind === SPAN_KIND.CLIENT && span.name.startsWith('upstream'));
  t.equal(upstreamSpans.length, 1, 'one CLIENT span around the proxied request');
  const upstreamSpan = upstreamSpans[0] as ReceivedSpan;
  t.match(upstreamSpan.attributes, { 'http.request.method': 'POST', 'http.response.status_code': 200, 'server.address': '127.0.0.1' });
  t.equal(typeof upstreamSpan.attributes['server.port'], 'number');

  const received = stateless.calls.filter((call) => call.arguments.url === `https://example.com/?q=${ARGUMENT_SECRET}`);
  t.equal(received.length, 1, 'only the paid call reached the upstream');
  t.equal(received[0]?.headers.traceparent, `00-${CLIENT_TRACE_ID}-${upstreamSpan.spanId}-01`, "the upstream's parent is the gateway's upstream span");
  t.equal(received[0]?.headers.tracestate, 'client=ab12', "the client's tracestate goes along");

  assertNoSecrets(t, receiver, { handle: flow.handle, 'checkout URL': flow.checkoutUrl, 'link id': flow.linkId, 'bearer token': 'bearer-secret-7f3a9c', 'tool argument': ARGUMENT_SECRET });
});

t.test('a batch: one SERVER span, one event per paid entry, the provider read on the request path, one upstream span', async (t) => {
  const receiver = await startOtlpReceiver();
  t.teardown(() => receiver.close());
  const gateway = await tracedGateway(t, stateless.url, receiver);
  const challenge = await post(gateway, toolCall('fetch_readable', { url: 'fund' }));
  const offer = challenge.json.result._meta['xyz.tollbooth/challenge'];
  // Paid without the checkout's pay action (which settles at once): the batch's first entry reads the charge.
  t.ok(await gateway.store.payDevLink(new URL(offer.checkoutUrl).pathname.split('/').at(-1) as string, '5.00'));
  const batch = [toolCall('echo', { text: 'free' }, 1), toolCall('fetch_readable', { url: 'a', tollboothToken: offer.retry.value }, 2), toolCall('costly', { q: 'b', tollboothToken: offer.retry.value }, 3)];
  const reply = await post(gateway, batch, { ...CLIENT_TRACE, 'mcp-protocol-version': '2025-03-26' });
  t.equal(reply.json.filter((m: Json) => m.result?._meta?.['xyz.tollbooth/receipt']).length, 2, 'both priced entries ran');
  await gateway.close();
  await receiver.waitFor((spans) => spans.some((span) => span.name === 'batch'));

  const server = receiver.spans.find((span) => span.name === 'batch') as ReceivedSpan;
  t.equal(server.kind, SPAN_KIND.SERVER);
  t.equal(server.parentSpanId, CLIENT_SPAN_ID);
  t.match(server.attributes, { 'mcp.method': 'batch', 'tollbooth.cost': 3, 'tollbooth.paid_calls': 2 });
  t.notOk('mcp.tool' in server.attributes, 'a batch names no single tool');
  t.same(
    server.events.map((event) => event.attributes).sort((a, b) => String(a['mcp.tool']).localeCompare(String(b['mcp.tool']))),
    [
      { 'mcp.tool': 'costly', 'tollbooth.outcome': 'authorised', 'tollbooth.sku': 'research', 'tollbooth.cost': 2 },
      { 'mcp.tool': 'fetch_readable', 'tollbooth.outcome': 'authorised', 'tollbooth.sku': 'research', 'tollbooth.cost': 1 },
    ],
  );
  const children = names(childrenOf(receiver.spans, server));
  t.ok(children.includes('provider readCharge'), 'the pending charge was read for the batch');
  t.ok(children.includes('store claimSettlement'), 'and settled');
  t.equal(children.filter((name) => name === 'store commit').length, 2, 'each priced entry committed');
  t.equal(children.filter((name) => name === 'upstream POST').length, 1, 'the forwarded entries went upstream as one request');
});

t.test('SSE replies, GET streams and DELETE in a session are traced; a sampled-out client trace is honoured', async (t) => {
  const sessions = await startPaidUpstream('sessions-sse');
  t.teardown(() => sessions.close());
  const receiver = await startOtlpReceiver();
  t.teardown(() => receiver.close());
  const gateway = await tracedGateway(t, sessions.url, receiver);
  const init = await post(gateway, { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } });
  const session = init.headers.get('mcp-session-id') as string;
  t.ok(session, 'a session');
  const inSession = { ...CLIENT_TRACE, 'mcp-session-id': session };
  await post(gateway, { jsonrpc: '2.0', method: 'notifications/initialized' }, { 'mcp-session-id': session });

  // A GET stream, opened and left by the client.
  // The SDK server answers a GET with its headers only at its first keep-alive (15 s): the client leaves
  // once the upstream has the GET, before any answer.
  const leave = new AbortController();
  const stream = fetch(gateway.url, { method: 'GET', headers: { accept: 'text/event-stream', 'mcp-protocol-version': '2025-11-25', ...inSession }, signal: leave.signal }).catch(() => undefined);
  await waitFor(() => sessions.requests.some((request) => request.method === 'GET'), 'the upstream has the GET');
  leave.abort();
  await stream;

  // A paid call answered as an event stream.
  const challenge = await post(gateway, toolCall('fetch_readable', { url: 'sse' }), inSession);
  const offer = challenge.json.result._meta['xyz.tollbooth/challenge'];
  await fetch(`${offer.checkoutUrl}/pay`, { method: 'POST', redirect: 'manual' });
  const paid = await post(gateway, toolCall('fetch_readable', { url: 'sse-paid', tollboothToken: offer.retry.value }), inSession);
  t.equal(paid.headers.get('content-type'), 'text/event-stream');
  t.ok(paid.json.result._meta['xyz.tollbooth/receipt']);

  // The client chose not to sample this one: no span is exported, the upstream still sees one trace.
  const unsampledTrace = '4bf92f3577b34da6a3ce929d0e0e4736';
  await post(gateway, toolCall('echo', { text: 'unsampled' }), { traceparent: `00-${unsampledTrace}-00f067aa0ba902b7-00`, 'mcp-session-id': session });
  await fetch(gateway.url, { method: 'DELETE', headers: { 'mcp-protocol-version': '2025-11-25', ...inSession } });
  await gateway.close();
  await receiver.waitFor((spans) => spans.some((span) => span.name === 'DELETE /mcp'));
  const spans = receiver.spans;

  const get = spans.find((span) => span.name === 'GET /mcp') as ReceivedSpan;
  t.ok(get, 'the GET stream has its SERVER span');
  t.equal(get.parentSpanId, CLIENT_SPAN_ID);
  t.same(names(childrenOf(spans, get)), ['upstream GET'], 'and an upstream span for the stream');
  t.ok(spans.find((span) => span.name === 'DELETE /mcp' && span.kind === SPAN_KIND.SERVER), 'DELETE has its SERVER span');

  const paidSpan = spans.find((span) => span.attributes['tollbooth.outcome'] === 'authorised') as ReceivedSpan;
  t.ok(names(childrenOf(spans, paidSpan)).includes('store registerPricedRequest'), 'the call registered in its upstream session (SPEC §6.5)');
  const upstreamSpan = childrenOf(spans, paidSpan).find((span) => span.name === 'upstream POST') as ReceivedSpan;
  const received = sessions.callsOf('fetch_readable').find((call) => call.arguments.url === 'sse-paid');
  t.equal(received?.headers.traceparent, `00-${CLIENT_TRACE_ID}-${upstreamSpan.spanId}-01`);

  t.notOk(spans.some((span) => span.traceId === unsampledTrace), 'nothing exported for a trace the client did not sample');
  const unsampled = sessions.callsOf('echo').find((call) => call.arguments.text === 'unsampled');
  t.match(unsampled?.headers.traceparent, new RegExp(`^00-${unsampledTrace}-[0-9a-f]{16}-00$`), 'the upstream continues the same (unsampled) trace');
  t.not(unsampled?.headers.traceparent, `00-${unsampledTrace}-00f067aa0ba902b7-00`, "with the gateway's span as parent, not the client's");
  assertNoSecrets(t, receiver, { 'session id': session, handle: offer.retry.value, 'checkout URL': offer.checkoutUrl });
});

t.test('sampleRatio 0: paid calls served, nothing recorded or exported, each upstream request still in an unsampled trace of its own', async (t) => {
  const receiver = await startOtlpReceiver();
  t.teardown(() => receiver.close());
  const gateway = await tracedGateway(t, stateless.url, receiver, { sampleRatio: 0 });
  const earlier = stateless.callsOf('fetch_readable').length;
  const flow = await paidFlow(gateway, {});
  t.ok(flow.paid.json.result._meta['xyz.tollbooth/receipt'], 'the paid call is served with its receipt');
  const again = await post(gateway, toolCall('fetch_readable', { url: 'second', tollboothToken: flow.handle }));
  t.ok(again.json.result._meta['xyz.tollbooth/receipt'], 'and the next one');
  await gateway.close();
  t.same(receiver.spans, [], 'no span is exported');
  const parents = stateless.callsOf('fetch_readable').slice(earlier).map((call) => call.headers.traceparent);
  t.equal(parents.length, 2, 'the upstream got both paid calls');
  for (const traceparent of parents) t.match(traceparent, /^00-[0-9a-f]{32}-[0-9a-f]{16}-00$/, 'each with a traceparent flagged unsampled');
  t.not((parents[0] as string).slice(3, 35), (parents[1] as string).slice(3, 35), 'each request its own trace');
});

t.test('an unsampled request runs outside any trace context; a sampled one inside its own', async (t) => {
  const { createTracing } = await import('../../src/observability/tracing-sdk.js');
  const { InMemorySpanExporter } = await import('@opentelemetry/sdk-trace-base');
  const { trace } = await import('@opentelemetry/api');
  const { IncomingMessage, ServerResponse } = await import('node:http');
  const { Socket } = await import('node:net');
  const { createLogger } = await import('../../src/observability/logger.js');
  const exporter = new InMemorySpanExporter();
  const tracing = createTracing({ otlpEndpoint: 'http://127.0.0.1:9', serviceName: 'unit', sampleRatio: 1, exporter: 'otlp' }, createLogger('silent'), exporter);
  t.teardown(() => tracing.shutdown());
  const response = () => new ServerResponse(new IncomingMessage(new Socket()));
  const sampled = tracing.startRequest('POST', '/mcp', { traceparent: `00-${CLIENT_TRACE_ID}-${CLIENT_SPAN_ID}-01` }, response());
  const unsampled = tracing.startRequest('POST', '/mcp', { traceparent: `00-${CLIENT_TRACE_ID}-${CLIENT_SPAN_ID}-00` }, response());
  t.equal(sampled.within(() => trace.getActiveSpan()?.spanContext().traceId), CLIENT_TRACE_ID, "a sampled request's work sees its span");
  t.equal(unsampled.within(() => trace.getActiveSpan()), undefined, "an unsampled one's sees none: no context entered, no child span built");
  const headers: Record<string, unknown> = { traceparent: 'from-the-client' };
  const callback = (): void => undefined;
  t.equal(unsampled.forward({ method: 'POST', origin: 'http://127.0.0.1:1', headers }, callback), callback, 'its upstream callback is not wrapped');
  t.match(headers.traceparent, new RegExp(`^00-${CLIENT_TRACE_ID}-(?!${CLIENT_SPAN_ID})[0-9a-f]{16}-00$`), 'the upstream continues the trace, unsampled, under the gateway');
});

t.test('on the Redis store: the same children, the store wrapper in front of the Lua-backed store', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const receiver = await startOtlpReceiver();
  t.teardown(() => receiver.close());
  const gateway = await startTestGateway(t, testConfig(stateless.url, { store: { type: 'redis', redis: { url: redis.url } }, tracing: { otlpEndpoint: receiver.url } }));
  const flow = await paidFlow(gateway, CLIENT_TRACE);
  t.ok(flow.paid.json.result._meta['xyz.tollbooth/receipt']);
  await gateway.close();
  await receiver.waitFor((spans) => spans.some((span) => span.attributes['tollbooth.outcome'] === 'authorised'));
  const authorised = receiver.spans.find((span) => span.attributes['tollbooth.outcome'] === 'authorised') as ReceivedSpan;
  t.same(names(childrenOf(receiver.spans, authorised)), ['store commit', 'store reserve', 'upstream POST']);
  t.ok(receiver.spans.every((span) => span.statusCode !== 2), 'no span failed');
  assertNoSecrets(t, receiver, { handle: flow.handle, 'checkout URL': flow.checkoutUrl, 'link id': flow.linkId, 'Redis URL': redis.url, 'tool argument': ARGUMENT_SECRET });
});
