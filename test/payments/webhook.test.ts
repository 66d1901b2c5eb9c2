// Moove webhook verification (pure function) and the receiver route on a real fastify over HTTP.
import { Writable } from 'node:stream';
import Fastify from 'fastify';
import t from 'tap';
import { request } from 'undici';
import { createLogger } from '../../src/observability/logger.js';
import { extractLinkId, registerMooveWebhookRoute, verifyMooveWebhook, MOOVE_WEBHOOK_PATH } from '../../src/payments/webhook.js';
import { sendWebhook, signWebhook, startMooveFake } from '../helpers/moove-fake.js';

// Helpers only register teardowns, so they take just that part of a test.
type Tap = Pick<typeof t, 'teardown'>;

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

// ── the route over HTTP ──────────────────────────────────────────────────────────────────────

interface Receiver {
  url: string;
  linkIds: string[];
  logs: () => string;
}

async function receiver(t: Tap, options: { secret?: string; onLink?: (linkId: string) => Promise<void> } = {}): Promise<Receiver> {
  const linkIds: string[] = [];
  let raw = '';
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      raw += chunk.toString();
      done();
    },
  });
  const app = Fastify();
  registerMooveWebhookRoute(app, {
    secret: options.secret ?? SECRET,
    logger: createLogger('debug', sink),
    onLink:
      options.onLink ??
      (async (linkId) => {
        linkIds.push(linkId);
      }),
  });
  // A sibling route keeps the default JSON parser: the webhook's raw parser is scoped.
  app.post('/json', async (req) => ({ parsed: req.body }));
  const address = await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(() => app.close());
  return { url: `${address}${MOOVE_WEBHOOK_PATH}`, linkIds, logs: () => raw };
}

