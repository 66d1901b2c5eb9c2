// SPEC §6.5 across replicas: a paid call forwarded by one gateway process, its stream resumed with
// `GET` + `Last-Event-ID` through another process sharing the Redis store. The upstream (SDK v1 with an
// event store) moves the call's stream to the GET, so the result arrives at the second process: it is
// delivered only with a committed credit, exactly once, and dropped if the call was released.
// Needs a built dist/ (`npm run build`).
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import t, { type Test } from 'tap';
import {
  balanceOf,
  callTool,
  connectStore,
  payDevCheckout,
  redisGatewayConfig,
  scrape,
  startGatewayProcess,
  sumCounter,
  type GatewayProcess,
} from '../helpers/gateway-process.js';
import { openSession, post, resume, toolCall } from '../helpers/legacy-session.js';
import { startPaidUpstream, type PaidUpstream } from '../helpers/paid-upstream.js';
import { startRedis } from '../helpers/redis-server.js';

const RECEIPT = 'xyz.tollbooth/receipt';

const redis = await startRedis();
t.teardown(() => redis.stop());

async function setUp(t: Test, callDeadline: number): Promise<{ upstream: PaidUpstream; a: GatewayProcess; b: GatewayProcess; handle: string; balance: () => Promise<number | undefined> }> {
  const upstream = await startPaidUpstream('sessions-resumable', { ignoreCancellation: true });
  t.teardown(() => upstream.close());
  const keyPrefix = `tbresume${randomBytes(3).toString('hex')}:`;
  const config = redisGatewayConfig(upstream.url, { url: redis.url }, keyPrefix, { upstream: { url: upstream.url, callDeadline } });
  const [a, b] = await Promise.all([startGatewayProcess(t, config), startGatewayProcess(t, config)]);
  const challenge = await callTool(a.url, 'fetch_readable', { url: 'https://example.com/' });
  if (challenge.kind !== 'challenged') throw new Error(`expected a challenge, got ${JSON.stringify(challenge)}`);
  if ((await payDevCheckout(challenge.checkoutUrl, a.origin)) !== 303) throw new Error('the dev checkout failed');
  const store = await connectStore(t, { url: redis.url }, keyPrefix);
  return { upstream, a: a, b: b, handle: challenge.handle, balance: () => balanceOf(store, challenge.handle) };
}

async function spent(gateways: GatewayProcess[], kind: 'spent' | 'refunded'): Promise<number> {
  let total = 0;
  for (const gateway of gateways) total += sumCounter(await scrape(gateway.origin), 'tollbooth_credits_total', { kind });
  return total;
}

t.test('resumed through another replica while the call runs: the result is delivered with a committed credit, charged exactly once', async (t) => {
  const { upstream, a, b, handle, balance } = await setUp(t, 4_000);
  t.equal(await balance(), 3, 'funded with 3 credits');
  const session = await openSession(a.url);
  const call = await post(session, toolCall(21, 'slow', { ms: 1_000, tollboothToken: handle }));
  const first = await call.next();
  t.ok(first?.id, 'the first event carries an id');
  call.abort();
  await sleep(150);

  const resumed = await resume({ ...session, url: b.url }, first?.id as string);
  const reply = await resumed.responseFor(21, 8_000);
  resumed.abort();
  t.equal(reply?.result?.content?.[0]?.text, 'slept:1000', 'the result, through the other replica');
  t.equal(reply?.result?._meta?.[RECEIPT]?.cost, 1, 'with its receipt');
  t.equal(await balance(), 2, 'exactly one credit spent');
  await sleep(4_500); // past the first replica's deadline for the call: nothing more moves
  t.equal(await balance(), 2, 'still exactly one credit spent after the deadline');
  t.equal(await spent([a, b], 'spent'), 1, 'one credit counted spent over both replicas');
  t.equal(await spent([a, b], 'refunded'), 0, 'none counted refunded');
  t.equal(upstream.callsOf('slow').length, 1);
});

t.test('resumed through another replica, released at the deadline before the tool finished: the late result is dropped there', async (t) => {
  const { upstream, a, b, handle, balance } = await setUp(t, 1_500);
  const session = await openSession(a.url);
  const call = await post(session, toolCall(22, 'slow', { ms: 3_000, tollboothToken: handle }));
  const first = await call.next();
  call.abort();
  await sleep(150);

  const resumed = await resume({ ...session, url: b.url }, first?.id as string);
  const reply = await resumed.responseFor(22, 5_000);
  resumed.abort();
  t.equal(reply, null, 'the late result never reaches the client');
  t.equal(await balance(), 3, 'nothing spent');
  t.equal(await spent([a, b], 'spent'), 0);
  // Negative control: the upstream did produce the result, and replays it to whoever asks it directly.
  const direct = await resume({ ...session, url: upstream.url }, first?.id as string);
  const replayed = await direct.responseFor(22, 3_000);
  direct.abort();
  t.equal(replayed?.result?.content?.[0]?.text, 'slept:3000', 'the upstream replays the late result when asked directly');
});
