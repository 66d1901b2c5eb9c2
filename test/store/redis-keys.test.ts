// Every key the Redis store writes has a native TTL and the configured prefix, and every key of a
// handle carries its hash tag (SPEC §8). Each store operation runs once, then SCAN lists every key
// on every node, standalone and Cluster.
import t, { type Test } from 'tap';
import { Redis } from 'ioredis';
import { createLogger } from '../../src/observability/logger.js';
import { KeySpace } from '../../src/store/keys.js';
import { RedisStore } from '../../src/store/redis.js';
import { HANDLE_GRACE_MS, LEDGER_RETENTION_MS } from '../../src/store/policy.js';
import type { RedisStoreConfig } from '../../src/store/redis.js';
import { startRedis, startRedisCluster } from '../helpers/redis-server.js';

const PREFIX = 'tbkeys:';
const HOUR = 3_600_000;
const logger = createLogger('silent');

/** Runs every Store method at least once and leaves some state open (a reservation, a pending charge). */
async function exerciseEveryOperation(store: RedisStore, clock: { offset: number }): Promise<void> {
  const now = Date.now();
  const bucket = { ratePerSecond: 0.01, burst: 1 };
  await store.createHandle({ handleHash: 'aa11', fingerprint: 'tb_s_aaaa..1111', principal: 'alice', ttlMs: HOUR });
  await store.createHandle({ handleHash: 'bb22', fingerprint: 'tb_s_bbbb..2222', principal: null, ttlMs: 2 * HOUR });
  await store.getHandle('aa11');
  await store.findHandlesByFingerprint('tb_s_aaaa..1111');
  await store.grantCredits('aa11', 'research', 10);
  const spend = { handleHash: 'aa11', principal: 'alice', sku: 'research', cost: 1, ttlMs: HOUR, bucket: { ratePerSecond: 100, burst: 100 } };
  await store.reserve({ ...spend, reservationId: 'r-commit', reservationDeadline: now + 60_000 });
  await store.commit('aa11', 'r-commit');
  await store.reserve({ ...spend, reservationId: 'r-release', reservationDeadline: now + 60_000 });
  await store.release('aa11', 'r-release');
  await store.reserve({ ...spend, reservationId: 'r-stale', reservationDeadline: now + 1 });
  await store.reserve({ ...spend, reservationId: 'r-open', reservationDeadline: now + 60_000 });
  await store.releaseStaleReservations(now + 10, 10);
  await store.reserve({ ...spend, handleHash: 'bb22', principal: null, reservationId: 'r-poor', reservationDeadline: now + 60_000, bucket });
  await store.reserve({ ...spend, handleHash: 'bb22', principal: null, reservationId: 'r-limited', reservationDeadline: now + 60_000, bucket });

  const snapshot = { label: 'Research', amount: '5.00', currency: 'USD', credits: 10, tool: 'fetch_readable' };
  const open = (sku: string, nonce: string) => store.beginCharge({ handleHash: 'bb22', sku, nonce, snapshot, now, ttlMs: HOUR, firstPollDelayMs: 3_000 });
  await open('settled', 'n-settled');
  await store.attachLink('bb22', 'n-settled', { providerRef: 'ref-settled', checkoutUrl: 'https://pay.test/settled' });
  await store.takePollSlot('bb22', 'n-settled', now, 2_000, now + 6_000);
  await store.claimSettlement({ handleHash: 'bb22', nonce: 'n-settled', outcome: 'settled', credits: 10, receivedAmount: '5.00' });
  await open('abandoned', 'n-abandoned');
  await store.attachLink('bb22', 'n-abandoned', { providerRef: 'ref-abandoned', checkoutUrl: 'https://pay.test/abandoned' });
  await store.abandonCharge('bb22', 'n-abandoned', now + HOUR + 60_000);
  await open('expired', 'n-expired');
  await store.attachLink('bb22', 'n-expired', { providerRef: 'ref-expired', checkoutUrl: 'https://pay.test/expired' });
  await store.expireCharge('bb22', 'n-expired', now);
  await open('aborted', 'n-aborted');
  await store.abortCharge('bb22', 'n-aborted');
  await open('pending', 'n-pending');
  await store.attachLink('bb22', 'n-pending', { providerRef: 'ref-pending', checkoutUrl: 'https://pay.test/pending' });
  await open('opening', 'n-opening');
  await store.getCharge('bb22', 'n-pending');
  await store.findChargeByRef('ref-pending');
  await store.dueCharges(now + 10_000, 10);
  await store.listCharges();
  await store.countPendingCharges();

  // budgets and allowances (SPEC §23): counters and hold parts under the subject's tag, one hold left open
  const day = 86_400_000;
  const counter = { name: 'budget:daily', subject: 'p:alice', windowMs: day, windowStart: now - (now % day) };
  const draw = { ...counter, calls: 1, credits: 2, maxCalls: 10, maxCredits: null };
  const allowance = { ...draw, name: 'allowance:trial', subject: 'c:203.0.113.7', credits: 0, maxCalls: 5 };
  await store.reserveQuotas({ holdId: 'q-commit', draws: [draw, allowance], deadline: now + 60_000, attempt: 'qa1' });
  await store.concludeQuotas('q-commit', [draw, allowance], 'commit', 'qa2');
  await store.reserveQuotas({ holdId: 'q-stale', draws: [draw], deadline: now + 1 });
  await store.reserveQuotas({ holdId: 'q-open', draws: [draw], deadline: now + 60_000 });
  await store.holdQuotas('q-open', [draw], now + 120_000);
  for (let pass = 0; pass < 17; pass++) await store.releaseStaleQuotas(now + 10, 10);
  await store.quotaUsage([counter]);

  await store.takeChallengeToken('203.0.113.7', { ratePerSecond: 0.2, burst: 5 });
  await store.acquireLease('reconciler', 'gw-1', 60_000);
  await store.claimEvent('moove', 'evt_{1}', 60_000);
  await store.putDevLink({ id: 'dev-1', label: 'Research', amount: '5.00', currency: 'USD', credits: 10, expiresAt: now + HOUR, status: 'active', receivedAmount: null });
  await store.payDevLink('dev-1', '5.00');
  await store.getDevLink('dev-1');
  await store.ping();

  // x402 (SPEC §19) and the ledger (SPEC §17): a settled authorization, an ended handle, the readers.
  const claim = { network: 'eip155:84532', asset: '0x036cbd53842c5426634e7929541ec2318f3dcf7e', payer: '0x857b06519e91e3a54538791bdbb0e22373e36b66', nonce: `0x${'01'.repeat(32)}`, expiresAt: now + 600_000, claimedAt: now, sku: 'research', tool: 'fetch_readable', amount: '20000' };
  await store.claimPaymentNonce(claim);
  await store.finishPaymentNonce(claim, { state: 'settled', transaction: `0x${'ab'.repeat(32)}`, at: now });
  await store.getPaymentNonce(claim);
  // cc33 lives on a clock two hours behind, so it has ended by now; the others have not.
  clock.offset = -2 * HOUR;
  await store.createHandle({ handleHash: 'cc33', fingerprint: 'tb_s_cccc..3333', principal: null, ttlMs: HOUR });
  await store.grantCredits('cc33', 'research', 2, 'ended');
  clock.offset = 0;
  for (let pass = 0; pass < 17; pass++) await store.expireHandles(Date.now(), 100);
  await store.ledgerTail('aa11', 10);
  for await (const account of store.ledgerAccounts({ unledgeredHandles: true })) {
    const checkpoint = await store.ledgerCheckpoint(account);
    if (checkpoint) await store.readLedger(account, { limit: 10 });
  }
  // priced-request registry (SPEC §6.5): one hash per upstream session hash
  await store.registerPricedRequest({ session: 'c2Vzc2lvbi1oYXNo', requestId: '7' }, { state: 'in_flight', handleHash: 'aa11', reservationId: 'r-pr', tool: 'fetch_readable', sku: 'research', cost: 1, charge: 'success', deadline: now + 20_000, remaining: null, fingerprint: null, startedAt: now }, HOUR);
  await store.concludePricedRequest({ session: 'c2Vzc2lvbi1oYXNo', requestId: '7' }, 'committed', 2);
  // sessions bound to principals (SPEC §20): one string per upstream session hash
  await store.bindSession('c2Vzc2lvbi1vd25lcg', 'sub:alice', HOUR);
  await store.sessionPrincipal('c2Vzc2lvbi1vd25lcg', HOUR);
}

