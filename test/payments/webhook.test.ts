// Moove webhook verification (pure function); the route is in test/http/moove-webhook.test.ts.
import t from 'tap';
import { extractLinkId, verifyMooveWebhook } from '../../src/payments/webhook.js';
import { signWebhook } from '../helpers/moove-fake.js';

const SECRET = 'whsec_test_0123456789abcdef';
const NOW = 1_780_000_000_000; // epoch ms
const TS = NOW / 1000;
const LINK = '7d3f0a52-9c1e-4b8e-a1f2-3c4d5e6f7a8b';
const PAYLOAD = { id: 'evt_1', type: 'payment_link.completed', data: { id: LINK, status: 'completed' } };

function signed(body: string | Buffer, timestamp: number = TS, secret = SECRET): { rawBody: Buffer; headers: Record<string, string> } {
  const rawBody = Buffer.isBuffer(body) ? body : Buffer.from(body);
  return { rawBody, headers: { 'moove-timestamp': String(timestamp), 'moove-signature': signWebhook(secret, rawBody, timestamp), 'moove-event-id': 'evt_header' } };
}

t.test('verify: a good signature yields the event id and link id', async (t) => {
  const verdict = verifyMooveWebhook({ ...signed(JSON.stringify(PAYLOAD)), secret: SECRET, now: NOW });
  t.same(verdict, { ok: true, event: { id: 'evt_header', linkId: LINK } });
});

t.test('verify: the event id falls back to the payload id without the header', async (t) => {
  const { rawBody, headers } = signed(JSON.stringify(PAYLOAD));
  delete headers['moove-event-id'];
  t.same(verifyMooveWebhook({ rawBody, headers, secret: SECRET, now: NOW }), { ok: true, event: { id: 'evt_1', linkId: LINK } });
});

t.test('verify: a signature by another secret is refused 401', async (t) => {
  const verdict = verifyMooveWebhook({ ...signed(JSON.stringify(PAYLOAD), TS, 'whsec_other'), secret: SECRET, now: NOW });
  t.match(verdict, { ok: false, status: 401, reason: /does not match/ });
});

t.test('verify: one changed byte of the body is refused 401', async (t) => {
  const { rawBody, headers } = signed(JSON.stringify(PAYLOAD));
  const tampered = Buffer.from(rawBody);
  tampered.writeUInt8(tampered.readUInt8(tampered.length - 2) ^ 1, tampered.length - 2);
  t.match(verifyMooveWebhook({ rawBody: tampered, headers, secret: SECRET, now: NOW }), { ok: false, status: 401 });
});

t.test('verify: the signature binds the timestamp', async (t) => {
  const { rawBody, headers } = signed(JSON.stringify(PAYLOAD));
  headers['moove-timestamp'] = String(TS + 1);
  t.match(verifyMooveWebhook({ rawBody, headers, secret: SECRET, now: NOW }), { ok: false, status: 401, reason: /does not match/ });
});

t.test('verify: missing or malformed headers are refused 401', async (t) => {
  const good = signed(JSON.stringify(PAYLOAD));
  const cases: Array<[string, Record<string, string>]> = [
    ['no signature', { 'moove-timestamp': String(TS) }],
    ['no timestamp', { 'moove-signature': good.headers['moove-signature'] ?? '' }],
    ['no headers', {}],
    ['timestamp not digits', { ...good.headers, 'moove-timestamp': '17e8' }],
    ['no v1 entry', { ...good.headers, 'moove-signature': `v0=${'a'.repeat(64)}` }],
    ['v1 not hex', { ...good.headers, 'moove-signature': `v1=${'z'.repeat(64)}` }],
    ['v1 too short', { ...good.headers, 'moove-signature': (good.headers['moove-signature'] ?? '').slice(0, 40) }],
    ['empty signature', { ...good.headers, 'moove-signature': '' }],
  ];
  for (const [name, headers] of cases) {
    t.match(verifyMooveWebhook({ rawBody: good.rawBody, headers, secret: SECRET, now: NOW }), { ok: false, status: 401 }, name);
  }
});

t.test('verify: timestamps within ±300 s pass, beyond are refused', async (t) => {
  const body = JSON.stringify(PAYLOAD);
  t.ok(verifyMooveWebhook({ ...signed(body, TS - 300), secret: SECRET, now: NOW }).ok, '300 s old');
  t.ok(verifyMooveWebhook({ ...signed(body, TS + 300), secret: SECRET, now: NOW }).ok, '300 s ahead');
  t.match(verifyMooveWebhook({ ...signed(body, TS - 301), secret: SECRET, now: NOW }), { ok: false, status: 401, reason: /tolerance/ }, 'stale');
  t.match(verifyMooveWebhook({ ...signed(body, TS + 301), secret: SECRET, now: NOW }), { ok: false, status: 401, reason: /tolerance/ }, 'future');
});

t.test('verify: any of several v1 entries (comma- or space-separated) may match', async (t) => {
  const { rawBody, headers } = signed(JSON.stringify(PAYLOAD));
  const good = headers['moove-signature'] ?? '';
  const stale = signWebhook('whsec_rotated_out', rawBody, TS);
  for (const value of [`${stale},${good}`, `${stale} ${good}`, `${stale}, ${good}`, `t=123,${good}`, `${good},${stale}`]) {
    t.ok(verifyMooveWebhook({ rawBody, headers: { ...headers, 'moove-signature': value }, secret: SECRET, now: NOW }).ok, value.slice(0, 20));
  }
  t.notOk(verifyMooveWebhook({ rawBody, headers: { ...headers, 'moove-signature': `${stale},${stale}` }, secret: SECRET, now: NOW }).ok, 'negative control');
});

t.test('verify: a signed body that is not JSON is refused 400; unsigned garbage stays 401', async (t) => {
  t.match(verifyMooveWebhook({ ...signed('not json {'), secret: SECRET, now: NOW }), { ok: false, status: 400 });
  const { headers } = signed('something else');
  t.match(verifyMooveWebhook({ rawBody: Buffer.from('not json {'), headers, secret: SECRET, now: NOW }), { ok: false, status: 401 });
});

t.test('verify: an empty secret verifies nothing', async (t) => {
  t.match(verifyMooveWebhook({ ...signed(JSON.stringify(PAYLOAD), TS, ''), secret: '', now: NOW }), { ok: false, status: 401 });
});

t.test('extractLinkId accepts the documented places, in order, and nothing else', async (t) => {
  t.equal(extractLinkId({ data: { id: 'a' } }), 'a');
  t.equal(extractLinkId({ data: { paymentLinkId: 'b', id: 'tx' } }), 'b', 'explicit field wins over data.id');
  t.equal(extractLinkId({ data: { paymentLink: { id: 'c' }, id: 'tx' } }), 'c');
  t.equal(extractLinkId({ paymentLinkId: 'd' }), 'd');
  t.equal(extractLinkId({ paymentLink: { id: 'e' } }), 'e');
  t.equal(extractLinkId({ data: { id: 42 } }), '42');
  t.equal(extractLinkId({ id: 'evt_only' }), null, 'the event id is not a link id');
  t.equal(extractLinkId({ data: { id: '../../admin' } }), null, 'not id-shaped');
  t.equal(extractLinkId({ data: { id: { nested: true } } }), null);
  t.equal(extractLinkId(JSON.parse('{"__proto__":{"paymentLinkId":"polluted"}}')), null, 'no prototype lookups');
  t.equal(extractLinkId([LINK]), null);
  t.equal(extractLinkId(null), null);
});
