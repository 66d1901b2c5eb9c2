// Negative controls for the ledger property (property-model.ts): deliberately broken stores, each
// MemoryStore with one fault, must make the property fail. If one of these ever passes, the property
// has become vacuous for that fault. The payment-policy fault keeps the ledger self-consistent (its
// grant entries match its charge records and verify cleanly), so only the oracle model catches it.
import t from 'tap';
import { MemoryStore } from '../../src/store/memory.js';
import type { Attempt, ClaimResult, SettlementClaim } from '../../src/store/store.js';
import { propertyHolds } from './property-model.js';

const RUNS = 60;

/** Grants a settled charge's credits twice: once with the claim, once more as an operator grant. */
class DoubleGrantStore extends MemoryStore {
  override async claimSettlement(claim: SettlementClaim): Promise<ClaimResult> {
    const result = await super.claimSettlement(claim);
    if (result.claimed && claim.credits > 0 && result.charge) await super.grantCredits(claim.handleHash, result.charge.sku, claim.credits, 'settlement');
    return result;
  }
}

/** Answers a commit as done but gives the credits back: a call delivered and never charged. */
class LostCommitStore extends MemoryStore {
  override async commit(handleHash: string, reservationId: string, _tool?: string, attempt?: Attempt): Promise<number | null> {
    const balance = await super.release(handleHash, reservationId, attempt);
    return balance;
  }
}

/** Grants a partial payment the whole pack (its charge record and grant entry agree: the ledger verifies). */
class PartialAsFullStore extends MemoryStore {
  override async claimSettlement(claim: SettlementClaim): Promise<ClaimResult> {
    return super.claimSettlement(claim.outcome === 'settled' && claim.credits > 0 ? { ...claim, credits: 20 } : claim);
  }
}

const broken = { DoubleGrantStore, LostCommitStore, PartialAsFullStore };

for (const [name, Broken] of Object.entries(broken)) {
  t.test(`the property catches ${name}`, async (t) => {
    const error = await propertyHolds(async (clock) => new Broken({ now: () => clock.at }), RUNS, true).then(
      () => null,
      (caught: Error) => caught,
    );
    t.match(error?.message, /Property failed/, `${name}: a counterexample within ${RUNS} runs`);
    // One of the property's own checks failed (not a crash of the run).
    t.match((error?.cause as Error | undefined)?.message, /^(ledger verify|spend entries|adjust entries|grant entries|model:|payment policy)/, String((error?.cause as Error | undefined)?.message));
  });
}

t.test('the same property holds on MemoryStore (the control of the controls)', async (t) => {
  t.match(await propertyHolds(async (clock) => new MemoryStore({ now: () => clock.at }), RUNS, true), { runs: RUNS });
});

t.test('PartialAsFullStore passes every ledger check: only the payment-policy model catches it', async (t) => {
  const error = await propertyHolds(async (clock) => new PartialAsFullStore({ now: () => clock.at }), RUNS, true).then(
    () => null,
    (caught: Error) => caught,
  );
  // fast-check's report names the counterexample; the property's own error is its cause.
  t.match((error?.cause as Error | undefined)?.message, /payment policy: 2\.50 received should grant 10 credits, the charge granted 20/, 'the model names the fault');
});
