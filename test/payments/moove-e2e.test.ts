// The paid loop end to end with `payments.provider: moove` (SPEC §7.2–7.6): a real SDK client, the
// gateway in-process, the SDK paid upstream, and the local fake of the Moove API. Time moves forward
// only through the clock the gateway is given (the fake and the store keep real time).
import t, { type Test } from 'tap';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { request } from 'undici';
import { listCharges } from '../../src/admin.js';
import { createLogger } from '../../src/observability/logger.js';
import { hashHandle } from '../../src/paywall/handles.js';
import { MOOVE_WEBHOOK_PATH } from '../../src/payments/webhook.js';
import { startMooveFake, sendWebhook, type MooveFake } from '../helpers/moove-fake.js';
import { startPaidUpstream, type PaidUpstream } from '../helpers/paid-upstream.js';
import { startTestGateway, testConfig, type TestGateway } from '../helpers/gateway.js';
import { waitFor, wallClock } from '../helpers/clock.js';
import { webhookTriggersConcluded } from '../helpers/gateway-process.js';

const API_KEY = 'mk_live_e2e_7c1f_SECRET_KEY_DO_NOT_LEAK';
const WEBHOOK_SECRET = 'whsec_e2e_SECRET_DO_NOT_LEAK';
const MINUTE = 60_000;
const CHARGE_TTL = 60 * MINUTE; // the default payments.chargeTtl

interface Challenge {
  status: string;
  reason: string;
  checkoutUrl: string;
  expiresAt: string;
  retry: { tool: string; argument: string; value: string };
}

interface CallResult {
  isError?: boolean;
  content?: Array<{ type: string; text?: string }>;
  _meta?: Record<string, unknown>;
}

interface Rig {
  fake: MooveFake;
  upstream: PaidUpstream;
  gateway: TestGateway;
  client: Client;
  webhookUrl: string;
  /** Moves the gateway's clock forward. */
  travel: (ms: number) => void;
  call: (token?: string) => Promise<CallResult>;
  balance: (handle: string) => Promise<number>;
}

async function rig(t: Test, options: { webhookSecret?: string } = {}): Promise<Rig> {
  const fake = await startMooveFake({ apiKeys: [API_KEY] });
  t.teardown(() => fake.close());
  const upstream = await startPaidUpstream('stateless-json');
  t.teardown(() => upstream.close());
  let offset = 0;
  const gateway = await startTestGateway(
    t,
    testConfig(upstream.url, { payments: { provider: 'moove', moove: { apiKey: API_KEY, baseUrl: fake.url, webhookSecret: options.webhookSecret ?? WEBHOOK_SECRET } } }),
    { clock: wallClock(() => Date.now() + offset) },
  );
  const client = new Client({ name: 'moove-e2e', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(gateway.url)));
  t.teardown(() => client.close());
  return {
    fake,
    upstream,
    gateway,
    client,
    webhookUrl: `${gateway.origin}${MOOVE_WEBHOOK_PATH}`,
    travel: (ms) => {
      offset += ms;
    },
    call: async (token) =>
      (client.callTool({ name: 'fetch_readable', arguments: token === undefined ? { url: 'https://example.com/' } : { url: 'https://example.com/', tollboothToken: token } })),
    balance: async (handle) => (await gateway.store.getHandle(hashHandle(handle, gateway.config.handles.hashSecret)))?.balances.research ?? 0,
  };
}

function challengeOf(result: CallResult): Challenge {
  const meta = result._meta?.['xyz.tollbooth/challenge'] as Challenge | undefined;
  if (!meta) throw new Error(`not a challenge: ${JSON.stringify(result)}`);
  return meta;
}

const refusalOf = (result: CallResult): { reason?: string } | undefined => result._meta?.['xyz.tollbooth/refusal'] as { reason?: string } | undefined;
const linkIdOf = (checkoutUrl: string): string => checkoutUrl.slice(checkoutUrl.lastIndexOf('/') + 1);
const creates = (fake: MooveFake): number => fake.calls.filter((c) => c.method === 'POST').length;
const reads = (fake: MooveFake): number => fake.calls.filter((c) => c.method === 'GET').length;

/** Waits for something the gateway does in the background (the bound is only reached on failure). */
const until = (condition: () => Promise<boolean> | boolean, what: string): Promise<void> => waitFor(condition, what, { everyMs: 20 });

