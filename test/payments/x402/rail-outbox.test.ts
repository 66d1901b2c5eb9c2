// The x402 rail's settlement record through the durable outbox (SPEC §21): a settled call's record is
// stored when the store takes it, queued in the outbox file when it does not, and the result is
// delivered either way (the payer paid); if even the file cannot take it, one error line carries the
// whole record for the operator. Real fake facilitator over HTTP, payloads signed by the x402 client.
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { systemClock } from '../../../src/clock.js';
import { GatewayError } from '../../../src/errors.js';
import { createMetrics } from '../../../src/observability/metrics.js';
import { FacilitatorClient } from '../../../src/payments/x402/facilitator.js';
import { X402Rail } from '../../../src/payments/x402/rail.js';
import { MemoryStore } from '../../../src/store/memory.js';
import { Outbox } from '../../../src/store/outbox.js';
import { startFakeFacilitator } from '../../helpers/x402-facilitator.js';
import { newPayer } from '../../helpers/x402-payer.js';
import { call, LogCapture, paidParams, paymentRequiredOf, plainChallenge, TERMS } from './fixtures.js';

async function setup(t: Test, outboxFor: (store: MemoryStore, log: LogCapture) => Pick<Outbox, 'submit'>) {
  const fake = await startFakeFacilitator();
  t.teardown(() => fake.close());
  const store = new MemoryStore();
  const log = new LogCapture();
  const metrics = createMetrics(async () => 0);
  const facilitator = new FacilitatorClient({ url: fake.url, logger: log.logger, metrics });
  t.teardown(() => facilitator.close());
  const rail = new X402Rail({ terms: TERMS, facilitator, store, outbox: outboxFor(store, log), logger: log.logger, metrics });
  const payer = newPayer();
  const payload = await payer.pay(paymentRequiredOf(rail.challengeAdditions(call(), plainChallenge())));
  const answer = await rail.authorise(call(), paidParams(payload));
  if (answer.kind !== 'verified') throw new Error(`expected verified, got ${answer.kind}`);
  return { rail, store, log, payer, claim: answer.claim };
}

const x402Rows = async (store: MemoryStore, payer: string) => (await store.readLedger({ kind: 'payer', payer: payer.toLowerCase() }, { limit: 10 })).filter((entry) => entry.kind === 'x402_settle');

t.test('the store takes the record: delivered, one x402_settle entry, the claim settled', async (t) => {
  const { rail, store, log, payer, claim } = await setup(t, (store, log) => new Outbox({ store, dir: null, logger: log.logger, clock: systemClock }));
  const conclusion = await rail.conclude(claim, { wouldCommit: true });
  t.equal(conclusion.kind, 'deliver');
  t.equal((await x402Rows(store, payer.address)).length, 1);
  t.match(await store.getPaymentNonce(claim.key), { state: 'settled' });
  t.notOk(log.entries().some((entry) => entry.evt === 'outbox_queued'));
});

t.test('the store refuses the record: delivered anyway, the record waits in the outbox file', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'tb-rail-outbox-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const { rail, store, log, payer, claim } = await setup(t, (store, log) => {
    store.recordX402Settlement = () => Promise.reject(new GatewayError('TB_ERR_STORE_UNAVAILABLE', 'the store is down'));
    const outbox = new Outbox({ store, dir: root, logger: log.logger, clock: systemClock });
    t.teardown(() => outbox.close());
    return outbox;
  });
  const conclusion = await rail.conclude(claim, { wouldCommit: true });
  t.equal(conclusion.kind, 'deliver', 'the payer paid: the result goes out');
  t.equal(readdirSync(root).length, 1, 'one record in the file');
  t.equal((await x402Rows(store, payer.address)).length, 0, 'not in the store yet');
  t.ok(log.entries().some((entry) => entry.evt === 'outbox_queued'));
});

t.test('neither the store nor the file takes it: delivered, and one error line carries the whole record', async (t) => {
  const { rail, log, claim } = await setup(t, () => ({ submit: () => Promise.reject(new Error('EROFS')) }));
  const conclusion = await rail.conclude(claim, { wouldCommit: true });
  t.equal(conclusion.kind, 'deliver');
  const lost = log.entries().filter((entry) => entry.evt === 'x402_record_lost');
  t.equal(lost.length, 1);
  t.match(lost[0], { level: 'error', payer: claim.payer, nonce: claim.key.nonce, network: claim.key.network, amount: claim.requirements.amount, transaction: /^0x[0-9a-f]{64}$/ });
});