async function keysWithTtl(ports: number[]): Promise<{ key: string; pttl: number }[]> {
  const found: { key: string; pttl: number }[] = [];
  for (const port of ports) {
    const node = new Redis({ port, host: '127.0.0.1', lazyConnect: true });
    await node.connect();
    let cursor = '0';
    do {
      const [next, keys] = await node.scan(cursor, 'COUNT', 500);
      cursor = next;
      for (const key of keys) found.push({ key, pttl: await node.pttl(key) });
    } while (cursor !== '0');
    node.disconnect();
  }
  return found;
}

async function checkKeys(t: Test, storeConfig: RedisStoreConfig, ports: number[], clustered: boolean): Promise<void> {
  const clock = { offset: 0 };
  const store = await RedisStore.connect(storeConfig, { logger, now: () => Date.now() + clock.offset });
  await exerciseEveryOperation(store, clock);
  await store.close();
  const keys = await keysWithTtl(ports);
  t.ok(keys.length >= 12, `${keys.length} keys written`);
  for (const { key, pttl } of keys) {
    t.ok(key.startsWith(PREFIX), `${key} starts with the prefix`);
    t.ok(pttl > 0, `${key} has a TTL (${pttl} ms)`);
  }
  // Operation records (SPEC §21: a re-run after a lost reply answers as the first run) are short-lived handle keys.
  const handleKeys = keys.filter(({ key }) => /\{h:(aa11|bb22|cc33)\}/.test(key) && !key.includes('}:op:')).map(({ key }) => key);
  t.ok(keys.some(({ key }) => key.startsWith(`${PREFIX}{h:aa11}:op:c:`)), 'a commit leaves its operation record under the handle tag');
  t.same(
    handleKeys.sort(),
    [`${PREFIX}{h:aa11}`, `${PREFIX}{h:aa11}:ledger`, `${PREFIX}{h:aa11}:res`, `${PREFIX}{h:bb22}`, `${PREFIX}{h:bb22}:charges`, `${PREFIX}{h:bb22}:ledger`, `${PREFIX}{h:cc33}`, `${PREFIX}{h:cc33}:ledger`],
    'every key of a handle, its ledger included, carries its hash tag',
  );
  for (const kind of ['{charges:due}', '{charges:all}', '{charges:live}', '{ref:ref-pending}', '{cb:203.0.113.7}', '{lease:reconciler}', '{dev:dev-1}', '{pr:c2Vzc2lvbi1oYXNo}', '{so:c2Vzc2lvbi1vd25lcg}']) {
    t.ok(keys.some(({ key }) => key === PREFIX + kind), `${kind} key present`);
  }
  t.ok(keys.some(({ key }) => /^tbkeys:\{ev:[0-9a-f]{64}\}$/.test(key)), 'a claimed event is one key named by a digest of its id');
  // §8: every key is a handle's (under its tag) or one of the global kinds; nothing that names a
  // handle's fingerprint lives outside the handle's tag.
  const globalKinds = /^tbkeys:\{(reservations|rs:[0-9a-z]+|reservation-shards|charges:due|charges:all|charges:live|ref:[^}]+|cb:[^}]+|lease:[^}]+|dev:[^}]+|ev:[0-9a-f]{64}|pr:[A-Za-z0-9_-]+|handle-expiry|so:[A-Za-z0-9_-]+)\}$|^tbkeys:\{rs:[0-9a-z]+\}:exp$/;
  const handleKey = /^tbkeys:\{h:[^}]+\}(:res|:charges|:ledger|:op:[a-z]:[^:]+)?$/;
  // x402 (SPEC §19): an authorization claim and the payer's ledger, under the payer's tag.
  const payerKey = /^tbkeys:\{x402:0x[0-9a-f]{40}\}(:nonce:[^:]+:[^:]+:0x[0-9a-f]{64}|:nonce:eip155:[0-9]+:0x[0-9a-f]{40}:0x[0-9a-f]{64}(:op:(claim|finish))?|:ledger)$/;
  // Budgets and allowances (SPEC §23): counters, hold parts and operation records under the subject's tag; the stale-hold index.
  const quotaKey = /^tbkeys:\{q:(p:alice|c:203\.0\.113\.7)\}(:c:[a-z]+:[a-z]+\|[0-9]+\|[0-9]+|:hold:q-open|:op:q[rc]:q-[a-z]+)$|^tbkeys:\{quota-holds\}$|^tbkeys:\{rs:[0-9a-z]+\}:qh$/;
  for (const { key } of keys) t.ok(handleKey.test(key) || globalKinds.test(key) || payerKey.test(key) || quotaKey.test(key), `${key} is a handle key, a payer key, a quota key or a known global key`);
  const space0 = new KeySpace(PREFIX);
  t.same(
    keys.filter(({ key }) => key.includes(':hold:') || key.endsWith('{quota-holds}') || key.endsWith(':qh')).map(({ key }) => key).sort(),
    [space0.quotaHold('p:alice', 'q-open'), space0.quotaHoldIndexOf('p:alice', clustered)].sort(),
    'only the open hold part is left, and it is indexed',
  );
  t.ok(keys.some(({ key }) => key === `${PREFIX}{x402:${'0x857b06519e91e3a54538791bdbb0e22373e36b66'}}:ledger`), 'the payer ledger is under the payer tag');
  t.notOk(keys.some(({ key }) => key.includes('tb_s_')), 'no key is named by a fingerprint');
  // The reservation index: one zset standalone; in Cluster one shard per slot, in the handle's slot.
  const open = keys.filter(({ key }) => key === `${PREFIX}{reservations}` || /^tbkeys:\{rs:[0-9a-z]+\}$/.test(key)).map(({ key }) => key);
  t.same(open, [clustered ? new KeySpace(PREFIX).reservationIndexOf('aa11', true) : `${PREFIX}{reservations}`], 'the open reservation is indexed');
  const ttlOf = (key: string): number => keys.find((found) => found.key === PREFIX + key)?.pttl ?? 0;
  const handleTtl = ttlOf('{h:aa11}');
  t.ok(handleTtl > HOUR + HANDLE_GRACE_MS - 60_000 && handleTtl <= HOUR + HANDLE_GRACE_MS, 'a handle key lives one handle TTL plus the grace period of the expiry step');
  const ledgerTtl = ttlOf('{h:aa11}:ledger');
  t.ok(ledgerTtl > HOUR + LEDGER_RETENTION_MS - 60_000 && ledgerTtl <= HOUR + LEDGER_RETENTION_MS, 'a ledger outlives its handle by ledger.retention');
  // The handle-expiry index: one zset standalone; in Cluster one shard per slot, in the handle's slot.
  const expiry = keys.filter(({ key }) => key === `${PREFIX}{handle-expiry}` || /:exp$/.test(key)).map(({ key }) => key).sort();
  const space = new KeySpace(PREFIX);
  t.same(expiry, [...new Set(['aa11', 'bb22'].map((hash) => space.handleExpiryOf(hash, clustered)))].sort(), 'handles holding credits are in the expiry index; an ended one left it');
}

t.test('standalone: every key has a TTL, the prefix and, per handle, the hash tag', async (t) => {
  const server = await startRedis();
  t.teardown(() => server.stop());
  await checkKeys(t, { type: 'redis', redis: { url: server.url, keyPrefix: PREFIX } }, [server.port], false);
});

t.test('cluster: every key on every node has a TTL, the prefix and, per handle, the hash tag', async (t) => {
  const cluster = await startRedisCluster();
  t.teardown(() => cluster.stop());
  await checkKeys(t, { type: 'redis', redis: { url: undefined, cluster: cluster.seeds, keyPrefix: PREFIX } }, cluster.ports, true);
});