async function chargesListed(gateway: TestGateway, status: string): Promise<string[]> {
  const lines: string[] = [];
  await listCharges({ store: gateway.store, config: gateway.config, out: (line) => lines.push(line), logger: createLogger('silent') }, status);
  return lines;
}

// ---------------------------------------------------------------------------------------------

t.test('the challenge link is the Moove payment link, created with the key, the price and tb_<nonce>', async (t) => {
  const r = await rig(t);
  const opened = Date.now();
  const challenge = challengeOf(await r.call());
  t.equal(challenge.reason, 'payment_required');
  const [link] = [...r.fake.links.values()];
  t.ok(link, 'the fake holds one link');
  t.equal(challenge.checkoutUrl, `https://moove.xyz/@shop/pay/${link!.id}`, 'the checkout URL is the one Moove returned');
  const create = r.fake.requests.find((req) => req.method === 'POST');
  t.equal(create?.hadKey, true, 'created with X-API-Key');
  const body = create?.body as { toAmount: string; description: string; maxUsage: number; expirationDate: string };
  t.equal(body.toAmount, '5.00');
  t.equal(body.maxUsage, 1);
  t.match(body.description, /^tb_[A-Za-z0-9_-]{22} /, 'the description starts with tb_<nonce>');
  t.notOk(body.description.includes(challenge.retry.value), 'the handle is not in the description');
  const expires = Date.parse(body.expirationDate);
  t.ok(expires >= opened + CHARGE_TTL - 1_000 && expires <= Date.now() + CHARGE_TTL, 'the link expires after chargeTtl');
  t.equal(Date.parse(challenge.expiresAt), expires, 'the challenge shows the same expiry');
});

t.test('pay on Moove, then the retry runs the tool and spends one credit', async (t) => {
  const r = await rig(t);
  const challenge = challengeOf(await r.call());
  await r.fake.pay(linkIdOf(challenge.checkoutUrl), '5.00');
  const paid = await r.call(challenge.retry.value);
  t.not(paid.isError, true, 'the tool ran');
  t.same(paid._meta?.['xyz.tollbooth/receipt'], { sku: 'research', cost: 1, remaining: 2 });
  t.same(r.upstream.callsOf('fetch_readable').map((c) => c.arguments), [{ url: 'https://example.com/' }], 'the upstream never saw the token');
  t.equal(reads(r.fake), 1, 'the retry read the link once');
});

t.test('two concurrent retries after payment both run: the one without the poll slot waits for the other\'s read (§6.5)', async (t) => {
  const r = await rig(t, { webhookSecret: '' });
  const challenge = challengeOf(await r.call());
  await r.fake.pay(linkIdOf(challenge.checkoutUrl), '5.00');
  r.fake.readDelayMs = 400; // Moove answers slowly: the second retry arrives while the first is reading
  const [a, b] = await Promise.all([r.call(challenge.retry.value), r.call(challenge.retry.value)]);
  for (const result of [a, b]) {
    t.equal(result._meta?.['xyz.tollbooth/challenge'], undefined, 'no challenge: the link was just paid');
    t.not(result.isError, true, 'the tool ran');
  }
  t.equal(await r.balance(challenge.retry.value), 1, 'one pack of 3 granted, two credits spent');
  t.equal(reads(r.fake), 1, 'one provider read served both');
});

t.test('a retry before paying is challenged again with the same link, and opens no second link', async (t) => {
  const r = await rig(t);
  const first = challengeOf(await r.call());
  const again = challengeOf(await r.call(first.retry.value));
  t.equal(again.reason, 'payment_required');
  t.equal(again.checkoutUrl, first.checkoutUrl);
  t.equal(creates(r.fake), 1);
});

t.test('webhook: a signed delivery settles the charge before any retry; the retry then needs no read', async (t) => {
  const r = await rig(t);
  r.fake.webhookTarget = { url: r.webhookUrl, secret: WEBHOOK_SECRET };
  const challenge = challengeOf(await r.call());
  await r.fake.pay(linkIdOf(challenge.checkoutUrl), '5.00'); // delivers the webhook and waits for its 2xx
  await until(async () => (await r.balance(challenge.retry.value)) === 3, 'the webhook-triggered settlement');
  t.equal(reads(r.fake), 1, 'the webhook re-read the link from the API');
  const paid = await r.call(challenge.retry.value);
  t.not(paid.isError, true);
  t.equal(reads(r.fake), 1, 'the retry found the credits without asking Moove');
});

