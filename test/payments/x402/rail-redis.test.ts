// One payload presented to two gateway replicas at once (SPEC §19): two rails, each with its own
// RedisStore instance on one Redis, each with its own facilitator client. The facilitator finds the
// payload valid every time (it is not settled yet); only the store's nonce claim stops the replay.
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { createLogger } from '../../../src/observability/logger.js';
import { RedisStore } from '../../../src/store/redis.js';
import { startRedis } from '../../helpers/redis-server.js';
import { startFakeFacilitator } from '../../helpers/x402-facilitator.js';
import { newPayer } from '../../helpers/x402-payer.js';
import { call, makeRail, paidParams, paymentRequiredOf, plainChallenge } from './fixtures.js';

t.test('a payload replayed concurrently on two replicas sharing one Redis is verified once, settled once', async (t) => {
  const server = await startRedis();
  t.teardown(() => server.stop());
  const fake = await startFakeFacilitator();
  t.teardown(() => fake.close());
  const prefix = `tbx402rail:${randomBytes(4).toString('hex')}:`;
  const logger = createLogger('silent');
  const stores = await Promise.all([0, 1].map(() => RedisStore.connect({ type: 'redis', redis: { url: server.url, keyPrefix: prefix } }, { logger })));
  t.teardown(() => Promise.all(stores.map((store) => store.close())));
  const replicas = stores.map((store) => makeRail(store, fake.url));
  t.teardown(() => Promise.all(replicas.map((replica) => replica.facilitator.close())));

  const payload = await newPayer().pay(paymentRequiredOf(replicas[0]!.rail.challengeAdditions(call(), plainChallenge())));
  const answers = await Promise.all(Array.from({ length: 40 }, (_, i) => replicas[i % 2]!.rail.authorise(call(), paidParams(payload))));
  const winners = answers.filter((answer) => answer.kind === 'verified');
  t.equal(winners.length, 1);
  t.equal(answers.filter((answer) => answer.kind === 'refuse' && answer.reason === 'payment_invalid').length, 39);
  const winner = winners[0];
  if (winner?.kind !== 'verified') throw new Error('no winner');
  const conclusion = await replicas[1]!.rail.conclude(winner.claim, { wouldCommit: true });
  t.equal(conclusion.kind, 'deliver');
  t.equal(fake.calls.settle, 1);
  t.match(await stores[0]!.getPaymentNonce(winner.claim.key), { state: 'settled' });
  const late = await replicas[0]!.rail.authorise(call(), paidParams(payload));
  t.equal(late.kind, 'refuse', 'a sequential replay on the other replica after settlement is refused too');
});
