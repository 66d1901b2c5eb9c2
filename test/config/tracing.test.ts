// tracing (SPEC §17): off by default, a base URL when on, a sample ratio in [0, 1], and a secret in the
// endpoint masked wherever the config is shown (`tollbooth check`, the start log line).
import t from 'tap';
import { parseConfigText } from '../../src/config/load.js';
import { maskSecrets, printableConfig } from '../../src/config/mask.js';
import { refusalOf } from '../helpers/config-refusal.js';

const FILE = 'config/tracing.yaml';
const yaml = (...lines: string[]): string => `${['upstream:', '  url: http://127.0.0.1:3001/mcp', ...lines].join('\n')}\n`;
const parse = (text: string, env: Record<string, string> = {}) => parseConfigText(text, FILE, env);
const refusal = (text: string): string => refusalOf(parse, text);

t.test('off by default, with the defaults of §17', async (t) => {
  t.same(parse(yaml()).tracing, { exporter: 'otlp', otlpEndpoint: '', serviceName: 'tollbooth', sampleRatio: 1 });
  t.equal(parse(yaml('tracing:', '  otlpEndpoint: ${OTEL_EXPORTER_OTLP_ENDPOINT:-}')).tracing.otlpEndpoint, '', 'an unset variable keeps it off');
  t.equal(parse(yaml('tracing:', '  otlpEndpoint: ${OTEL_EXPORTER_OTLP_ENDPOINT:-}'), { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }).tracing.otlpEndpoint, 'http://collector:4318');
  t.same(parse(yaml('tracing: { otlpEndpoint: "https://otlp.example/tenant", serviceName: gw-eu, sampleRatio: 0.25 }')).tracing, { exporter: 'otlp', otlpEndpoint: 'https://otlp.example/tenant', serviceName: 'gw-eu', sampleRatio: 0.25 });
  t.equal(parse(yaml('tracing: { exporter: console }')).tracing.exporter, 'console', 'the console exporter needs no endpoint');
});

t.test('what is refused, and how it is said', async (t) => {
  t.match(refusal(yaml('tracing: { otlpEndpoint: "grpc://collector:4317" }')), /tracing\.otlpEndpoint: expected an absolute http\(s\) base URL of an OTLP\/HTTP collector/);
  t.match(refusal(yaml('tracing: { otlpEndpoint: "collector:4318" }')), /tracing\.otlpEndpoint/);
  t.match(refusal(yaml('tracing: { sampleRatio: 1.5 }')), /tracing\.sampleRatio: expected a fraction from 0 to 1/);
  t.match(refusal(yaml('tracing: { sampleRatio: -0.1 }')), /tracing\.sampleRatio: expected a fraction from 0 to 1/);
  t.match(refusal(yaml('tracing: { sampleRatio: "half" }')), /tracing\.sampleRatio: expected a fraction from 0 to 1/);
  t.match(refusal(yaml('tracing: { serviceName: "" }')), /tracing\.serviceName: expected a non-empty service name/);
  t.match(refusal(yaml('tracing: { endpoint: "http://c:4318" }')), /tracing/, 'an unknown key is refused');
  t.match(refusal(yaml('tracing: { exporter: stdout }')), /tracing\.exporter: expected otlp .* or console/);
});

t.test('tollbooth check masks a password or token in the endpoint', async (t) => {
  const config = parse(yaml('tracing: { otlpEndpoint: "https://tenant:s3cret@otlp.example/base?api_key=k-123&region=eu" }'));
  t.equal(config.tracing.otlpEndpoint, 'https://tenant:s3cret@otlp.example/base?api_key=k-123&region=eu', 'the gateway itself uses the real one');
  t.equal(maskSecrets(config).tracing.otlpEndpoint, 'https://tenant:***@otlp.example/base?api_key=***&region=eu');
  const printed = JSON.stringify(printableConfig(config));
  t.notOk(printed.includes('s3cret') || printed.includes('k-123'));
});