t.test('webhook: duplicate and out-of-order deliveries are acknowledged and grant once', async (t) => {
  const r = await rig(t);
  const challenge = challengeOf(await r.call());
  const linkId = linkIdOf(challenge.checkoutUrl);
  const event = (status: string) => ({ id: 'evt_1', type: `payment_link.${status}`, data: { id: linkId, paymentLinkId: linkId, status, receivedAmount: '5' } });
  // A delivery claiming "completed" before the payment is not evidence: the link still reads active.
  t.equal((await sendWebhook(r.webhookUrl, WEBHOOK_SECRET, event('completed'))).status, 200);
  await until(() => reads(r.fake) === 1, 'the first re-read');
  t.equal(await r.balance(challenge.retry.value), 0, 'a payload saying completed grants nothing by itself');
  await r.fake.pay(linkId, '5.00');
  const deliveries = await Promise.all([event('completed'), event('completed'), event('created')].map((payload) => sendWebhook(r.webhookUrl, WEBHOOK_SECRET, payload, { eventId: 'evt_1' })));
  t.same(deliveries.map((d) => d.status), [200, 200, 200]);
  await until(() => reads(r.fake) >= 2, 'the re-reads');
  t.equal(await webhookTriggersConcluded([r.gateway.origin]), 4, 'every delivery\'s trigger has concluded');
  t.equal(await r.balance(challenge.retry.value), 3, 'one pack, not three');
  t.equal(r.gateway.logs().filter((line) => line.evt === 'settlement').length, 1, 'one settlement');
});

t.test('webhook: a replayed signed delivery (same moove-event-id) is acknowledged and triggers no provider read', async (t) => {
  const r = await rig(t);
  const challenge = challengeOf(await r.call());
  const linkId = linkIdOf(challenge.checkoutUrl);
  const payload = { id: 'evt_replayed', type: 'payment_link.completed', data: { id: linkId, paymentLinkId: linkId, status: 'completed', receivedAmount: '5' } };
  t.equal((await sendWebhook(r.webhookUrl, WEBHOOK_SECRET, payload, { eventId: 'evt_replayed' })).status, 200);
  await until(() => reads(r.fake) === 1, 'the first delivery re-reads the link');
  const replays = await Promise.all(Array.from({ length: 5 }, () => sendWebhook(r.webhookUrl, WEBHOOK_SECRET, payload, { eventId: 'evt_replayed' })));
  t.same(replays.map((d) => d.status), [200, 200, 200, 200, 200], 'every replay is acknowledged');
  t.equal(await webhookTriggersConcluded([r.gateway.origin]), 6, 'the first delivery and every replay have concluded');
  t.equal(reads(r.fake), 1, 'no replay reached Moove');
  t.equal((await sendWebhook(r.webhookUrl, WEBHOOK_SECRET, payload, { eventId: 'evt_next' })).status, 200);
  await until(() => reads(r.fake) === 2, 'a new event id re-reads the link');
});

t.test('webhook: a delivery about a link the gateway never opened is acknowledged, read once (a payment for it would be kept as an orphan), and changes nothing', async (t) => {
  const r = await rig(t);
  const delivery = await sendWebhook(r.webhookUrl, WEBHOOK_SECRET, { id: 'evt_x', data: { paymentLinkId: 'not-ours' } });
  t.equal(delivery.status, 200);
  t.equal(await webhookTriggersConcluded([r.gateway.origin]), 1, 'its trigger has concluded');
  // A failover can erase a charge whose link was paid: the provider is asked once, so a real payment is
  // kept for the operator (tollbooth charges orphans). This link is unknown to the provider too.
  t.equal(reads(r.fake), 1, 'one read of a link with no charge');
  t.same(await r.gateway.store.listOrphanPayments(), [], 'nothing the provider calls paid: no orphan');
});

t.test('webhook: a bad signature gets 401 JSON and triggers nothing', async (t) => {
  const r = await rig(t);
  const challenge = challengeOf(await r.call());
  await r.fake.pay(linkIdOf(challenge.checkoutUrl), '5.00');
  const delivery = await sendWebhook(r.webhookUrl, 'whsec_someone_else', { id: 'evt_2', data: { paymentLinkId: linkIdOf(challenge.checkoutUrl) } });
  t.equal(delivery.status, 401);
  t.type((delivery.body as { error?: unknown }).error, 'string');
  // A trigger starts before the answer is sent: with none running and none concluded, none ever ran.
  t.equal(await webhookTriggersConcluded([r.gateway.origin]), 0, 'no trigger ran');
  t.equal(reads(r.fake), 0);
  t.equal(await r.balance(challenge.retry.value), 0);
});

