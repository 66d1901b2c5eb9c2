// x402 authorization claims across store instances (SPEC §19): two RedisStore instances on one Redis
// (standalone and Cluster) are two gateway replicas, and one authorization must still be claimed once.
// Plus what the shared suite cannot check on every store: expiry on the memory clock, the Redis TTL
// and hash tag, and a negative control showing the concurrency check can fail.
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import t from 'tap';
import { createLogger } from '../../src/observability/logger.js';
import { MemoryStore } from '../../src/store/memory.js';
import { RedisStore } from '../../src/store/redis.js';
import type { PaymentNonceClaim } from '../../src/store/store.js';
import { startRedis, startRedisCluster } from '../helpers/redis-server.js';
import { ManualClock, concurrentNonceClaims, nonceClaim } from './conformance.js';

const logger = createLogger('silent');

/** A store that looks the nonce up, lets other calls run (a network round trip), then writes: first claim does NOT win. */
class NaiveClaimStore extends MemoryStore {
  private readonly seen = new Set<string>();
  override async claimPaymentNonce(claim: PaymentNonceClaim): Promise<boolean> {
    const taken = this.seen.has(claim.nonce);
    await new Promise((resolve) => setImmediate(resolve));
    if (taken) return false;
    this.seen.add(claim.nonce);
    return true;
  }
}

t.test('negative control: the concurrent-claim check catches a read-then-write store', async (t) => {
  const clock = new ManualClock();
  t.ok((await concurrentNonceClaims([new NaiveClaimStore({ now: clock.now })], nonceClaim(clock))) > 1);
  t.equal(await concurrentNonceClaims([new MemoryStore({ now: clock.now })], nonceClaim(clock)), 1);
});

t.test('memory: a claim is gone after expiresAt, and never kept less than a minute', async (t) => {
  const clock = new ManualClock();
  const store = new MemoryStore({ now: clock.now });
  const claim = nonceClaim(clock, { expiresAt: clock.now() + 5 * 60_000 });
  t.equal(await store.claimPaymentNonce(claim), true);
  clock.advance(5 * 60_000 - 1);
  t.equal(await store.claimPaymentNonce(claim), false);
  clock.advance(1);
  t.equal(await store.getPaymentNonce(claim), null);
  t.equal(await store.claimPaymentNonce(claim), true, 'a claim past its window can be made again (the facilitator refuses the expired authorization anyway)');
  const stale = nonceClaim(clock, { expiresAt: clock.now() - 1_000 });
  t.equal(await store.claimPaymentNonce(stale), true);
  clock.advance(59_000);
  t.equal(await store.claimPaymentNonce(stale), false, 'kept a minute even when expiresAt has passed');
});

t.test('Redis standalone', async (t) => {
  const server = await startRedis();
  t.teardown(() => server.stop());
  const prefix = `tbx402:${randomBytes(4).toString('hex')}:`;
  const connect = () => RedisStore.connect({ type: 'redis', redis: { url: server.url, keyPrefix: prefix } }, { logger });
  const [a, b] = await Promise.all([connect(), connect()]);
  t.teardown(() => Promise.all([a.close(), b.close()]));
  const clock = new ManualClock();

  t.test('200 concurrent claims over two store instances on one Redis: exactly one wins', async (t) => {
    t.equal(await concurrentNonceClaims([a, b], nonceClaim(clock)), 1);
    t.equal(await concurrentNonceClaims([a, b], nonceClaim(clock)), 1, 'again, with another nonce');
  });

  t.test('the claim key lives under the payer’s hash tag with a TTL covering the authorization window', async (t) => {
    const raw = new Redis(server.port, '127.0.0.1');
    t.teardown(() => raw.disconnect());
    const claim = nonceClaim(new ManualClock(), { expiresAt: Date.now() + 10 * 60_000 });
    t.equal(await a.claimPaymentNonce(claim), true);
    const key = `${prefix}{x402:${claim.payer}}:nonce:${claim.network}:${claim.asset}:${claim.nonce}`;
    const ttl = await raw.pttl(key);
    t.ok(ttl > 9 * 60_000 && ttl <= 10 * 60_000, `PTTL ${ttl}`);
    t.notOk((await raw.get(key))?.includes('signature'));
    t.equal(await b.finishPaymentNonce(claim, { state: 'settled', transaction: '0x01', at: Date.now() }), true, 'another instance records the outcome');
    const after = await raw.pttl(key);
    t.ok(after > 9 * 60_000, 'finishing keeps the TTL');
  });
});

t.test('Redis Cluster: two instances, one claim', async (t) => {
  const cluster = await startRedisCluster();
  t.teardown(() => cluster.stop());
  const prefix = `tbx402:${randomBytes(4).toString('hex')}:`;
  const connect = () => RedisStore.connect({ type: 'redis', redis: { url: undefined, cluster: cluster.seeds, keyPrefix: prefix } }, { logger });
  const [a, b] = await Promise.all([connect(), connect()]);
  t.teardown(() => Promise.all([a.close(), b.close()]));
  const clock = new ManualClock();
  t.equal(await concurrentNonceClaims([a, b], nonceClaim(clock)), 1);
  const claim = nonceClaim(clock);
  t.equal(await a.claimPaymentNonce(claim), true);
  t.equal(await b.finishPaymentNonce(claim, { state: 'not_settled', transaction: null, at: clock.now() }), true);
  t.match(await a.getPaymentNonce(claim), { state: 'not_settled' });
});
