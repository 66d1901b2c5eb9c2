// A checkout link reaches an agent only when the store's replicas hold its charge (SPEC §21), on
// every path that shows one — here the second challenge of a handle, whose pending charge the
// reservation just read. A real gateway process on a primary with one replica (durability
// replicated); the replica hung with SIGSTOP is what a resumed, already replaced primary looks like
// from the gateway: writes it takes are not on the replica that will carry on.
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { callTool, redisGatewayConfig, startGatewayProcess } from '../helpers/gateway-process.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';
import { startRedis } from '../helpers/redis-server.js';

const primary = await startRedis();
t.teardown(() => primary.stop());
const replica = await startRedis({ replicaOf: primary.port });
t.teardown(() => replica.stop());
const upstream = await startPaidUpstream('stateless-json');
t.teardown(() => upstream.close());

t.test('a pending link is shown again only while the replica acknowledges: otherwise the call is refused, and the link comes back with the replica', async (t) => {
  const keyPrefix = `tbdl${randomBytes(3).toString('hex')}:`;
  const config = redisGatewayConfig(upstream.url, { url: primary.url }, keyPrefix);
  config.store = { type: 'redis', redis: { url: primary.url, keyPrefix, durability: 'replicated', waitReplicas: 1, waitTimeout: '400ms' } };
  const gateway = await startGatewayProcess(t, config);

  const first = await callTool(gateway.url, 'fetch_readable', { url: 'https://example.com/a' });
  if (first.kind !== 'challenged') throw new Error(`expected a challenge, got ${first.kind}`);

  replica.kill('SIGSTOP');
  try {
    const again = await callTool(gateway.url, 'fetch_readable', { url: 'https://example.com/a', tollboothToken: first.handle });
    t.match(again, { kind: 'refused', reason: 'payments_unavailable' }, 'not the link: the replica has not acknowledged it');
  } finally {
    replica.kill('SIGCONT');
  }
  const back = await callTool(gateway.url, 'fetch_readable', { url: 'https://example.com/a', tollboothToken: first.handle });
  t.match(back, { kind: 'challenged', checkoutUrl: first.checkoutUrl }, 'the same link once the replica answers');
  t.equal(upstream.callsOf('fetch_readable').length, 0, 'nothing reached the upstream');
});
