// The per-call log line (SPEC §10) is written without pino's redaction (observability/logger.ts,
// issue 14: the wildcard redactor was most of its cost). These tests are the proof that nothing
// secret can reach it: the writer copies a closed list of fields, and a real paid exchange (handle,
// bearer-like header, checkout URL, hash secret, arguments) leaves none of them on any call line.
import { Writable } from 'node:stream';
import t from 'tap';
import { createCallLogger, createLogger, type CallLine } from '../../src/observability/logger.js';
import { fingerprint } from '../../src/observability/fingerprint.js';
import { startTestGateway, testConfig, type TestGateway } from '../helpers/gateway.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';

const SECRET = 'secret-marker-Qv72x';

function capture(level = 'info'): { logger: ReturnType<typeof createLogger>; lines: () => Record<string, unknown>[]; text: () => string } {
  const chunks: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      chunks.push(chunk.toString('utf8'));
      done();
    },
  });
  const text = () => chunks.join('');
  return { logger: createLogger(level, sink), text, lines: () => text().split('\n').filter(Boolean).map((line) => JSON.parse(line) as Record<string, unknown>) };
}

const LINE: CallLine = { reqId: 'r-1', tool: 'fetch_readable', sku: 'research', rail: 'credits', tokenPresented: true, tokenFingerprint: 'tb_s_KLeV..EPcw', tokenRecognised: true, outcome: 'authorised', cost: 1, durationMs: 3 };

t.test('the call line carries its bindings and exactly the fields of CallLine', async (t) => {
  const { logger, lines } = capture();
  createCallLogger(logger, 'default')(LINE);
  const [line] = lines();
  t.same(Object.keys(line ?? {}).sort(), ['cost', 'durationMs', 'evt', 'level', 'name', 'outcome', 'reqId', 'rail', 'server', 'sku', 'time', 'tokenFingerprint', 'tokenPresented', 'tokenRecognised', 'tool'].sort());
  t.match(line, { level: 'info', name: 'tollbooth', evt: 'call', server: 'default', ...LINE });
});

t.test('fields smuggled onto the line object (outside CallLine) are not written', async (t) => {
  const { logger, text } = capture();
  const smuggled = { ...LINE, token: SECRET, authorization: `Bearer ${SECRET}`, checkoutUrl: `https://pay.example/${SECRET}`, arguments: { q: SECRET } } as CallLine;
  const x402 = { payer: '0x857b..6b66', network: 'base-sepolia', amount: '1000', settled: true, signature: SECRET } as NonNullable<CallLine['x402']>;
  const write = createCallLogger(logger, 'default');
  write(smuggled);
  write({ ...LINE, rail: 'x402', x402 });
  t.notMatch(text(), SECRET);
  t.match(text(), '"payer":"0x857b..6b66"', 'the x402 fields that belong are written');
});

t.test('below info nothing is written (and nothing is built)', async (t) => {
  const { logger, text } = capture('warn');
  createCallLogger(logger, 'default')(LINE);
  t.equal(text(), '');
});

t.test('the rest of the logger still redacts (the call logger is a child, not a replacement)', async (t) => {
  const { logger, text } = capture();
  createCallLogger(logger, 'default')(LINE);
  logger.info({ apiKey: SECRET, headers: { authorization: `Bearer ${SECRET}` } }, 'other');
  t.notMatch(text(), SECRET);
});

t.test('a real paid exchange: no handle, checkout URL, hash secret or argument on any call line', async (t) => {
  const upstream = await startPaidUpstream();
  t.teardown(() => upstream.close());
  const hashSecret = `hash-${SECRET}`;
  const gateway: TestGateway = await startTestGateway(t, testConfig(upstream.url, { handles: { hashSecret } }));
  const call = async (args: Record<string, unknown>): Promise<Record<string, any>> => {
    const response = await fetch(gateway.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'fetch_readable', arguments: args } }),
    });
    return (await response.json()) as Record<string, any>;
  };
  const argument = `https://example.com/${SECRET}`;
  const challenge = (await call({ url: argument })).result._meta['xyz.tollbooth/challenge'];
  const handle = challenge.retry.value as string;
  const pay = await fetch(`${challenge.checkoutUrl}/pay`, { method: 'POST', redirect: 'manual' });
  t.equal(pay.status, 303);
  const paid = await call({ url: argument, tollboothToken: handle });
  t.ok(paid.result._meta['xyz.tollbooth/receipt'], 'the retry was paid');
  await call({ url: argument, tollboothToken: `${handle.slice(0, -4)}zzzz` }); // an unknown handle

  const lines = gateway.logs().filter((line) => line.evt === 'call');
  t.match(lines.map((line) => line.outcome), ['challenged', 'authorised', 'challenged']);
  t.equal(lines[1]?.tokenFingerprint, fingerprint(handle), 'the handle appears only as its fingerprint');
  const text = JSON.stringify(lines);
  for (const secret of [handle, handle.slice(9, -4), challenge.checkoutUrl as string, new URL(challenge.checkoutUrl as string).pathname, hashSecret, SECRET]) {
    t.notOk(text.includes(secret), `${secret.slice(0, 12)}… is not on a call line`);
  }
});
