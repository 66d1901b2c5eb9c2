// SPEC §21 "Retried writes are idempotent", against a real redis-server behind a TCP proxy that is
// cut after a script ran and before its reply reached the store: the store runs the script again
// (same attempt) once it has reconnected, and the re-run answers as the first run did. Balances
// and the ledger show each operation applied once.
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { createLogger } from '../../src/observability/logger.js';
import { RedisStore } from '../../src/store/redis.js';
import { quotaWindowStart } from '../../src/store/store.js';
import { startCuttableProxy } from '../helpers/cuttable-proxy.js';
import { startRedis } from '../helpers/redis-server.js';

const server = await startRedis();
t.teardown(() => server.stop());
const proxy = await startCuttableProxy(server.port);
t.teardown(() => proxy.close());

const HOUR = 3_600_000;
const SKU = 'research';
const store = await RedisStore.connect({ type: 'redis', redis: { url: proxy.url, keyPrefix: `tblost${randomBytes(3).toString('hex')}:` } }, { logger: createLogger('silent') });
t.teardown(() => store.close());

async function fundedHandle(credits: number): Promise<string> {
  const handleHash = `h${randomBytes(6).toString('hex')}`;
  await store.createHandle({ handleHash, fingerprint: 'tb_s_lost..repl', principal: null, ttlMs: HOUR });
  await store.grantCredits(handleHash, SKU, credits);
  return handleHash;
}

const spend = (handleHash: string, reservationId: string, cost = 1) => ({
  handleHash, principal: null, sku: SKU, cost, reservationId, reservationDeadline: Date.now() + 60_000, ttlMs: HOUR, bucket: null,
});

const balanceOf = async (handleHash: string): Promise<number> => (await store.getHandle(handleHash))?.balances[SKU] ?? 0;

// Every script is loaded on the server before a cut, so the reply swallowed is the script's own, not a NOSCRIPT.
const warm = await fundedHandle(5);
await store.reserve(spend(warm, 'warm'));
await store.commit(warm, 'warm', 'fetch_readable');

t.test('a reserve whose reply was lost reserves once and answers reserved', async (t) => {
  const handleHash = await fundedHandle(5);
  const before = proxy.swallowed;
  proxy.cutNextReply();
  t.same(await store.reserve(spend(handleHash, 'r1', 2)), { kind: 'reserved', remaining: 3 });
  t.equal(proxy.swallowed, before + 1, 'the first reply was lost');
  t.equal(await balanceOf(handleHash), 3, 'the credits were taken once');
  t.equal(await store.commit(handleHash, 'r1', 'fetch_readable'), 3);
});

t.test('a commit whose reply was lost spends once, writes one spend entry and answers its balance', async (t) => {
  const handleHash = await fundedHandle(5);
  await store.reserve(spend(handleHash, 'c1', 2));
  const before = proxy.swallowed;
  proxy.cutNextReply();
  t.equal(await store.commit(handleHash, 'c1', 'fetch_readable'), 3, 'the re-run answers the balance the first run left');
  t.equal(proxy.swallowed, before + 1, 'the first reply was lost');
  t.equal(await balanceOf(handleHash), 3);
  const entries = await store.ledgerTail(handleHash, 10);
  t.same(entries.map((entry) => [entry.kind, entry.credits, entry.balanceAfter]), [['adjust', 5, 5], ['spend', -2, 3]], 'one spend entry');
});

t.test('a reserve and a commit carrying a budget, each reply lost: the credit and the budget move once', async (t) => {
  const handleHash = await fundedHandle(5);
  const now = Date.now();
  const counter = { name: 'budget:cap', subject: `h:${handleHash}`, windowMs: 86_400_000, windowStart: quotaWindowStart(now, 86_400_000) };
  const quotas = { holdId: 'q1', draws: [{ ...counter, calls: 1, credits: 2, maxCalls: 1, maxCredits: null }], deadline: now + 60_000 };
  let before = proxy.swallowed;
  proxy.cutNextReply();
  t.same(await store.reserve({ ...spend(handleHash, 'q1', 2), quotas }), { kind: 'reserved', remaining: 3 });
  t.equal(proxy.swallowed, before + 1, "the reserve's first reply was lost");
  t.match(await store.quotaUsage([counter]), [{ calls: 1, credits: 2 }], 'the budget was drawn once (maxCalls 1: a second draw would have refused the re-run)');
  before = proxy.swallowed;
  proxy.cutNextReply();
  t.equal(await store.commit(handleHash, 'q1', 'fetch_readable', undefined, { holdId: 'q1', counters: [counter] }), 3);
  t.equal(proxy.swallowed, before + 1, "the commit's first reply was lost");
  t.equal(await balanceOf(handleHash), 3);
  t.match(await store.quotaUsage([counter]), [{ calls: 1, credits: 2 }], 'committed: the draw stays');
  t.equal(await store.releaseStaleQuotas(now + 3_600_000, 100), 0, 'and its hold ended with the commit');
});

t.test('a claim whose reply was lost grants once and tells its caller it claimed', async (t) => {
  const handleHash = await fundedHandle(1);
  const nonce = `n${randomBytes(6).toString('hex')}`;
  const now = Date.now();
  await store.beginCharge({ handleHash, sku: SKU, nonce, snapshot: { label: 'pack', amount: '5.00', currency: 'USD', credits: 10, tool: 'fetch_readable' }, now, ttlMs: 30 * 60_000, firstPollDelayMs: 3_000 });
  await store.attachLink(handleHash, nonce, { providerRef: `ref-${nonce}`, checkoutUrl: 'https://pay.test/x' });
  const before = proxy.swallowed;
  proxy.cutNextReply();
  const claim = await store.claimSettlement({ handleHash, nonce, outcome: 'settled', credits: 10, receivedAmount: '5' });
  t.equal(proxy.swallowed, before + 1, 'the first reply was lost');
  t.match(claim, { claimed: true, balance: 11 }, 'the caller learns it granted the payment');
  t.equal(await balanceOf(handleHash), 11, 'granted once');
  t.equal((await store.ledgerTail(handleHash, 10)).filter((entry) => entry.kind === 'grant').length, 1);
  t.match(await store.claimSettlement({ handleHash, nonce, outcome: 'settled', credits: 10, receivedAmount: '5' }), { claimed: false }, 'any later observer finds it claimed');
});

t.test('negative control: the same reserve run twice without its attempt would take the credits twice', async (t) => {
  // What a retry without the operation record does: the reserve script alone cannot tell a re-run from a new call.
  const handleHash = await fundedHandle(5);
  await store.reserve(spend(handleHash, 'twice', 2));
  await store.reserve(spend(handleHash, 'twice', 2));
  t.equal(await balanceOf(handleHash), 1, 'two runs, two debits, one reservation record');
});
