// Exactly once through a real gateway (SPEC §7.5): signed webhooks, agent retries and reconciler
// passes all race on one completed Moove charge. One grant means exactly the pack's worth of calls
// reaches the upstream, whichever observer won; a double grant would let more through.
import t from 'tap';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { request } from 'undici';
import { MOOVE_WEBHOOK_PATH } from '../../src/payments/webhook.js';
import { startMooveFake, sendWebhook } from '../helpers/moove-fake.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';
import { startTestGateway, testConfig } from '../helpers/gateway.js';
import { wallClock } from '../helpers/clock.js';
import { webhookTriggersConcluded } from '../helpers/gateway-process.js';

const API_KEY = 'mk_test_race_key';
const WEBHOOK_SECRET = 'whsec_race';
const PACK_CREDITS = 3; // testConfig's research SKU

type CallResult = { isError?: boolean; _meta?: Record<string, unknown> };

function metricValue(exposition: string, name: string, labels: Record<string, string>): number {
  const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  const line = exposition.split('\n').find((l) => l.startsWith(`${name}{`) && wanted.every((w) => l.includes(w)));
  return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : 0;
}

t.test('webhooks + retries + reconciler racing on one paid charge make one grant', async (t) => {
  const fake = await startMooveFake({ apiKeys: [API_KEY] });
  t.teardown(() => fake.close());
  const upstream = await startPaidUpstream('stateless-json');
  t.teardown(() => upstream.close());
  let offset = 0;
  const gateway = await startTestGateway(
    t,
    testConfig(upstream.url, { payments: { provider: 'moove', moove: { apiKey: API_KEY, baseUrl: fake.url, webhookSecret: WEBHOOK_SECRET } } }),
    { clock: wallClock(() => Date.now() + offset) },
  );
  const client = new Client({ name: 'race', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(gateway.url)));
  t.teardown(() => client.close());
  const call = async (token?: string): Promise<CallResult> =>
    (client.callTool({ name: 'fetch_readable', arguments: token === undefined ? { url: 'https://example.com/' } : { url: 'https://example.com/', tollboothToken: token } }));

  const challenge = (await call())._meta?.['xyz.tollbooth/challenge'] as { checkoutUrl: string; retry: { value: string } };
  const linkId = challenge.checkoutUrl.slice(challenge.checkoutUrl.lastIndexOf('/') + 1);
  const handle = challenge.retry.value;
  await fake.pay(linkId, '5.00');
  offset += 3_000; // the charge is now due for the reconciler's first poll

  const webhookUrl = `${gateway.origin}${MOOVE_WEBHOOK_PATH}`;
  const payload = { id: 'evt_race', type: 'payment_link.completed', data: { id: linkId, paymentLinkId: linkId, status: 'completed' } };
  const racers: Array<Promise<unknown>> = [];
  for (let i = 0; i < 10; i++) {
    racers.push(sendWebhook(webhookUrl, WEBHOOK_SECRET, payload, { eventId: 'evt_race' }));
    racers.push(call(handle));
    racers.push(gateway.reconciler.tick());
  }
  const settled = await Promise.all(racers);
  const retries = settled.filter((_, i) => i % 3 === 1) as CallResult[];
  t.ok(retries.some((r) => r.isError !== true), 'at least one racing retry ran the tool');

  // Wait until every acknowledged webhook's trigger has concluded (handled, replay or failed), so a late
  // grant from one of them is counted below; then spend what is left until the gateway challenges again.
  const webhooks = settled.filter((_, i) => i % 3 === 0) as Array<{ status: number }>;
  t.same(webhooks.map((w) => w.status), Array<number>(10).fill(200), 'every webhook was acknowledged');
  t.equal(await webhookTriggersConcluded([gateway.origin]), webhooks.length, 'every webhook trigger has concluded');
  let last: CallResult | undefined;
  for (let i = 0; i < PACK_CREDITS + 2; i++) {
    last = await call(handle);
    if (last.isError === true) break;
  }
  t.equal(upstream.callsOf('fetch_readable').length, PACK_CREDITS, 'exactly one pack of calls reached the upstream');
  t.equal((last?._meta?.['xyz.tollbooth/challenge'] as { reason?: string } | undefined)?.reason, 'credits_exhausted', 'then the handle is challenged again');

  const scrape = await request(`${gateway.origin}/metrics`);
  const exposition = await scrape.body.text();
  t.equal(metricValue(exposition, 'tollbooth_settlements_total', { sku: 'research', result: 'granted' }), 1, 'one settlement counted');
  t.equal(metricValue(exposition, 'tollbooth_credits_total', { sku: 'research', kind: 'granted' }), PACK_CREDITS, 'one pack of credits granted');
  t.equal(gateway.logs().filter((line) => line.evt === 'settlement').length, 1, 'one settlement log line');
  t.ok(fake.calls.filter((c) => c.method === 'GET').length >= 2, 'several observers really read the link');
});