async function post(url: string, body: string | Buffer, headers: Record<string, string> = {}): Promise<{ status: number; body: unknown }> {
  const response = await request(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
  return { status: response.statusCode, body: await response.body.json() };
}

const waitFor = async (check: () => boolean, ms = 2_000): Promise<void> => {
  const until = Date.now() + ms;
  while (!check() && Date.now() < until) await new Promise((resolve) => setTimeout(resolve, 10));
};

t.test('route: a signed delivery answers 200 {ok:true} and triggers onLink with the link id', async (t) => {
  const r = await receiver(t);
  const delivery = await sendWebhook(r.url, SECRET, PAYLOAD);
  t.same([delivery.status, delivery.body], [200, { ok: true }]);
  await waitFor(() => r.linkIds.length > 0);
  t.same(r.linkIds, [LINK]);
});

t.test('route: answers within 1 s even when onLink takes 3 s', async (t) => {
  let finished = false;
  const r = await receiver(t, {
    onLink: async () => {
      await new Promise((resolve) => setTimeout(resolve, 3_000));
      finished = true;
    },
  });
  const delivery = await sendWebhook(r.url, SECRET, PAYLOAD);
  t.equal(delivery.status, 200);
  t.ok(delivery.ms < 1_000, `answered in ${Math.round(delivery.ms)} ms`);
  t.notOk(finished, 'onLink was still running when the answer arrived');
});

t.test('route: duplicate deliveries trigger onLink each time', async (t) => {
  const r = await receiver(t);
  const body = JSON.stringify(PAYLOAD);
  for (let i = 0; i < 3; i += 1) t.equal((await sendWebhook(r.url, SECRET, null, { rawBody: body, eventId: 'evt_same' })).status, 200);
  await waitFor(() => r.linkIds.length >= 3);
  t.same(r.linkIds, [LINK, LINK, LINK]);
});

t.test('route: a failing onLink is logged without the link id, and the delivery still got 200', async (t) => {
  const r = await receiver(t, {
    onLink: async (linkId) => {
      throw new Error(`store exploded while settling ${linkId}`);
    },
  });
  t.equal((await sendWebhook(r.url, SECRET, PAYLOAD)).status, 200);
  await waitFor(() => r.logs().includes('handling a Moove webhook failed'));
  t.match(r.logs(), /store exploded while settling \[link\]/);
  t.notOk(r.logs().includes(LINK), 'the link id is never logged');
});

t.test('route: a signed delivery naming no link is acknowledged and triggers nothing', async (t) => {
  const r = await receiver(t);
  t.equal((await sendWebhook(r.url, SECRET, { id: 'evt_2', type: 'ping' })).status, 200);
  await new Promise((resolve) => setTimeout(resolve, 50));
  t.same(r.linkIds, []);
});

t.test('route: bad, missing or stale signatures get 401 JSON and trigger nothing', async (t) => {
  const r = await receiver(t);
  t.match(await sendWebhook(r.url, 'whsec_wrong', PAYLOAD), { status: 401, body: { error: /does not match/ } });
  t.match(await post(r.url, JSON.stringify(PAYLOAD)), { status: 401, body: { error: /missing/ } });
  t.match(await sendWebhook(r.url, SECRET, PAYLOAD, { timestamp: Math.floor(Date.now() / 1000) - 301 }), { status: 401, body: { error: /tolerance/ } });
  t.same(r.linkIds, []);
});

t.test('route: a signed body that is not JSON gets 400 JSON, whatever its content type', async (t) => {
  const r = await receiver(t);
  const ts = Math.floor(Date.now() / 1000);
  const body = 'definitely { not json';
  for (const contentType of ['application/json', 'text/plain', 'application/octet-stream']) {
    const result = await post(r.url, body, { 'content-type': contentType, 'moove-timestamp': String(ts), 'moove-signature': signWebhook(SECRET, body, ts) });
    t.match(result, { status: 400, body: { error: /not JSON/ } }, contentType);
  }
});

t.test('route: the signature is checked on the raw bytes, not a re-serialisation', async (t) => {
  const r = await receiver(t);
  const body = `{ "data" :{"id":"${LINK}"},  "x": 1.50 }`; // whitespace and a number JSON.stringify would rewrite
  t.equal((await sendWebhook(r.url, SECRET, null, { rawBody: body })).status, 200);
  await waitFor(() => r.linkIds.length > 0);
  t.same(r.linkIds, [LINK]);
});

t.test('route: a body over 64 KiB gets 413 JSON; exactly 64 KiB is read', async (t) => {
  const r = await receiver(t);
  const padded = (size: number): string => {
    const base = JSON.stringify({ data: { id: LINK }, pad: '' });
    return base.replace('"pad":""', `"pad":"${'x'.repeat(size - base.length)}"`);
  };
  const over = await sendWebhook(r.url, SECRET, null, { rawBody: padded(64 * 1024 + 1) });
  t.equal(over.status, 413);
  t.match(over.body, { error: /64|65536/ });
  const limit = await sendWebhook(r.url, SECRET, null, { rawBody: padded(64 * 1024) });
  t.equal(limit.status, 200);
});

t.test('route: 503 {"error":"webhooks not configured"} when the secret is empty', async (t) => {
  const r = await receiver(t, { secret: '' });
  const delivery = await sendWebhook(r.url, '', PAYLOAD);
  t.same([delivery.status, delivery.body], [503, { error: 'webhooks not configured' }]);
  t.same(r.linkIds, []);
});

t.test('route: other methods get 405 JSON with Allow: POST', async (t) => {
  const r = await receiver(t);
  for (const method of ['GET', 'PUT', 'DELETE', 'PATCH'] as const) {
    const response = await request(r.url, { method });
    t.equal(response.statusCode, 405, method);
    t.equal(response.headers.allow, 'POST');
    t.match(await response.body.json(), { error: /POST/ });
  }
  const head = await request(r.url, { method: 'HEAD' });
  await head.body.dump();
  t.equal(head.statusCode, 405, 'HEAD');
});

t.test('route: the raw-body parser does not leak into the rest of the app', async (t) => {
  const r = await receiver(t);
  const result = await post(r.url.replace(MOOVE_WEBHOOK_PATH, '/json'), '{"a":1}');
  t.same(result, { status: 200, body: { parsed: { a: 1 } } });
});

t.test('route: end to end with the fake paying a link', async (t) => {
  const r = await receiver(t);
  const fake = await startMooveFake();
  t.teardown(() => fake.close());
  fake.webhookTarget = { url: r.url, secret: SECRET };
  const created = await request(`${fake.url}/v1/payment-link`, {
    method: 'POST',
    headers: { 'x-api-key': 'test-key', 'content-type': 'application/json' },
    body: JSON.stringify({ toAmount: '5.00', description: 'tb_x', maxUsage: 1, expirationDate: new Date(Date.now() + 3_600_000).toISOString() }),
  });
  const { id } = (await created.body.json()) as { id: string };
  await fake.pay(id, '5.00');
  await waitFor(() => r.linkIds.length > 0);
  t.same(r.linkIds, [id]);
});
