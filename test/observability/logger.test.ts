// Logs (SPEC §10, issue 8): pino JSON whose redaction really hides secrets, handle fingerprints of
// the documented shape, and request ids: every priced call's log line carries the request's id, the
// id is echoed as `x-request-id`, and a caller's own id is kept only when it is short and printable.
import { Writable } from 'node:stream';
import t from 'tap';
import { createLogger } from '../../src/observability/logger.js';
import { fingerprint } from '../../src/observability/fingerprint.js';
import { mintHandle } from '../../src/paywall/handles.js';
import { MOOVE_WEBHOOK_PATH } from '../../src/payments/webhook.js';
import { startTestGateway, testConfig, type TestGateway } from '../helpers/gateway.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';

const SECRET = 'secret-marker-Zr81q';

/** A logger writing into an array, as the gateway's would write to stdout. */
function capturingLogger(): { logger: ReturnType<typeof createLogger>; lines: () => Record<string, unknown>[]; text: () => string } {
  const chunks: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      chunks.push(chunk.toString('utf8'));
      done();
    },
  });
  const logger = createLogger('info', sink);
  const text = () => chunks.join('');
  return { logger, text, lines: () => text().split('\n').filter(Boolean).map((line) => JSON.parse(line) as Record<string, unknown>) };
}

t.test('redaction hides authorization and cookie headers, on a request object or bare', async (t) => {
  const { logger, lines, text } = capturingLogger();
  logger.info({ req: { method: 'POST', headers: { authorization: `Bearer ${SECRET}`, cookie: `sid=${SECRET}`, accept: 'application/json' } } }, 'request');
  logger.info({ headers: { authorization: `Bearer ${SECRET}`, cookie: `sid=${SECRET}` } }, 'headers');
  t.notMatch(text(), SECRET);
  t.match(lines()[0], { req: { headers: { authorization: '[redacted]', cookie: '[redacted]', accept: 'application/json' } } }, 'other headers stay readable');
  t.match(lines()[1], { headers: { authorization: '[redacted]', cookie: '[redacted]' } });
});

t.test('redaction hides apiKey, webhookSecret and hashSecret at the top level and one level down', async (t) => {
  const { logger, lines, text } = capturingLogger();
  logger.info({ apiKey: SECRET, webhookSecret: SECRET, hashSecret: SECRET }, 'top');
  logger.info({ moove: { apiKey: SECRET, webhookSecret: SECRET, baseUrl: 'https://api.moove.test' }, handles: { hashSecret: SECRET } }, 'nested');
  t.notMatch(text(), SECRET);
  t.match(lines()[0], { apiKey: '[redacted]', webhookSecret: '[redacted]', hashSecret: '[redacted]' });
  t.match(lines()[1], { moove: { apiKey: '[redacted]', webhookSecret: '[redacted]', baseUrl: 'https://api.moove.test' }, handles: { hashSecret: '[redacted]' } });
});

t.test('redaction hides the secrets of a whole config object logged unmasked by mistake', async (t) => {
  const { logger, lines, text } = capturingLogger();
  const config = { payments: { provider: 'moove', moove: { apiKey: SECRET, webhookSecret: SECRET } }, handles: { hashSecret: SECRET, argumentName: 'tollboothToken' } };
  logger.info({ evt: 'start', config }, 'listening');
  t.notMatch(text(), SECRET);
  t.match(lines()[0], { config: { payments: { moove: { apiKey: '[redacted]', webhookSecret: '[redacted]' } }, handles: { hashSecret: '[redacted]', argumentName: 'tollboothToken' } } });
});

t.test('redaction keeps the marks of an already-masked config: "***" and empty (unset) values', async (t) => {
  const { logger, lines } = capturingLogger();
  logger.info({ evt: 'start', config: { payments: { moove: { apiKey: '***', webhookSecret: '' } }, handles: { hashSecret: '***' } } }, 'listening');
  t.match(lines()[0], { config: { payments: { moove: { apiKey: '***', webhookSecret: '' } }, handles: { hashSecret: '***' } } });
});

t.test('redaction leaves the logged object itself untouched', async (t) => {
  const { logger } = capturingLogger();
  const headers = { authorization: `Bearer ${SECRET}` };
  logger.info({ headers }, 'headers');
  t.equal(headers.authorization, `Bearer ${SECRET}`);
});

t.test('a fingerprint is the first 9 characters, "..", and the last 4', async (t) => {
  t.equal(fingerprint('tb_s_KLeVq3m0c8QzT1xYwUaEPcw'), 'tb_s_KLeV..EPcw');
  const handles = Array.from({ length: 20 }, mintHandle);
  t.same(handles.map(fingerprint), handles.map((h) => `${h.slice(0, 9)}..${h.slice(-4)}`), 'minted handles');
  t.ok(handles.map(fingerprint).every((print) => /^tb_s_[A-Za-z0-9_-]{4}\.\.[A-Za-z0-9_-]{4}$/.test(print)), 'always 15 characters of that shape');
});