t.test('webhook: 503 "webhooks not configured" when the secret is empty; polling still settles', async (t) => {
  const r = await rig(t, { webhookSecret: '' });
  const challenge = challengeOf(await r.call());
  const delivery = await sendWebhook(r.webhookUrl, WEBHOOK_SECRET, { id: 'evt_3', data: { paymentLinkId: linkIdOf(challenge.checkoutUrl) } });
  t.equal(delivery.status, 503);
  t.same(delivery.body, { error: 'webhooks not configured' });
  await r.fake.pay(linkIdOf(challenge.checkoutUrl), '5.00');
  t.not((await r.call(challenge.retry.value)).isError, true, 'the retry polls and settles');
});

t.test('webhook: other methods get 405', async (t) => {
  const r = await rig(t);
  const response = await request(r.webhookUrl, { method: 'GET' });
  t.equal(response.statusCode, 405);
  t.equal(response.headers.allow, 'POST');
  await response.body.dump();
});

t.test('underpaid: nothing granted, the next challenge says underpaid with a new link, the old charge is listed', async (t) => {
  const r = await rig(t);
  const first = challengeOf(await r.call());
  await r.fake.pay(linkIdOf(first.checkoutUrl), '0.10');
  const second = challengeOf(await r.call(first.retry.value));
  t.equal(second.reason, 'underpaid');
  t.not(second.checkoutUrl, first.checkoutUrl, 'a new link');
  t.equal(second.retry.value, first.retry.value, 'the same handle');
  const third = challengeOf(await r.call(first.retry.value));
  t.equal(third.checkoutUrl, second.checkoutUrl, 'the underpaid link is never shown again');
  t.equal(creates(r.fake), 2);
  t.equal(r.upstream.callsOf('fetch_readable').length, 0, 'the tool never ran');

  const underpaid = await chargesListed(r.gateway, 'underpaid');
  t.equal(underpaid.length, 2, 'a header and one row');
  t.match(underpaid[1], /underpaid\s+research\s+5\.00\s+0\.1\s+USDC\s+3\s+0/, "amount due, received, currency, credits, granted");
  t.notOk(underpaid.join('\n').includes(linkIdOf(first.checkoutUrl)), 'the listing shows no link id');
});

t.test('a partial payment grants pro rata and the receipt shows it', async (t) => {
  const r = await rig(t);
  const challenge = challengeOf(await r.call());
  await r.fake.pay(linkIdOf(challenge.checkoutUrl), '3.40'); // floor(3 × 3.4 / 5) = 2
  const paid = await r.call(challenge.retry.value);
  t.same(paid._meta?.['xyz.tollbooth/receipt'], { sku: 'research', cost: 1, remaining: 1 });
});

t.test('expired link: the retry gets payment_required with a new link', async (t) => {
  const r = await rig(t);
  const first = challengeOf(await r.call());
  r.travel(CHARGE_TTL);
  const second = challengeOf(await r.call(first.retry.value));
  t.equal(second.reason, 'payment_required');
  t.not(second.checkoutUrl, first.checkoutUrl, 'a new link');
  t.ok(Date.parse(second.expiresAt) > Date.parse(first.expiresAt), 'with a later expiry');
  t.equal(creates(r.fake), 2);
});

t.test('late payment: after the reconciler abandoned the charge, a webhook still grants it', async (t) => {
  const r = await rig(t);
  const first = challengeOf(await r.call());
  r.travel(CHARGE_TTL + MINUTE);
  await r.gateway.reconciler.tick();
  t.same((await r.gateway.store.listCharges('abandoned')).length, 1, 'abandoned');
  r.fake.webhookTarget = { url: r.webhookUrl, secret: WEBHOOK_SECRET };
  await r.fake.pay(linkIdOf(first.checkoutUrl), '5.00');
  await until(async () => (await r.balance(first.retry.value)) === 3, 'the late settlement');
  t.not((await r.call(first.retry.value)).isError, true, 'the tool runs');
});

