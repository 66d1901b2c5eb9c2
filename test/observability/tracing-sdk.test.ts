// The exporter side of tracing (SPEC §17): where spans go, and that a collector which refuses, hangs
// or wants credentials never costs a request anything — no failed or slowed call, no unhandled
// rejection, no secret in a log line, and a shutdown that still exits promptly.
import t, { type Test } from 'tap';
import { tracesUrl } from '../../src/observability/tracing-sdk.js';
import { fundedHandle, rawToolCall, startTestGateway, testConfig } from '../helpers/gateway.js';
import { startGatewayProcess } from '../helpers/gateway-process.js';
import { startOtlpReceiver, SPAN_KIND } from '../helpers/otlp-receiver.js';
import { startPaidUpstream, type PaidUpstream } from '../helpers/paid-upstream.js';
import { deadPort } from '../helpers/scripted-upstream.js';

let upstream: PaidUpstream;
t.before(async () => {
  upstream = await startPaidUpstream('stateless-json');
});
t.teardown(() => upstream.close());

t.test('spans go to {base}/v1/traces, as OTEL_EXPORTER_OTLP_ENDPOINT is read', async (t) => {
  t.equal(tracesUrl('http://collector:4318'), 'http://collector:4318/v1/traces');
  t.equal(tracesUrl('http://collector:4318/'), 'http://collector:4318/v1/traces');
  t.equal(tracesUrl('https://otlp.example/tenant-a/'), 'https://otlp.example/tenant-a/v1/traces', 'a base path is kept');
  t.equal(tracesUrl('https://otlp.example/x?token=abc'), 'https://otlp.example/x/v1/traces?token=abc', 'so is a query');
  t.equal(tracesUrl('https://u:p@otlp.example'), 'https://u:p@otlp.example/v1/traces', 'and userinfo (sent as Basic auth)');
});

/** Three paid calls and some free ones; every one answered as without tracing. */
async function traffic(t: Test, gateway: { url: string }): Promise<void> {
  const handle = await fundedHandle(gateway);
  for (let i = 0; i < 3; i++) {
    const reply = await rawToolCall(gateway, 'fetch_readable', { url: `p${i}`, tollboothToken: handle });
    t.ok(reply.result._meta['xyz.tollbooth/receipt'], `paid call ${i} answered with its receipt`);
  }
  const free = await Promise.all(Array.from({ length: 10 }, (_, i) => rawToolCall(gateway, 'echo', { text: `free-${i}` })));
  t.ok(free.every((reply, i) => reply.result.content[0].text === JSON.stringify({ text: `free-${i}` })), 'free calls answered');
}

t.test('a collector that refuses connections: requests unaffected, no unhandled rejection, failure logged without the URL, prompt close', async (t) => {
  const rejections: unknown[] = [];
  const onRejection = (reason: unknown): void => void rejections.push(reason);
  process.on('unhandledRejection', onRejection);
  t.teardown(() => void process.off('unhandledRejection', onRejection));
  const endpoint = `http://collector-user:collector-pw-91c2@127.0.0.1:${await deadPort()}`;
  const gateway = await startTestGateway(t, testConfig(upstream.url, { tracing: { otlpEndpoint: endpoint } }));
  await traffic(t, gateway);
  // Exports run every second; each gives up after its retries (≤ 5 s) and is reported once.
  const deadline = Date.now() + 20_000;
  while (!gateway.logs().some((line) => line.evt === 'tracing_export_failed') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  const failure = gateway.logs().find((line) => line.evt === 'tracing_export_failed');
  t.match(failure, { level: 'warn', code: 'ECONNREFUSED' }, 'the operator is told, with the error code');
  const started = Date.now();
  await gateway.close();
  t.ok(Date.now() - started < 6_000, `close took ${Date.now() - started} ms (the exporter is given at most 2 s)`);
  t.same(rejections, [], 'no unhandled rejection');
  t.notOk(gateway.logText().includes('collector-pw-91c2'), 'the collector password is in no log line (the start line shows the config masked)');
  t.ok(gateway.logText().includes('collector-user:***@127.0.0.1'), 'the masked endpoint is shown');
});

t.test('a collector that accepts and never answers: calls unaffected, SIGTERM still exits promptly (a real process)', async (t) => {
  const receiver = await startOtlpReceiver('hang');
  t.teardown(() => receiver.close());
  const gateway = await startGatewayProcess(t, testConfig(upstream.url, { tracing: { otlpEndpoint: receiver.url } }));
  await traffic(t, gateway);
  await new Promise((resolve) => setTimeout(resolve, 1_500)); // an export is now stuck on the collector
  t.ok(receiver.requests.length >= 1, 'the collector got an export that it never answers');
  const started = Date.now();
  const code = await gateway.stop();
  t.equal(code, 0, 'exit 0 (an unhandled rejection would have crashed it)');
  t.ok(Date.now() - started < 8_000, `SIGTERM to exit took ${Date.now() - started} ms`);
});

t.test('credentials in otlpEndpoint go to the collector as Basic auth', async (t) => {
  const receiver = await startOtlpReceiver();
  t.teardown(() => receiver.close());
  const url = new URL(receiver.url);
  const gateway = await startTestGateway(t, testConfig(upstream.url, { tracing: { otlpEndpoint: `http://tracer:s3cret-pw@${url.host}` } }));
  await rawToolCall(gateway, 'echo', { text: 'one' });
  await gateway.close();
  await receiver.waitFor((spans) => spans.some((span) => span.kind === SPAN_KIND.SERVER));
  t.equal(receiver.requests[0]?.headers.authorization, `Basic ${Buffer.from('tracer:s3cret-pw').toString('base64')}`);
  t.equal(receiver.requests[0]?.path, '/v1/traces');
  t.notOk(gateway.logText().includes('s3cret-pw'));
});
