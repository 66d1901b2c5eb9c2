// The Moove webhook receiver route on a real fastify over HTTP (src/http/moove-webhook.ts).
import { Writable } from 'node:stream';
import Fastify from 'fastify';
import t from 'tap';
import { request } from 'undici';
import { registerMooveWebhookRoute } from '../../src/http/moove-webhook.js';
import { createLogger } from '../../src/observability/logger.js';
import { createMetrics } from '../../src/observability/metrics.js';
import { sumCounter } from '../helpers/gateway-process.js';
import { MOOVE_WEBHOOK_PATH } from '../../src/payments/webhook.js';
import { sendWebhook, signWebhook, startMooveFake } from '../helpers/moove-fake.js';

// Helpers only register teardowns, so they take just that part of a test.
type Tap = Pick<typeof t, 'teardown'>;

const SECRET = 'whsec_test_0123456789abcdef';
const LINK = '7d3f0a52-9c1e-4b8e-a1f2-3c4d5e6f7a8b';
const PAYLOAD = { id: 'evt_1', type: 'payment_link.completed', data: { id: LINK, status: 'completed' } };

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

t.test('route: each trigger is counted once when it concludes: handled, replay or failed', async (t) => {
  const metrics = createMetrics(async () => 0);
  const seen = new Set<string>();
  const app = Fastify();
  registerMooveWebhookRoute(app, {
    secret: SECRET,
    logger: createLogger('silent'),
    metrics,
    claimEvent: async (eventId) => !seen.has(eventId) && Boolean(seen.add(eventId)),
    onLink: async (linkId) => {
      if (linkId === 'boom') throw new Error('store down');
    },
  });
  const address = await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(() => app.close());
  const url = `${address}${MOOVE_WEBHOOK_PATH}`;
  const event = (id: string, link: string): string => JSON.stringify({ id, type: 'payment_link.completed', data: { id: link, status: 'completed' } });
  for (const [id, link] of [['e1', LINK], ['e1', LINK], ['e2', 'boom'], ['e3', LINK]] as const) {
    t.equal((await sendWebhook(url, SECRET, null, { rawBody: event(id, link), eventId: id })).status, 200);
  }
  const count = async (outcome: string): Promise<number> => sumCounter(await metrics.registry.metrics(), 'tollbooth_webhook_triggers_total', { provider: 'moove', outcome });
  const total = async (): Promise<number> => sumCounter(await metrics.registry.metrics(), 'tollbooth_webhook_triggers_total');
  for (let i = 0; i < 200 && (await total()) < 4; i++) await new Promise((resolve) => setTimeout(resolve, 10));
  t.same([await count('handled'), await count('replay'), await count('failed')], [2, 1, 1]);
  t.equal(sumCounter(await metrics.registry.metrics(), 'tollbooth_webhook_triggers_running'), 0, 'none still running');
});

t.test('route: a trigger counts as running from before the answer until it concludes', async (t) => {
  const metrics = createMetrics(async () => 0);
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  const app = Fastify();
  registerMooveWebhookRoute(app, { secret: SECRET, logger: createLogger('silent'), metrics, onLink: () => gate });
  const address = await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(() => app.close());
  const running = async (): Promise<number> => sumCounter(await metrics.registry.metrics(), 'tollbooth_webhook_triggers_running');
  t.equal((await sendWebhook(`${address}${MOOVE_WEBHOOK_PATH}`, SECRET, PAYLOAD)).status, 200);
  t.equal(await running(), 1, 'running as soon as the answer arrived');
  release();
  for (let i = 0; i < 200 && (await running()) > 0; i++) await new Promise((resolve) => setTimeout(resolve, 10));
  t.equal(await running(), 0, 'and not once it concluded');
  t.equal(sumCounter(await metrics.registry.metrics(), 'tollbooth_webhook_triggers_total', { outcome: 'handled' }), 1);
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