t.test('a fingerprint of a short token shows at most its first 5 characters', async (t) => {
  for (const token of ['', 'a', 'tb_s_', 'tb_s_abcd', 'tb_s_abcdefgh']) {
    const print = fingerprint(token);
    t.equal(print, `${token.slice(0, 5)}..`, JSON.stringify(token));
  }
});

// ---- request ids, through a real gateway ----

const upstream = await startPaidUpstream('stateless-json');
t.teardown(() => upstream.close());

/** A raw priced tools/call (no token: the gateway answers it with a challenge itself). */
async function pricedCall(gateway: TestGateway, extraHeaders: Record<string, string> = {}): Promise<Response> {
  const response = await fetch(gateway.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18', ...extraHeaders },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'fetch_readable', arguments: { url: 'https://example.com/' } } }),
  });
  await response.text();
  return response;
}

const callLines = (gateway: TestGateway) => gateway.logs().filter((line) => line.evt === 'call');

t.test('a priced call without x-request-id gets a generated id, echoed and on its call line', async (t) => {
  const gateway = await startTestGateway(t, testConfig(upstream.url));
  const response = await pricedCall(gateway);
  const id = response.headers.get('x-request-id');
  t.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/, 'a UUID');
  t.match(callLines(gateway), [{ evt: 'call', reqId: id, tool: 'fetch_readable', outcome: 'challenged' }]);
});

t.test('two requests get two different ids', async (t) => {
  const gateway = await startTestGateway(t, testConfig(upstream.url));
  const first = (await pricedCall(gateway)).headers.get('x-request-id');
  const second = (await pricedCall(gateway)).headers.get('x-request-id');
  t.not(first, second);
  t.same(callLines(gateway).map((line) => line.reqId), [first, second]);
});

t.test("a caller's printable x-request-id is kept, echoed and logged", async (t) => {
  const gateway = await startTestGateway(t, testConfig(upstream.url));
  const response = await pricedCall(gateway, { 'x-request-id': 'lb-7f3a:trace/42' });
  t.equal(response.headers.get('x-request-id'), 'lb-7f3a:trace/42');
  t.match(callLines(gateway), [{ reqId: 'lb-7f3a:trace/42' }]);
});

t.test('an x-request-id that is too long or not printable is replaced by a generated one', async (t) => {
  const gateway = await startTestGateway(t, testConfig(upstream.url));
  for (const hostile of ['x'.repeat(129), 'has space', 'tab\there', 'caf\u00e9']) {
    const response = await pricedCall(gateway, { 'x-request-id': hostile });
    const id = response.headers.get('x-request-id');
    t.match(id, /^[0-9a-f-]{36}$/, `${JSON.stringify(hostile.slice(0, 12))} replaced by a UUID`);
  }
  t.equal(callLines(gateway).length, 4);
  t.notOk(gateway.logText().includes('x'.repeat(129)) || gateway.logText().includes('has space'), 'the refused ids are not logged');
});

t.test('an x-request-id of exactly 128 printable characters is kept', async (t) => {
  const gateway = await startTestGateway(t, testConfig(upstream.url));
  const id = 'r'.repeat(128);
  const response = await pricedCall(gateway, { 'x-request-id': id });
  t.equal(response.headers.get('x-request-id'), id);
});

t.test('a free call relayed from the upstream echoes x-request-id too', async (t) => {
  const gateway = await startTestGateway(t, testConfig(upstream.url));
  const response = await fetch(gateway.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18', 'x-request-id': 'free-call-1' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'echo', arguments: { text: 'hi' } } }),
  });
  const body = await response.text();
  t.match(body, /hi/, 'the upstream answered');
  t.equal(response.headers.get('x-request-id'), 'free-call-1');
});

t.test('a refused webhook is logged with the request id', async (t) => {
  const gateway = await startTestGateway(
    t,
    testConfig(upstream.url, { payments: { provider: 'moove', moove: { apiKey: SECRET, webhookSecret: 'whsec-test', baseUrl: 'http://127.0.0.1:9' } } }),
  );
  const response = await fetch(`${gateway.origin}${MOOVE_WEBHOOK_PATH}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-request-id': 'webhook-1' },
    body: '{"type":"payment_link.paid"}',
  });
  await response.text();
  t.equal(response.headers.get('x-request-id'), 'webhook-1');
  t.match(gateway.logs().find((line) => line.evt === 'webhook'), { reqId: 'webhook-1', provider: 'moove' });
  t.notOk(gateway.logText().includes(SECRET), 'the API key is not logged');
});

t.test('operator routes echo x-request-id too', async (t) => {
  const gateway = await startTestGateway(t, testConfig(upstream.url));
  const response = await fetch(`${gateway.origin}/healthz`, { headers: { 'x-request-id': 'probe-1' } });
  await response.text();
  t.equal(response.headers.get('x-request-id'), 'probe-1');
});
