// Settlement exactly once across processes (SPEC §7.5): one completed Moove charge observed by 50
// concurrent observers — agent retries and signed webhooks spread over three gateway processes, a
// reconciler pass, and observers in this process that claim on a stale record — grants the pack once.
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { Agent } from 'undici';
import { createLogger } from '../../src/observability/logger.js';
import { createMetrics } from '../../src/observability/metrics.js';
import { MooveProvider } from '../../src/payments/moove.js';
import { Reconciler } from '../../src/payments/reconciler.js';
import { Settler } from '../../src/payments/settle.js';
import { balanceOf, callTool, connectStore, redisGatewayConfig, scrape, startGatewayProcess, sumCounter, tally, waitForNoReservations, webhookTriggersConcluded } from '../helpers/gateway-process.js';
import { sendWebhook, startMooveFake } from '../helpers/moove-fake.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';
import { startRedis } from '../helpers/redis-server.js';
import { systemClock } from '../../src/clock.js';

const PACK = 20;
const REPLICAS = 3;
const RETRIES = 20;
const WEBHOOKS = 20;
const RECONCILER_PASSES = 2;
const STALE_OBSERVERS = 8; // observers holding the charge as read before payment: each reads the link and claims
const WEBHOOK_SECRET = 'race-webhook-secret';

t.test('50 concurrent observers of one completed charge across 3 processes grant it exactly once', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const upstream = await startPaidUpstream('stateless-json');
  t.teardown(() => upstream.close());
  const moove = await startMooveFake();
  t.teardown(() => moove.close());
  const keyPrefix = `tbrace${randomBytes(3).toString('hex')}:`;
  const target = { url: redis.url };
  const store = await connectStore(t, target, keyPrefix);

  // The reconciler of this test process takes the lease before any gateway exists and keeps it, so
  // the reconciler pass in the race is a real one (the gateways' reconcilers stand by).
  const logger = createLogger('silent');
  const metrics = createMetrics(() => store.countPendingCharges());
  const provider = new MooveProvider({ apiKey: 'test-key', baseUrl: moove.url, logger, metrics });
  t.teardown(() => provider.close());
  const settler = new Settler({ store, provider, policy: { tolerance: 0.005, minimumFraction: 0.1 }, metrics, logger, clock: systemClock });
  // A long lease (3 × the interval): a stall of this process on a loaded runner must not hand it to a gateway.
  const reconciler = new Reconciler({ store, provider, settler, metrics, logger, intervalMs: 5_000 });
  t.ok((await reconciler.tick()).leader, 'the test reconciler holds the lease');

  const config = redisGatewayConfig(upstream.url, target, keyPrefix, {
    payments: { provider: 'moove', moove: { apiKey: 'test-key', baseUrl: moove.url, webhookSecret: WEBHOOK_SECRET }, reconcile: { interval: '1s' } },
    skus: { research: { label: 'Research tools', amount: '5.00', currency: 'USDC', credits: PACK } },
  });
  const starting = Promise.all(Array.from({ length: REPLICAS }, () => startGatewayProcess(t, config)));
  const renewing = (async () => {
    // Keep the lease while the gateways start (their reconcilers tick every second).
    let done = false;
    void starting.finally(() => (done = true));
    while (!done) {
      await reconciler.tick();
      await sleep(300);
    }
  })();
  const gateways = await starting;
  await renewing;

  // `failing` is priced (cost 1) and always answers isError: each retry that finds the credits
  // reserves one and gets it back, so the balance shows the grant alone.
  const challenge = await callTool(gateways[0]!.url, 'failing', {});
  if (challenge.kind !== 'challenged') throw new Error(`expected a challenge, got ${JSON.stringify(challenge)}`);
  const [linkId] = [...moove.links.keys()];
  await moove.pay(linkId as string, '5.00'); // completed at Moove; nobody has looked yet
  const charge = await store.findChargeByRef(linkId as string);
  if (!charge) throw new Error('the charge is not indexed by its link');

  // The reconciler looks at a charge once it is due (~3 s after opening): renew the lease until just
  // before, then start every observer at once when it is due.
  while (Date.now() < charge.nextPollAt - 700) {
    t.ok((await reconciler.tick()).leader, 'lease renewed');
    await sleep(300);
  }
  await sleep(Math.max(0, charge.nextPollAt - Date.now() + 20));

  const agent = new Agent({ connections: 16 });
  t.teardown(() => agent.close());
  const started = performance.now();
  const [retries, webhooks, passes, stale] = await Promise.all([
    Promise.all(Array.from({ length: RETRIES }, (_, i) => callTool(gateways[i % REPLICAS]!.url, 'failing', { tollboothToken: challenge.handle }, agent))),
    Promise.all(
      Array.from({ length: WEBHOOKS }, (_, i) =>
        sendWebhook(`${gateways[i % REPLICAS]!.origin}/tollbooth/webhooks/moove`, WEBHOOK_SECRET, {
          type: 'payment_link.completed',
          data: { id: linkId, paymentLinkId: linkId, status: 'completed', receivedAmount: '5' },
        }),
      ),
    ),
    Promise.all(Array.from({ length: RECONCILER_PASSES }, () => reconciler.tick())),
    Promise.all(Array.from({ length: STALE_OBSERVERS }, () => settler.observe(charge, { bypassPollFloor: true }))),
  ]);
  const raceMs = Math.round(performance.now() - started);

  // Webhooks are acknowledged first and settled after (a re-read of the link): wait until each
  // acknowledged delivery's work has concluded (tollbooth_webhook_triggers_total, any outcome), so a
  // late second grant would be counted below rather than land after the test looked.
  t.equal(await webhookTriggersConcluded(gateways.map((gateway) => gateway.origin)), WEBHOOKS, 'every acknowledged webhook has concluded');

  const expositions = await Promise.all(gateways.map((gateway) => scrape(gateway.origin)));
  const ownMetrics = await metrics.registry.metrics();
  const all = [...expositions, ownMetrics];
  const sum = (name: string, labels: Record<string, string>): number => all.reduce((total, text) => total + sumCounter(text, name, labels), 0);
  const grantsPerProcess = all.map((text) => sumCounter(text, 'tollbooth_settlements_total', { result: 'granted' }));
  const moovereads = moove.calls.filter((call) => call.method === 'GET').length;
  t.comment(
    `${RETRIES} retries ${JSON.stringify(tally(retries))}, ${WEBHOOKS} webhooks (statuses ${[...new Set(webhooks.map((w) => w.status))].join(',')}), ` +
      `${RECONCILER_PASSES} reconciler passes ${JSON.stringify(passes)}, ${STALE_OBSERVERS} stale-record observers ${JSON.stringify(stale)} in ${raceMs} ms; ${moovereads} provider reads reached Moove ` +
      `(each followed by a claim attempt; later observers saw the charge settled and stopped before reading); grants per process (3 gateways, test reconciler) ${grantsPerProcess.join('/')}`,
  );

  t.ok(webhooks.every((delivery) => delivery.status >= 200 && delivery.status < 300), 'every webhook was acknowledged');
  t.ok(moovereads >= STALE_OBSERVERS, `at least ${STALE_OBSERVERS} observers read the completed link and claimed (${moovereads} reads)`);
  t.equal(sum('tollbooth_settlements_total', {}), 1, 'exactly one settlement over every observer');
  t.equal(sum('tollbooth_settlements_total', { result: 'granted' }), 1, 'and it is a full grant');
  t.equal(sum('tollbooth_credits_total', { kind: 'granted' }), PACK, 'the pack was granted once');
  // Each retry's reservation is given back as its call concludes, which may be just after its answer.
  await waitForNoReservations(target, keyPrefix, challenge.handle, 10_000);
  t.equal(await balanceOf(store, challenge.handle), PACK, 'the balance is the pack, not a multiple of it');
  t.same((await store.getCharge(charge.handleHash, charge.nonce))?.status, 'settled', 'the charge is settled');
  t.notOk(
    retries.some((outcome) => outcome.kind === 'failed' || (outcome.kind === 'refused' && outcome.reason !== 'payments_unavailable')),
    'every retry got a tool result (the tool error, or a challenge while the grant was still on its way)',
  );
});

