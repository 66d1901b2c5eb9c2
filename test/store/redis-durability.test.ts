// store.redis.durability: replicated (SPEC §21) against a real primary and replica: every money
// write is followed by WAIT on its connection, and a write the replica did not acknowledge (the
// replica hung with SIGSTOP) has the consequence the contract gives it: no link shown, a claim
// treated as not done, a commit delivered and counted, an operator grant refused with a warning.
import { randomBytes } from 'node:crypto';
import { Writable } from 'node:stream';
import t from 'tap';
import { createLogger } from '../../src/observability/logger.js';
import { RedisStore } from '../../src/store/redis.js';
import { cli, startRedis } from '../helpers/redis-server.js';
import { nonceClaim, ManualClock } from './conformance.js';

const primary = await startRedis();
t.teardown(() => primary.stop());
const replica = await startRedis({ replicaOf: primary.port });
t.teardown(() => replica.stop());

const HOUR = 3_600_000;
const SKU = 'research';
const SNAPSHOT = { label: 'pack', amount: '5.00', currency: 'USD', credits: 10, tool: 'fetch_readable' };
const lines: string[] = [];
const sink = new Writable({ write(chunk: Buffer, _encoding, done) { lines.push(chunk.toString()); done(); } });

/** waitTimeout 400 ms, the most the config allows: a healthy replica's answer must never miss it on a busy machine (at 50 ms it did, under load). */
async function open(durability: 'none' | 'replicated', waitReplicas = 1, waitTimeout = 400): Promise<RedisStore> {
  const redis = { url: primary.url, keyPrefix: `tbdur${randomBytes(3).toString('hex')}:`, durability, waitReplicas, waitTimeout };
  const store = await RedisStore.connect({ type: 'redis', redis }, { logger: createLogger('warn', sink) });
  t.teardown(() => store.close());
  return store;
}

async function fundedHandle(store: RedisStore, credits: number, fingerprint = 'tb_s_dura..bl11'): Promise<string> {
  const handleHash = `h${randomBytes(6).toString('hex')}`;
  await store.createHandle({ handleHash, fingerprint, principal: null, ttlMs: HOUR });
  if (credits > 0) await store.grantCredits(handleHash, SKU, credits);
  return handleHash;
}

const spend = (handleHash: string, reservationId: string) => ({ handleHash, principal: null, sku: SKU, cost: 1, reservationId, reservationDeadline: Date.now() + 60_000, ttlMs: HOUR, bucket: null });

async function openCharge(store: RedisStore, handleHash: string): Promise<string> {
  const nonce = `n${randomBytes(6).toString('hex')}`;
  await store.beginCharge({ handleHash, sku: SKU, nonce, snapshot: SNAPSHOT, now: Date.now(), ttlMs: 30 * 60_000, firstPollDelayMs: 3_000 });
  return nonce;
}

/** Runs `work` while the replica is hung (SIGSTOP): WAIT then times out with 0 replicas. */
async function withReplicaHung<T>(work: () => Promise<T>): Promise<T> {
  replica.kill('SIGSTOP');
  try {
    return await work();
  } finally {
    replica.kill('SIGCONT');
  }
}

t.test('with a healthy replica every money write goes through and nothing is counted', async (t) => {
  const store = await open('replicated');
  const handleHash = await fundedHandle(store, 3);
  const nonce = await openCharge(store, handleHash);
  t.match(await store.attachLink(handleHash, nonce, { providerRef: `ref-${nonce}`, checkoutUrl: 'https://pay.test/a' }), { status: 'pending' });
  t.match(await store.claimSettlement({ handleHash, nonce, outcome: 'settled', credits: 10, receivedAmount: '5' }), { claimed: true, balance: 13 });
  await store.reserve(spend(handleHash, 'r1'));
  t.equal(await store.commit(handleHash, 'r1', 'fetch_readable'), 12);
  t.same(store.unreplicatedWrites(), {});
});

t.test('a charge the replica did not acknowledge shows no link and is never offered again', async (t) => {
  const store = await open('replicated');
  const handleHash = await fundedHandle(store, 0);
  const nonce = await openCharge(store, handleHash);
  await withReplicaHung(() =>
    t.rejects(store.attachLink(handleHash, nonce, { providerRef: `ref-${nonce}`, checkoutUrl: 'https://pay.test/b' }), { code: 'TB_ERR_STORE_UNAVAILABLE', message: /not acknowledged by 1 replica within 400 ms, so its link is not shown/ }),
  );
  t.match(await store.getCharge(handleHash, nonce), { status: 'abandoned' }, 'abandoned: still polled, so a payment on it is granted');
  const next = await store.beginCharge({ handleHash, sku: SKU, nonce: `n${randomBytes(6).toString('hex')}`, snapshot: SNAPSHOT, now: Date.now(), ttlMs: 30 * 60_000, firstPollDelayMs: 3_000 });
  t.equal(next.kind, 'begun', 'the next challenge opens a new link');
  t.same(store.unreplicatedWrites(), { charge: 1 });
});

t.test('a pending link is shown again only once the replica has it (a resumed, replaced primary must not hand out a link its replacement never had)', async (t) => {
  const store = await open('replicated');
  const handleHash = await fundedHandle(store, 0);
  const nonce = await openCharge(store, handleHash);
  await store.attachLink(handleHash, nonce, { providerRef: `ref-${nonce}`, checkoutUrl: 'https://pay.test/again' });
  const again = () => store.beginCharge({ handleHash, sku: SKU, nonce: `n${randomBytes(6).toString('hex')}`, snapshot: SNAPSHOT, now: Date.now(), ttlMs: 30 * 60_000, firstPollDelayMs: 3_000 });
  await withReplicaHung(() => t.rejects(again(), { code: 'TB_ERR_STORE_UNAVAILABLE', message: /so its link is not shown again/ }));
  t.match(await again(), { kind: 'existing', charge: { nonce, checkoutUrl: 'https://pay.test/again' } }, 'with the replica back, the same link');
  t.same(store.unreplicatedWrites(), { charge: 1 });
});

