// tollbooth_store_up is collected by the scrape itself (a bounded store ping), so the first scrape of a
// healthy gateway says 1 and an outage of the real redis-server shows on the very next scrape.
import t from 'tap';
import { waitFor } from '../helpers/clock.js';
import { testConfig, startTestGateway } from '../helpers/gateway.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';
import { startRedis } from '../helpers/redis-server.js';
import { scrape, sumCounter } from '../helpers/gateway-process.js';

t.test('the first scrape says the store is up; the scrape after redis-server is killed says it is down', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const upstream = await startPaidUpstream();
  t.teardown(() => upstream.close());
  const gateway = await startTestGateway(t, testConfig(upstream.url, { store: { type: 'redis', redis: { url: redis.url, keyPrefix: 'store-up:' } }, logging: { level: 'silent' } }));

  const first = await scrape(gateway.origin);
  t.match(first, /^tollbooth_store_up 1$/m, 'the first scrape of a healthy gateway says up');

  redis.kill('SIGKILL');
  const during = await scrape(gateway.origin);
  t.equal(sumCounter(during, 'tollbooth_store_up'), 0, 'the scrape right after the kill says down');

  // The store reconnects on its own backoff: wait for a scrape that says up again.
  await redis.restart();
  await waitFor(async () => sumCounter(await scrape(gateway.origin), 'tollbooth_store_up') === 1, 'a scrape saying up after the restart', { everyMs: 100 });
  t.pass('up again once redis-server is back');
});
