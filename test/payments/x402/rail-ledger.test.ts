// SPEC §19 + §17: every settled x402 call is one `x402_settle` entry in the payer address's ledger,
// written by the store step that records the settlement; a call not settled (the charge policy
// released it, or the facilitator refused) writes none. Through the real rail, the fake facilitator
// checking real signatures, and a memory and a Redis store.
import { randomBytes } from 'node:crypto';
import t, { type Test } from 'tap';
import { verifyLedger } from '../../../src/ledger/verify.js';
import { createLogger } from '../../../src/observability/logger.js';
import { MemoryStore } from '../../../src/store/memory.js';
import { RedisStore } from '../../../src/store/redis.js';
import type { LedgerEntry, Store } from '../../../src/store/store.js';
import { startFakeFacilitator } from '../../helpers/x402-facilitator.js';
import { newPayer } from '../../helpers/x402-payer.js';
import { startRedis } from '../../helpers/redis-server.js';
import { call, makeRail, paidParams, paymentRequiredOf, plainChallenge, TERMS } from './fixtures.js';

async function payerEntries(store: Store, payer: string): Promise<LedgerEntry[]> {
  return store.readLedger({ kind: 'payer', payer }, { limit: 100 });
}

async function scenario(t: Test, store: Store): Promise<void> {
  const fake = await startFakeFacilitator();
  t.teardown(() => fake.close());
  const { rail, facilitator } = makeRail(store, fake.url);
  t.teardown(() => facilitator.close());
  const paymentRequired = paymentRequiredOf(rail.challengeAdditions(call(), plainChallenge()));
  const payer = newPayer();
  const address = payer.address.toLowerCase();
  const authorise = async () => {
    const answer = await rail.authorise(call(), paidParams(await payer.pay(paymentRequired)));
    if (answer.kind !== 'verified') throw new Error(`expected verified, got ${answer.kind}`);
    return answer.claim;
  };

  const settled = await rail.conclude(await authorise(), { wouldCommit: true });
  if (settled.kind !== 'deliver') throw new Error(`expected deliver, got ${settled.kind}`);
  const transaction = settled.meta['x402/payment-response'].transaction;
  await rail.conclude(await authorise(), { wouldCommit: false, reason: 'tool_error' });
  const refused = await authorise();
  fake.failSettle({ mode: 'refuse', reason: 'invalid_exact_evm_insufficient_balance' });
  await rail.conclude(refused, { wouldCommit: true });

  const entries = await payerEntries(store, address);
  t.match(entries, [{ seq: 1, kind: 'x402_settle', sku: 'research', credits: 0, balanceAfter: 0, tool: 'fetch_readable', amount: '20000', network: TERMS.network, payer: address, transaction }]);
  t.equal(entries.length, 1, 'the released and the refused calls wrote nothing');
  t.match(entries[0]?.ref, /^0x[0-9a-f]{64}$/, 'ref is the authorization nonce');
  const mismatches: unknown[] = [];
  t.match(await verifyLedger(store, (mismatch) => void mismatches.push(mismatch)), { accounts: 1, entries: 1, mismatches: 0 });
}

t.test('memory: one x402_settle entry per settled call, none otherwise', async (t) => {
  await scenario(t, new MemoryStore());
});

t.test('Redis: one x402_settle entry per settled call, under the payer tag', async (t) => {
  const server = await startRedis();
  t.teardown(() => server.stop());
  const store = await RedisStore.connect({ type: 'redis', redis: { url: server.url, keyPrefix: `tbx402l${randomBytes(3).toString('hex')}:` } }, { logger: createLogger('silent') });
  t.teardown(() => store.close());
  await scenario(t, store);
});