t.test('a claim the replica did not acknowledge counts as not done; the next read finds it and grants nothing twice', async (t) => {
  const store = await open('replicated');
  const handleHash = await fundedHandle(store, 0);
  const nonce = await openCharge(store, handleHash);
  await store.attachLink(handleHash, nonce, { providerRef: `ref-${nonce}`, checkoutUrl: 'https://pay.test/c' });
  const claim = { handleHash, nonce, outcome: 'settled' as const, credits: 10, receivedAmount: '5' };
  await withReplicaHung(() => t.rejects(store.claimSettlement(claim), { code: 'TB_ERR_STORE_UNAVAILABLE', message: /counts as not done/ }));
  // No failover happened, so the primary kept the grant: the reconciler's next claim finds it.
  t.match(await store.claimSettlement(claim), { claimed: false, balance: 10 });
  t.equal((await store.ledgerTail(handleHash, 10)).filter((entry) => entry.kind === 'grant').length, 1);
  t.same(store.unreplicatedWrites(), { claim: 1 });
});

t.test('a commit the replica did not acknowledge is delivered, counted and logged with the fingerprint', async (t) => {
  const store = await open('replicated');
  const handleHash = await fundedHandle(store, 2, 'tb_s_comm..it42');
  await store.reserve(spend(handleHash, 'r1'));
  const before = lines.length;
  t.equal(await withReplicaHung(() => store.commit(handleHash, 'r1', 'fetch_readable')), 1, 'the balance is answered: the result goes out');
  t.same(store.unreplicatedWrites(), { commit: 1 });
  const logged = lines.slice(before).map((line) => JSON.parse(line) as Record<string, unknown>).find((line) => line.evt === 'store_unreplicated');
  t.match(logged, { op: 'commit', fingerprint: 'tb_s_comm..it42' });
  t.notOk(JSON.stringify(logged).includes(handleHash), 'never the handle hash');
});

t.test('concurrent money writes share WAITs instead of queueing one whole timeout each behind the others', async (t) => {
  const store = await open('replicated', 1, 200);
  const handleHash = await fundedHandle(store, 20);
  for (let i = 0; i < 20; i++) await store.reserve(spend(handleHash, `w${i}`));
  const waits = (): number => Number(/cmdstat_wait:calls=(\d+)/.exec(cli(primary.port, 'info', 'commandstats'))?.[1] ?? 0);
  const before = waits();
  const balances = await withReplicaHung(() => Promise.all(Array.from({ length: 20 }, (_, i) => store.commit(handleHash, `w${i}`))));
  t.same(balances.filter((balance) => balance === null), [], 'every commit applied and answered');
  t.same(store.unreplicatedWrites(), { commit: 20 }, 'each one counted');
  const sent = waits() - before;
  // One WAIT each would be 20 in a row, 4 s at 200 ms: the whole process's store calls stalled behind them.
  t.ok(sent >= 1 && sent <= 4, `20 commits were covered by ${sent} WAIT rounds`);
});

t.test('an operator grant and an x402 nonce claim the replica did not acknowledge are refused', async (t) => {
  const store = await open('replicated');
  const handleHash = await fundedHandle(store, 0);
  await withReplicaHung(async () => {
    await t.rejects(store.grantCredits(handleHash, SKU, 5, 'goodwill'), { code: 'TB_ERR_STORE_UNAVAILABLE', message: /tollbooth handle show/ });
    await t.rejects(store.claimPaymentNonce(nonceClaim(new ManualClock())), { code: 'TB_ERR_STORE_UNAVAILABLE' });
  });
  t.same(store.unreplicatedWrites(), { adjust: 1, x402_claim: 1 });
});

t.test('durability none issues no WAIT: a hung replica changes nothing', async (t) => {
  const store = await open('none');
  const handleHash = await fundedHandle(store, 1);
  const nonce = await openCharge(store, handleHash);
  await withReplicaHung(async () => {
    t.match(await store.attachLink(handleHash, nonce, { providerRef: `ref-${nonce}`, checkoutUrl: 'https://pay.test/d' }), { status: 'pending' });
    await store.reserve(spend(handleHash, 'r1'));
    t.equal(await store.commit(handleHash, 'r1'), 0);
  });
  t.same(store.unreplicatedWrites(), {});
});

t.test('at start the store says when waitReplicas cannot keep its promise: more replicas than it waits for, or fewer', async (t) => {
  const replicasLogged = async (store: RedisStore): Promise<Record<string, unknown>[]> => {
    const before = lines.length;
    await store.reportReplicaCoverage();
    return lines.slice(before).map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.evt === 'store_replicas');
  };
  t.same(await replicasLogged(await open('replicated', 1)), [], 'one replica, waitReplicas 1: nothing to say');
  t.same(await replicasLogged(await open('none', 1)), [], 'durability none: nothing to say');
  t.match(await replicasLogged(await open('replicated', 2)), [{ level: 'warn', waitReplicas: 2, connectedReplicas: 1, msg: /every money write will wait 400 ms and count as not acknowledged/ }]);

  const second = await startRedis({ replicaOf: primary.port });
  t.teardown(() => second.stop());
  t.match(await replicasLogged(await open('replicated', 1)), [{ level: 'warn', waitReplicas: 1, connectedReplicas: 2, msg: /set waitReplicas to 2/ }]);
  t.same(await replicasLogged(await open('replicated', 2)), [], 'waitReplicas equal to the replicas: nothing to say');
});