// §6.5 last rule across processes: a retry that arrives while a retry on another replica holds the
// poll slot (is reading the provider) waits for that read instead of showing the link just paid.
t.test('two retries on two processes right after payment both run; neither is shown the paid link', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const upstream = await startPaidUpstream('stateless-json');
  t.teardown(() => upstream.close());
  const moove = await startMooveFake();
  t.teardown(() => moove.close());
  const keyPrefix = `tbretry${randomBytes(3).toString('hex')}:`;
  const config = redisGatewayConfig(upstream.url, { url: redis.url }, keyPrefix, {
    payments: { provider: 'moove', moove: { apiKey: 'test-key', baseUrl: moove.url, webhookSecret: '' } },
    skus: { research: { label: 'Research tools', amount: '5.00', currency: 'USDC', credits: PACK } },
  });
  const [first, second] = await Promise.all([startGatewayProcess(t, config), startGatewayProcess(t, config)]);
  const challenge = await callTool(first.url, 'fetch_readable', { url: 'https://example.com/' });
  if (challenge.kind !== 'challenged') throw new Error(`expected a challenge, got ${JSON.stringify(challenge)}`);
  const [linkId] = [...moove.links.keys()];
  await moove.pay(linkId as string, '5.00');
  moove.readDelayMs = 600; // whichever retry reads first holds the slot for 600 ms

  const retry = (url: string) => callTool(url, 'fetch_readable', { url: 'https://example.com/', tollboothToken: challenge.handle });
  const outcomes = await Promise.all([retry(first.url), retry(second.url)]);
  const reads = moove.calls.filter((call) => call.method === 'GET').length;
  t.comment(`outcomes ${JSON.stringify(tally(outcomes))}, ${reads} provider reads, ${outcomes.map((o) => o.ms).join('/')} ms`);
  t.same(
    outcomes.map((o) => o.kind),
    ['paid', 'paid'],
    'both retries ran the tool',
  );
  const store = await connectStore(t, { url: redis.url }, keyPrefix);
  t.equal(await balanceOf(store, challenge.handle), PACK - 2, 'one pack granted, two credits spent');
  t.ok(outcomes.every((o) => o.ms < 5_000), 'the wait is bounded');
});
