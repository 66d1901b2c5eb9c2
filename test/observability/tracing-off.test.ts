// Tracing off (SPEC §17: `tracing.otlpEndpoint` empty, the default): the OpenTelemetry SDK is never
// loaded and no OTLP request is ever made, whatever the environment says. Its own test file (its own
// process), so the module cache shows what this process loaded; the last test turns tracing on in
// the same process to show the check sees the SDK when it is there.
import { createRequire } from 'node:module';
import t from 'tap';
import { fundedHandle, rawToolCall, startTestGateway, testConfig } from '../helpers/gateway.js';
import { startOtlpReceiver, SPAN_KIND } from '../helpers/otlp-receiver.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';

const moduleCache = createRequire(import.meta.url).cache;
/**
 * The SDK packages are CommonJS: loading them (as tracing-sdk.ts does) puts them in the module cache.
 * `@opentelemetry/api` itself is not counted: prom-client loads it whatever tracing says (for exemplars).
 */
const loadedOpenTelemetry = (): string[] => [
  ...new Set(
    Object.keys(moduleCache)
      .filter((path) => path.includes('/@opentelemetry/'))
      .map((path) => path.slice(path.lastIndexOf('/@opentelemetry/') + 1).split('/').slice(0, 2).join('/'))
      .filter((name) => name !== '@opentelemetry/api'),
  ),
];

const upstream = await startPaidUpstream('stateless-json');
t.teardown(() => upstream.close());
const receiver = await startOtlpReceiver();
t.teardown(() => receiver.close());

t.test('off: no SDK module is loaded and no OTLP request is made, even with OTEL_EXPORTER_OTLP_ENDPOINT set', async (t) => {
  process.env.OTEL_EXPORTER_OTLP_ENDPOINT = receiver.url;
  t.teardown(() => void delete process.env.OTEL_EXPORTER_OTLP_ENDPOINT);
  const gateway = await startTestGateway(t, testConfig(upstream.url));
  t.equal(gateway.config.tracing.otlpEndpoint, '', 'off by default');
  const handle = await fundedHandle(gateway);
  const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
  const reply = await fetch(gateway.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', traceparent },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'fetch_readable', arguments: { url: 'off', tollboothToken: handle } } }),
  });
  t.ok(((await reply.json()) as { result: { _meta: Record<string, unknown> } }).result._meta['xyz.tollbooth/receipt']);
  await rawToolCall(gateway, 'echo', { text: 'free' });
  t.equal(upstream.callsOf('fetch_readable').find((call) => call.arguments.url === 'off')?.headers.traceparent, traceparent, "off, the client's traceparent passes to the upstream as any header");
  await new Promise((resolve) => setTimeout(resolve, 1_500)); // longer than the export interval when on
  await gateway.close();
  t.same(loadedOpenTelemetry(), [], 'no OpenTelemetry SDK, exporter, propagator or context manager module was loaded');
  t.equal(receiver.requests.length, 0, 'no OTLP request was made');
});

t.test('negative control: on, the same check finds the SDK, and the receiver gets spans', async (t) => {
  const gateway = await startTestGateway(t, testConfig(upstream.url, { tracing: { otlpEndpoint: receiver.url } }));
  await rawToolCall(gateway, 'echo', { text: 'on' });
  await gateway.close();
  const loaded = new Set(loadedOpenTelemetry());
  t.ok(loaded.has('@opentelemetry/sdk-trace-base'), 'the SDK is in the module cache');
  t.ok(loaded.has('@opentelemetry/exporter-trace-otlp-http'), 'and the exporter');
  await receiver.waitFor((spans) => spans.some((span) => span.kind === SPAN_KIND.SERVER));
});
