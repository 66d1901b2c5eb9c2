// SPEC §6.2 step 2: new handles and links are throttled per client — the principal, else the IPv4
// address or the IPv6 /64 (a /64 is one subscriber: its addresses rotate freely) — and overall by
// limits.newChargesPerSecond, so a flood of clients cannot spend the provider's rate budget. A real
// gateway with trustProxy, the client address varied with X-Forwarded-For.
import t, { type Test } from 'tap';
import { scrape, sumCounter } from '../helpers/gateway-process.js';
import type { Clock } from '../../src/clock.js';
import { wallClock } from '../helpers/clock.js';
import { startTestGateway, testConfig, type TestGateway } from '../helpers/gateway.js';
import { startPaidUpstream, type PaidUpstream } from '../helpers/paid-upstream.js';

type Json = Record<string, any>;

let upstream: PaidUpstream;
t.before(async () => {
  upstream = await startPaidUpstream('stateless-json');
});
t.teardown(() => upstream.close());

let nextId = 1;
async function callFrom(gateway: TestGateway, address: string, args: Json = { url: 'https://example.com/' }): Promise<Json> {
  const response = await fetch(gateway.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25', 'x-forwarded-for': address },
    body: JSON.stringify({ jsonrpc: '2.0', id: nextId++, method: 'tools/call', params: { name: 'fetch_readable', arguments: args } }),
  });
  return ((await response.json()) as Json).result as Json;
}

const outcomeOf = (result: Json): string => {
  const meta = (result._meta ?? {}) as Json;
  if (meta['xyz.tollbooth/challenge']) return 'challenged';
  if (meta['xyz.tollbooth/refusal']) return `refused:${meta['xyz.tollbooth/refusal'].reason}`;
  if (meta['xyz.tollbooth/receipt']) return 'paid';
  return 'other';
};

async function gatewayWith(t: Test, limits: Json, clock?: Clock): Promise<TestGateway> {
  return startTestGateway(t, testConfig(upstream.url, { server: { host: '127.0.0.1', port: 0, trustProxy: true }, limits: { perHandle: { ratePerSecond: 100, burst: 100 }, ...limits } }), { clock });
}

const opened = async (gateway: TestGateway): Promise<number> => sumCounter(await scrape(gateway.origin), 'tollbooth_charges_opened_total');

t.test('per client: many IPv6 addresses in one /64 share one bucket', async (t) => {
  const gateway = await gatewayWith(t, { challengesPerClient: { ratePerSecond: 0.001, burst: 2 }, newChargesPerSecond: 1_000 });
  const sameSlash64 = ['2001:db8:1:2::1', '2001:db8:1:2::2', '2001:db8:1:2:ffff:ffff:ffff:fffe', '2001:0db8:0001:0002:0000:0000:0000:0009', '2001:db8:1:2:aaaa::7'];
  const outcomes = [];
  for (const address of sameSlash64) outcomes.push(outcomeOf(await callFrom(gateway, address)));
  t.same(outcomes, ['challenged', 'challenged', 'refused:rate_limited', 'refused:rate_limited', 'refused:rate_limited'], 'the burst is per /64, not per address');
  t.equal(outcomeOf(await callFrom(gateway, '2001:db8:1:3::1')), 'challenged', 'the next /64 has its own bucket');
});

t.test('per client: IPv4 addresses have a bucket each, and an IPv4-mapped IPv6 address is its IPv4 address', async (t) => {
  const gateway = await gatewayWith(t, { challengesPerClient: { ratePerSecond: 0.001, burst: 1 }, newChargesPerSecond: 1_000 });
  t.equal(outcomeOf(await callFrom(gateway, '203.0.113.7')), 'challenged');
  t.equal(outcomeOf(await callFrom(gateway, '::ffff:203.0.113.7')), 'refused:rate_limited', 'the same client written as IPv4-mapped IPv6');
  t.equal(outcomeOf(await callFrom(gateway, '203.0.113.8')), 'challenged', 'the neighbour is another client');
  const refused = await callFrom(gateway, '203.0.113.7');
  t.ok(refused._meta['xyz.tollbooth/refusal'].retryAfterSeconds >= 1, 'with a wait');
});

t.test('global cap: a flood from many /64s opens at most newChargesPerSecond links; paying users and existing links are unaffected', async (t) => {
  const CAP = 5;
  let offset = 0;
  const gateway = await gatewayWith(t, { challengesPerClient: { ratePerSecond: 1_000, burst: 1_000 }, newChargesPerSecond: CAP }, wallClock(() => Date.now() + offset));
  // Before the flood: one payer with credits, one handle with a pending link it has not paid yet.
  const payerChallenge = (await callFrom(gateway, '198.51.100.1'))._meta['xyz.tollbooth/challenge'];
  const pay = await fetch(`${payerChallenge.checkoutUrl}/pay`, { method: 'POST', redirect: 'manual' });
  t.equal(pay.status, 303);
  const waiting = (await callFrom(gateway, '198.51.100.2'))._meta['xyz.tollbooth/challenge'];
  offset += 1_100; // the gateway's clock moves on: the bucket refills to its burst (no wait)
  const before = await opened(gateway);

  const started = performance.now();
  const flood = Promise.all(Array.from({ length: 60 }, (_, i) => callFrom(gateway, `2001:db8:${(i + 16).toString(16)}::1`)));
  const payerRetry = callFrom(gateway, '198.51.100.1', { url: 'https://example.com/', tollboothToken: payerChallenge.retry.value });
  const waitingRetry = callFrom(gateway, '198.51.100.2', { url: 'https://example.com/', tollboothToken: waiting.retry.value });
  const [results, paid, rechallenged] = await Promise.all([flood, payerRetry, waitingRetry]);
  const elapsedS = (performance.now() - started) / 1_000;

  const outcomes = results.map(outcomeOf);
  const newLinks = (await opened(gateway)) - before;
  const bound = CAP + Math.floor(CAP * elapsedS);
  t.comment(`flood of 60 in ${elapsedS.toFixed(2)} s: ${outcomes.filter((o) => o === 'challenged').length} challenged, ${outcomes.filter((o) => o === 'refused:rate_limited').length} rate_limited; ${newLinks} links opened (bound ${bound})`);
  t.ok(newLinks <= bound, `the provider saw at most the cap: ${newLinks} ≤ ${bound}`);
  t.ok(outcomes.filter((o) => o === 'refused:rate_limited').length > 0, 'the rest were refused rate_limited');
  t.same([...new Set(outcomes)].sort(), ['challenged', 'refused:rate_limited'].filter((o) => outcomes.includes(o)).sort(), 'nothing else');
  t.ok(results.filter((r) => outcomeOf(r) === 'refused:rate_limited').every((r) => r._meta['xyz.tollbooth/refusal'].retryAfterSeconds >= 1), 'each with retryAfterSeconds');
  t.equal(outcomeOf(paid), 'paid', 'the paying user\'s retry still works during the flood');
  t.equal(outcomeOf(rechallenged), 'challenged', 'a challenge that reuses a pending link costs no budget');
  t.equal(rechallenged._meta['xyz.tollbooth/challenge'].checkoutUrl, waiting.checkoutUrl, 'the same link');
});