t.test('late payment: after the reconciler abandoned the charge, polling only, the next retry still grants it', async (t) => {
  const r = await rig(t, { webhookSecret: '' });
  const first = challengeOf(await r.call());
  r.travel(CHARGE_TTL + MINUTE);
  await r.gateway.reconciler.tick();
  t.same((await r.gateway.store.listCharges('abandoned')).length, 1, 'abandoned');
  r.travel(5_000);
  await r.fake.pay(linkIdOf(first.checkoutUrl), '5.00');
  const paid = await r.call(first.retry.value);
  t.not(paid.isError, true, 'the money that arrived is not ignored');
  t.same(paid._meta?.['xyz.tollbooth/receipt'], { sku: 'research', cost: 1, remaining: 2 });
  t.equal((await r.gateway.store.listCharges('settled')).length, 1);
});

t.test('dead link: a link Moove reports inactive before chargeTtl is never shown again; a late payment on it is still granted', async (t) => {
  const r = await rig(t, { webhookSecret: '' });
  const first = challengeOf(await r.call());
  r.fake.expire(linkIdOf(first.checkoutUrl)); // inactive long before our chargeTtl
  r.travel(3_000);
  const second = challengeOf(await r.call(first.retry.value));
  t.equal(second.reason, 'payment_required');
  t.not(second.checkoutUrl, first.checkoutUrl, 'a new link, not the dead one');
  t.equal(second.retry.value, first.retry.value, 'the same handle');
  r.travel(3_000);
  t.equal(challengeOf(await r.call(first.retry.value)).checkoutUrl, second.checkoutUrl, 'and the new link is the one shown from now on');
  t.equal(creates(r.fake), 2);

  await r.fake.pay(linkIdOf(first.checkoutUrl), '5.00'); // the payer still managed to pay the old one
  r.travel(3_000);
  const paid = await r.call(first.retry.value);
  t.not(paid.isError, true, 'the late payment on the dead link is granted');
  t.same(paid._meta?.['xyz.tollbooth/receipt'], { sku: 'research', cost: 1, remaining: 2 });
  t.equal(creates(r.fake), 2, 'no third link');
});

t.test('dead link: a link Moove answers 404 for before chargeTtl is abandoned and the next challenge opens a new link', async (t) => {
  const r = await rig(t, { webhookSecret: '' });
  const first = challengeOf(await r.call());
  r.fake.remove(linkIdOf(first.checkoutUrl));
  r.travel(3_000);
  const second = challengeOf(await r.call(first.retry.value));
  t.equal(second.reason, 'payment_required');
  t.not(second.checkoutUrl, first.checkoutUrl, 'a new link');
  t.equal((await r.gateway.store.listCharges('abandoned')).length, 1, 'the dead charge is abandoned');
});

t.test('unreadable: past its TTL, a charge Moove will not answer for gives way to a new link, not payments_unavailable', async (t) => {
  const r = await rig(t, { webhookSecret: '' });
  const first = challengeOf(await r.call());
  r.fake.failNext(100_000, { status: 503 }, { method: 'GET', path: `/v1/payment-link/${linkIdOf(first.checkoutUrl)}` });
  r.travel(CHARGE_TTL);
  const second = await r.call(first.retry.value);
  t.equal(refusalOf(second), undefined, 'not refused');
  const challenge = challengeOf(second);
  t.not(challenge.checkoutUrl, first.checkoutUrl, 'a new link');
  t.ok(Date.parse(challenge.expiresAt) > r.gateway.config.payments.chargeTtl + Date.parse(first.expiresAt) - CHARGE_TTL, 'with a later expiry');
  r.travel(3_000);
  t.equal(challengeOf(await r.call(first.retry.value)).checkoutUrl, challenge.checkoutUrl, 'the next retry shows the new link again, no flapping');
});

