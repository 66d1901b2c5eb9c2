// Money under concurrency across processes (SPEC §1, §11): three `tollbooth start` processes share one
// Redis (standalone, then a 3-master Cluster); one handle funded with N credits takes 600 concurrent
// priced calls spread over the three, and exactly N reach the upstream.
import { randomBytes } from 'node:crypto';
import t, { type Test } from 'tap';
import { Agent } from 'undici';
import {
  balanceOf,
  callTool,
  HASH_SECRET,
  connectStore,
  payDevCheckout,
  redisGatewayConfig,
  scrape,
  startGatewayProcess,
  sumCounter,
  tally,
  waitForNoReservations,
  type RedisTarget,
} from '../helpers/gateway-process.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';
import { matchSpends, runLedger } from '../helpers/run-ledger.js';
import { hashHandle } from '../../src/paywall/handles.js';
import { startRedis, startRedisCluster } from '../helpers/redis-server.js';

const CREDITS = 50;
const CALLS = 600;
const REPLICAS = 3;
const CONNECTIONS_PER_REPLICA = 32;

async function spendAcrossReplicas(t: Test, target: RedisTarget, label: string): Promise<void> {
  const upstream = await startPaidUpstream('stateless-json');
  t.teardown(() => upstream.close());
  const keyPrefix = `tbscale${randomBytes(3).toString('hex')}:`;
  const config = redisGatewayConfig(upstream.url, target, keyPrefix, {
    upstream: { url: upstream.url, callDeadline: '5s' },
    payments: { provider: 'dev', reconcile: { interval: '1s' } },
    skus: { research: { label: 'Research tools', amount: '5.00', currency: 'USDC', credits: CREDITS } },
    logging: { level: 'info' }, // the call lines that name each committed call's reservation
  });
  const gateways = await Promise.all(Array.from({ length: REPLICAS }, () => startGatewayProcess(t, config)));
  const [first, second, third] = gateways as [(typeof gateways)[0], (typeof gateways)[0], (typeof gateways)[0]];
  const store = await connectStore(t, target, keyPrefix);

  // Fund one handle the way a payer would, touching every replica: challenged by the first, paid on
  // the second (the dev link lives in Redis), the retry on the third runs on the granted credits.
  const challenge = await callTool(first.url, 'fetch_readable', { url: 'https://example.com/' });
  if (challenge.kind !== 'challenged') throw new Error(`expected a challenge, got ${JSON.stringify(challenge)}`);
  const handle = challenge.handle;
  t.equal(await payDevCheckout(challenge.checkoutUrl, second.origin), 303, 'paid through the second replica');
  const retry = await callTool(third.url, 'fetch_readable', { url: 'https://example.com/', tollboothToken: handle });
  t.match(retry, { kind: 'paid', remaining: CREDITS - 1 }, 'the retry on the third replica spends the first credit');

  // Each replica learns the upstream's tool declarations on its first priced call (SPEC §5.4); the
  // second has only served the checkout so far. Warm it, so all three race for the credits from the start.
  t.match(await callTool(second.url, 'fetch_readable', { url: 'https://example.com/' }), { kind: 'challenged' }, 'a call without a token on the second replica is challenged');

  const agent = new Agent({ connections: CONNECTIONS_PER_REPLICA });
  t.teardown(() => agent.close());
  const started = performance.now();
  const burst = await Promise.all(
    Array.from({ length: CALLS }, (_, i) => callTool(gateways[i % REPLICAS]!.url, 'fetch_readable', { url: `https://example.com/${i}`, tollboothToken: handle }, agent)),
  );
  const burstMs = Math.round(performance.now() - started);
  const burstUpstream = upstream.callsOf('fetch_readable').length - 1;
  const counts = tally(burst);

  // A store call that blew its 1 s budget on a saturated machine refuses payments_unavailable, and
  // a reserve that ran anyway holds a credit until the reconciler gives it back (callDeadline + 5 s).
  // So: wait for every reservation to end, then spend what is left one call at a time. Whatever
  // the timing, the total that reached the upstream must be the funded credits.
  const releaseWaitMs = await waitForNoReservations(target, keyPrefix, handle, 20_000);
  const mopUp = [];
  for (let i = 0; mopUp.length < CREDITS + 10; i++) {
    const outcome = await callTool(gateways[i % REPLICAS]!.url, 'fetch_readable', { url: 'https://example.com/last', tollboothToken: handle });
    mopUp.push(outcome);
    if (outcome.kind === 'challenged') break;
  }
  const latencies = burst.map((o) => o.ms).sort((a, b) => a - b);
  const expositions = await Promise.all(gateways.map((gateway) => scrape(gateway.origin)));
  const sum = (name: string, labels: Record<string, string>): number => expositions.reduce((total, text) => total + sumCounter(text, name, labels), 0);
  const perReplica = expositions.map((text) => sumCounter(text, 'tollbooth_paid_calls_total', { outcome: 'authorised' }));
  const upstreamCalls = upstream.callsOf('fetch_readable').length;
  t.comment(
    `${label}: burst of ${CALLS} calls over ${REPLICAS} processes (${CONNECTIONS_PER_REPLICA} connections each) in ${burstMs} ms, ` +
      `p50 ${latencies[Math.floor(CALLS / 2)]} ms, p99 ${latencies[Math.floor(CALLS * 0.99)]} ms: ${JSON.stringify(counts)}, ${burstUpstream} reached the upstream; ` +
      `reservations clear ${releaseWaitMs} ms later; mop-up ${JSON.stringify(tally(mopUp))}; ` +
      `upstream calls ${upstreamCalls} for ${CREDITS} credits; authorised per replica ${perReplica.join('/')}`,
  );

  t.same(
    Object.keys(counts).filter((kind) => !['paid', 'challenged:credits_exhausted', 'refused:payments_unavailable', 'refused:deadline_exceeded', 'ok'].includes(kind)),
    [],
    'every burst call was paid, challenged for exhausted credits, or refused (store budget, call deadline)',
  );
  const burstUncharged = (counts.ok ?? 0) + (counts['refused:deadline_exceeded'] ?? 0);
  t.ok(burstUpstream <= CREDITS - 1 + burstUncharged, `the burst never overspent (${burstUpstream} upstream calls for ${CREDITS - 1} credits, ${burstUncharged} uncharged)`);
  t.match(mopUp.at(-1), { kind: 'challenged', reason: 'credits_exhausted' }, 'spending ends with a credits_exhausted challenge');
  // Calls that reach the upstream uncharged (SPEC §6.5): answered while the commit failed (relayed
  // without a receipt), or stopped at the call deadline and released. Both need a saturated machine.
  const freeRides = [counts, tally(mopUp)].reduce((total, c) => total + (c.ok ?? 0) + (c['refused:deadline_exceeded'] ?? 0), 0);
  t.ok(upstreamCalls >= CREDITS && upstreamCalls <= CREDITS + freeRides, `exactly the funded credits reached the upstream (${upstreamCalls}, uncharged ${freeRides})`);
  t.equal(await balanceOf(store, handle), 0, 'the final balance is 0');
  t.equal(sum('tollbooth_settlements_total', { result: 'granted' }), 1, 'one settlement over the three replicas');

  // The exact ledger: the one grant, and each spend one call matched by its reservation id to a
  // receipt a caller got, or to a commit whose reply the gateway lost (logged with the ref, the
  // caller refused payments_unavailable). Paid receipts and credits spent then agree exactly.
  const receipts = [[retry], burst, mopUp].reduce((total, outcomes) => total + (tally(outcomes).paid ?? 0), 0);
  const ledger = await runLedger(store, hashHandle(handle, HASH_SECRET), 'research');
  const logs = (await Promise.all(gateways.map((gateway) => gateway.settledLogs()))).flat();
  const match = matchSpends(ledger.entries, logs);
  t.comment(`${label} ledger: granted ${ledger.granted} = spent ${ledger.spent} + balance ${ledger.balance}; ${receipts} receipts, ${match.lostReplies.length} lost commit replies, ${match.failedCommits} commit failures that spent nothing`);
  t.same(ledger.mismatches, [], 'ledger verify: sequence, running totals, hash chain and stored balance agree');
  t.equal(ledger.granted, CREDITS, 'granted: the one pack');
  t.equal(ledger.spent, CREDITS, 'spent: all of it');
  t.equal(ledger.granted, ledger.spent + ledger.balance + ledger.reserved, 'granted = spent + remaining');
  t.equal(ledger.spends, CREDITS, 'one credit per spend entry');
  t.same(match.duplicated, [], 'no call spent twice');
  t.same(match.unaccounted, [], 'every spend is a call the gateway committed or a commit it logged as failed');
  t.same(match.committedWithoutSpend, [], 'every call logged as committed has its spend entry');
  t.equal(match.delivered.length, receipts, 'the spends of committed calls are exactly the receipts the callers got');
  t.equal(ledger.spent, receipts + match.lostReplies.length, `spent = receipts + lost commit replies (${receipts} + ${match.lostReplies.length})`);
}

t.test('standalone Redis: 600 concurrent calls over 3 processes spend exactly the funded credits', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  await spendAcrossReplicas(t, { url: redis.url }, 'standalone');
});

t.test('Redis Cluster: 600 concurrent calls over 3 processes spend exactly the funded credits', async (t) => {
  const cluster = await startRedisCluster();
  t.teardown(() => cluster.stop());
  await spendAcrossReplicas(t, { cluster: cluster.seeds }, 'cluster');
});