t.test('late payment: polling only, a payment on an older abandoned charge of the handle is granted by the reconciler', async (t) => {
  const r = await rig(t, { webhookSecret: '' });
  const first = challengeOf(await r.call());
  r.travel(CHARGE_TTL + MINUTE);
  await r.gateway.reconciler.tick();
  const second = challengeOf(await r.call(first.retry.value));
  t.not(second.checkoutUrl, first.checkoutUrl);
  r.travel(CHARGE_TTL + MINUTE);
  await r.gateway.reconciler.tick();
  t.equal((await r.gateway.store.listCharges('abandoned')).length, 2, 'two abandoned charges on one handle');

  await r.fake.pay(linkIdOf(first.checkoutUrl), '5.00'); // the older one, not the handle's last charge
  for (let hour = 0; hour < 3 && (await r.balance(first.retry.value)) === 0; hour++) {
    r.travel(60 * MINUTE);
    await r.gateway.reconciler.tick();
  }
  t.equal(await r.balance(first.retry.value), 3, 'granted within the 1 h cap of the slow backoff');
  for (let i = 0; i < 3; i++) {
    r.travel(60 * MINUTE);
    await r.gateway.reconciler.tick();
  }
  t.equal(await r.balance(first.retry.value), 3, 'exactly once');
  const paid = await r.call(first.retry.value);
  t.same(paid._meta?.['xyz.tollbooth/receipt'], { sku: 'research', cost: 1, remaining: 2 });
});

t.test('account not ready (409): refused payments_unavailable, never retried, one operator line over several calls', async (t) => {
  const r = await rig(t);
  r.fake.accountNotReady = true;
  for (let i = 0; i < 4; i++) {
    const result = await r.call();
    t.equal(result.isError, true);
    t.equal(refusalOf(result)?.reason, 'payments_unavailable', `call ${i + 1} refused payments_unavailable`);
    t.match(result.content?.[0]?.text ?? '', /no credit was spent/);
  }
  t.equal(creates(r.fake), 4, 'one create per call: a 409 is never retried');
  const notices = r.gateway.logs().filter((line) => line.evt === 'provider_action_needed');
  t.equal(notices.length, 1, 'exactly one operator-facing line');
  t.equal(notices[0]?.code, 'PAYMENT_LINK_ACCOUNT_NOT_READY');
  t.match(String(notices[0]?.msg), /handle/);
  t.match(String(notices[0]?.msg), /default wallet/);
  t.notOk(r.gateway.logText().includes(API_KEY), 'the key is not logged');

  r.fake.accountNotReady = false; // the operator fixed the account: no restart needed
  t.equal(challengeOf(await r.call()).reason, 'payment_required');
  const health = await request(`${r.gateway.origin}/healthz`);
  t.equal(health.statusCode, 200, 'still running');
  await health.body.dump();
});

t.test('429 and 5xx on create are retried and the challenge still arrives', async (t) => {
  const r = await rig(t);
  r.fake.failNext(1, { status: 429 }, { method: 'POST' });
  r.fake.failNext(1, { status: 503 }, { method: 'POST' });
  const challenge = challengeOf(await r.call());
  t.equal(challenge.reason, 'payment_required');
  t.same(
    r.fake.requests.filter((req) => req.method === 'POST').map((req) => req.answer),
    [429, 503, 201],
  );
});

t.test('a Moove that stays down makes the call a payments_unavailable refusal, not a hang', async (t) => {
  const r = await rig(t);
  r.fake.failNext(100, { status: 500 }, { method: 'POST' });
  const started = Date.now();
  const result = await r.call();
  t.equal(refusalOf(result)?.reason, 'payments_unavailable');
  t.equal(creates(r.fake), 4, 'at most 4 tries');
  t.ok(Date.now() - started < r.gateway.config.upstream.callDeadline, 'well inside the call deadline');
});

t.test('provider moove with an empty apiKey refuses to start and says which key to set', async (t) => {
  const upstream = await startPaidUpstream('stateless-json');
  t.teardown(() => upstream.close());
  await t.rejects(
    startTestGateway(t, testConfig(upstream.url, { payments: { provider: 'moove', moove: { apiKey: '', baseUrl: 'http://127.0.0.1:9' } } })),
    /apiKey[\s\S]*MOOVE_API_KEY/,
  );
});

t.test('no secret reaches the logs over a whole paid loop', async (t) => {
  const r = await rig(t);
  r.fake.webhookTarget = { url: r.webhookUrl, secret: WEBHOOK_SECRET };
  const challenge = challengeOf(await r.call());
  const linkId = linkIdOf(challenge.checkoutUrl);
  await r.fake.pay(linkId, '5.00');
  await until(async () => (await r.balance(challenge.retry.value)) === 3, 'the settlement');
  await r.call(challenge.retry.value);
  const text = r.gateway.logText();
  for (const secret of [API_KEY, WEBHOOK_SECRET, challenge.retry.value, linkId, challenge.checkoutUrl]) t.notOk(text.includes(secret), 'a secret is absent from the logs');
});
