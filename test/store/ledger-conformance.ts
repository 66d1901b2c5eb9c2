// The ledger behaviours (SPEC §17) every Store must show, run by conformance.ts for each store:
// an entry for each credit movement, written in the same step; nothing for a reservation or a
// release; an expiry step that writes off what an ended handle held; reads for export and verify.
import type { Test } from 'tap';
import { verifyLedger, type Mismatch } from '../../src/ledger/verify.js';
import { entryHash, GENESIS_HASH } from '../../src/store/ledger-chain.js';
import type { LedgerAccount, LedgerEntry, Store } from '../../src/store/store.js';
import type { StoreFixture } from './conformance.js';

type Behaviour = (title: string, body: (f: StoreFixture, t: Test) => Promise<void>) => void;

const HOUR = 3_600_000;
const SKU = 'research';

const handleAccount = (handleHash: string): LedgerAccount => ({ kind: 'handle', handleHash });

/** Every entry of one ledger, through the paged read. */
export async function allEntries(store: Store, account: LedgerAccount, page = 2): Promise<LedgerEntry[]> {
  const out: LedgerEntry[] = [];
  let after: { at: number; seq: number } | undefined;
  for (;;) {
    const got = await store.readLedger(account, { after, limit: page });
    out.push(...got);
    const last = got.at(-1);
    if (!last || got.length < page) return out;
    after = { at: last.at, seq: last.seq };
  }
}

/** The expiry step until it has nothing left (Redis Cluster walks 1/16 of the slots per call). */
export async function expireAll(store: Store, now: number): Promise<number> {
  let ended = 0;
  for (let pass = 0; pass < 17; pass++) ended += await store.expireHandles(now, 1_000);
  return ended;
}

export async function verified(store: Store): Promise<{ mismatches: Mismatch[]; entries: number; accounts: number }> {
  const mismatches: Mismatch[] = [];
  const report = await verifyLedger(store, (mismatch) => void mismatches.push(mismatch));
  return { mismatches, entries: report.entries, accounts: report.accounts };
}

export function ledgerBehaviours(behaviour: Behaviour): void {
  behaviour('ledger: a settlement writes one grant entry with the nonce, the amount received and the credits', async (f, t) => {
    const handleHash = await f.handle({ fingerprint: 'tb_s_gran..t001' });
    const charge = await f.pendingCharge(handleHash);
    await f.settle(handleHash, charge, 10);
    await f.settle(handleHash, charge, 10); // already claimed: no second entry
    const entries = await allEntries(f.store, handleAccount(handleHash));
    t.match(entries, [{ seq: 1, at: f.clock.now(), kind: 'grant', sku: SKU, credits: 10, balanceAfter: 10, ref: charge.nonce, amount: '5.00', currency: 'USD', fingerprint: 'tb_s_gran..t001' }]);
    t.equal(entries.length, 1, 'exactly one entry for one claim');
    const text = JSON.stringify(entries);
    t.notOk(text.includes(charge.providerRef as string) || text.includes('https://'), 'no link id or URL in an entry');
  });

  behaviour('ledger: an underpaid settlement writes a grant entry of 0 credits (every payment has its line)', async (f, t) => {
    const handleHash = await f.handle();
    const charge = await f.pendingCharge(handleHash);
    await f.store.claimSettlement({ handleHash, nonce: charge.nonce, outcome: 'underpaid', credits: 0, receivedAmount: '0.20' });
    t.match(await f.store.ledgerTail(handleHash, 10), [{ seq: 1, kind: 'grant', credits: 0, balanceAfter: 0, ref: charge.nonce, amount: '0.20' }]);
  });

  behaviour('ledger: an operator grant writes an adjust entry with its reason', async (f, t) => {
    const handleHash = await f.handle();
    t.equal(await f.store.grantCredits(handleHash, SKU, 4, 'refund for ticket 1234'), 4);
    t.match(await f.store.ledgerTail(handleHash, 10), [{ seq: 1, kind: 'adjust', sku: SKU, credits: 4, balanceAfter: 4, ref: null, reason: 'refund for ticket 1234' }]);
  });

  behaviour('ledger: a reservation and a release write nothing; a commit writes a spend entry with the tool and the reservation id as ref', async (f, t) => {
    const handleHash = await f.handle({ credits: 5 });
    await f.spend(handleHash, { reservationId: 'r-released', cost: 2 });
    await f.store.release(handleHash, 'r-released');
    t.equal((await f.store.ledgerTail(handleHash, 10)).length, 1, 'only the grant so far');
    await f.spend(handleHash, { reservationId: 'r-held', cost: 1 });
    await f.spend(handleHash, { reservationId: 'r-committed', cost: 2 });
    t.equal(await f.store.commit(handleHash, 'r-committed', 'extract_tables'), 2, 'the available balance, as before');
    const [, spend] = await f.store.ledgerTail(handleHash, 10);
    // balanceAfter counts what the handle owns: 2 available + 1 still reserved by r-held.
    t.match(spend, { seq: 2, kind: 'spend', sku: SKU, credits: -2, balanceAfter: 3, ref: 'r-committed', tool: 'extract_tables' });
    t.equal(await f.store.commit(handleHash, 'r-committed', 'extract_tables'), null);
    t.equal((await f.store.ledgerTail(handleHash, 10)).length, 2, 'a second commit of the same reservation writes nothing');
    t.same((await verified(f.store)).mismatches, [], 'the ledger agrees with balance + reservations');
  });

  behaviour('ledger: seq grows by one per entry and time never goes back within a ledger', async (f, t) => {
    const handleHash = await f.handle({ credits: 10 });
    f.clock.advance(-60_000); // another replica's clock, a minute behind
    await f.spend(handleHash, { reservationId: 'r1' });
    await f.store.commit(handleHash, 'r1');
    const entries = await allEntries(f.store, handleAccount(handleHash));
    t.same(entries.map((entry) => entry.seq), [1, 2]);
    t.ok((entries[1] as LedgerEntry).at >= (entries[0] as LedgerEntry).at, 'the later entry is not dated before the earlier one');
  });

  behaviour('ledger: 60 concurrent commits on one handle get 60 distinct consecutive seqs and the ledger verifies', async (f, t) => {
    const handleHash = await f.handle({ credits: 60 });
    const ids = Array.from({ length: 60 }, (_, i) => `r${i}`);
    await Promise.all(ids.map((reservationId) => f.spend(handleHash, { reservationId })));
    await Promise.all(ids.map((id, i) => (i % 3 === 0 ? f.store.release(handleHash, id) : f.store.commit(handleHash, id, 'fetch_readable'))));
    const entries = await allEntries(f.store, handleAccount(handleHash), 7);
    t.same(entries.map((entry) => entry.seq), Array.from({ length: 41 }, (_, i) => i + 1), 'grant + 40 spends, seq 1..41');
    t.equal(entries.filter((entry) => entry.kind === 'spend').length, 40);
    t.same((await verified(f.store)).mismatches, []);
  });

  behaviour('ledger: the expiry step writes off what an ended handle held (balance and reservations) and the ledger still verifies', async (f, t) => {
    const handleHash = await f.handle({ credits: 9, ttlMs: HOUR, fingerprint: 'tb_s_expi..re01' });
    await f.spend(handleHash, { reservationId: 'r-open', cost: 2, reservationDeadline: f.clock.now() + 2 * HOUR });
    t.equal(await expireAll(f.store, f.clock.now()), 0, 'a live handle is not ended');
    const expiresAt = (await f.store.getHandle(handleHash))?.expiresAt as number;
    f.clock.advance(expiresAt - f.clock.now());
    t.equal(await f.store.commit(handleHash, 'r-open'), null, 'a commit after the end of life spends nothing');
    // The memory store ends a handle at the first look after its end of life (the commit above);
    // Redis in the reconciler's expiry step. Either way once.
    t.ok((await expireAll(f.store, f.clock.now())) <= 1);
    t.equal(await expireAll(f.store, f.clock.now()), 0, 'once');
    const entries = await allEntries(f.store, handleAccount(handleHash));
    t.match(entries.at(-1), { kind: 'expire', sku: SKU, credits: -9, balanceAfter: 0, fingerprint: 'tb_s_expi..re01', at: expiresAt });
    t.equal(entries.filter((entry) => entry.kind === 'expire').length, 1);
    t.equal(await f.store.getHandle(handleHash), null);
    t.same((await verified(f.store)).mismatches, [], 'the ledger verifies after the handle expired');
  });

  behaviour('ledger: a handle slid by a call is not ended at its old expiry', async (f, t) => {
    const handleHash = await f.handle({ credits: 3, ttlMs: HOUR });
    f.clock.advance(HOUR / 2);
    await f.spend(handleHash, { reservationId: 'r1', ttlMs: HOUR });
    await f.store.commit(handleHash, 'r1');
    f.clock.advance(HOUR / 2 + 1);
    t.equal(await expireAll(f.store, f.clock.now()), 0);
    t.equal(await f.balance(handleHash), 2);
  });

  behaviour('ledger: a payment claimed after the handle ended writes a grant of 0 under the same fingerprint', async (f, t) => {
    const handleHash = await f.handle({ credits: 2, fingerprint: 'tb_s_late..pay1' });
    const charge = await f.pendingCharge(handleHash);
    f.clock.advance(HOUR);
    await expireAll(f.store, f.clock.now());
    t.match(await f.settle(handleHash, charge, 10), { claimed: true, charge: { grantedCredits: 0 } });
    const entries = await allEntries(f.store, handleAccount(handleHash));
    t.match(entries.map((entry) => [entry.kind, entry.credits, entry.balanceAfter, entry.fingerprint]), [
      ['adjust', 2, 2, 'tb_s_late..pay1'],
      ['expire', -2, 0, 'tb_s_late..pay1'],
      ['grant', 0, 0, 'tb_s_late..pay1'],
    ]);
    t.same((await verified(f.store)).mismatches, []);
  });

  behaviour('ledger: a settled x402 call writes an x402_settle entry under the payer; an unsettled one writes nothing', async (f, t) => {
    const { nonceClaim } = await import('./conformance.js');
    const claim = nonceClaim(f.clock, { payer: `0x${'ab'.repeat(20)}`, amount: '30000', tool: 'extract_tables' });
    await f.store.claimPaymentNonce(claim);
    const tx = `0x${'cd'.repeat(32)}`;
    await f.store.finishPaymentNonce(claim, { state: 'settled', transaction: tx, at: f.clock.now() });
    const unsettled = nonceClaim(f.clock, { payer: claim.payer });
    await f.store.claimPaymentNonce(unsettled);
    await f.store.finishPaymentNonce(unsettled, { state: 'not_settled', transaction: null, at: f.clock.now() });
    const account: LedgerAccount = { kind: 'payer', payer: claim.payer };
    t.match(await allEntries(f.store, account), [
      { seq: 1, kind: 'x402_settle', sku: SKU, credits: 0, balanceAfter: 0, ref: claim.nonce, tool: 'extract_tables', amount: '30000', network: claim.network, asset: claim.asset, payer: claim.payer, transaction: tx },
    ]);
    t.equal((await allEntries(f.store, account)).length, 1);
    const accounts: LedgerAccount[] = [];
    for await (const found of f.store.ledgerAccounts()) accounts.push(found);
    t.same(accounts, [account], 'the payer ledger is listed');
  });

  behaviour('ledger: every entry chains to the one before it (prev = SHA-256 of its canonical JSON; the first is 64 zeros)', async (f, t) => {
    const handleHash = await f.handle({ fingerprint: 'tb_s_chai..n001' });
    const charge = await f.pendingCharge(handleHash);
    await f.settle(handleHash, charge, 10);
    // Characters where JSON writers differ: "/", U+007F, U+2028, non-BMP, quotes, backslashes, controls.
    await f.store.grantCredits(handleHash, SKU, 2, 'a/b \u007f \u2028 😀 "q" \\ \u0001\ttab é');
    const spend = f.spendRequest(handleHash);
    await f.store.reserve(spend);
    await f.store.commit(handleHash, spend.reservationId, 'srv/fetch_readable');
    const entries = await allEntries(f.store, handleAccount(handleHash));
    t.equal(entries.length, 3);
    t.equal(entries[0]?.prev, GENESIS_HASH, 'the first entry chains to 64 zeros');
    for (let i = 1; i < entries.length; i++) t.equal(entries[i]?.prev, entryHash(entries[i - 1] as LedgerEntry), `entry ${i + 1} chains to entry ${i}`);
    t.match(entries[1], { reason: 'a/b \u007f \u2028 😀 "q" \\ \u0001\ttab é' }, 'the reason is kept as given');

    const { nonceClaim } = await import('./conformance.js');
    const payer = `0x${'ef'.repeat(20)}`;
    for (const tool of ['a', 'b/c']) {
      const claim = nonceClaim(f.clock, { payer, tool });
      await f.store.claimPaymentNonce(claim);
      await f.store.finishPaymentNonce(claim, { state: 'settled', transaction: tool === 'a' ? null : `0x${'12'.repeat(32)}`, at: f.clock.now() });
    }
    const x402 = await allEntries(f.store, { kind: 'payer', payer });
    t.equal(x402[0]?.prev, GENESIS_HASH);
    t.equal(x402[1]?.prev, entryHash(x402[0] as LedgerEntry), 'a payer ledger chains the same way');
  });

  behaviour('ledger: accounts list every ledger once, and handles without one only when asked', async (f, t) => {
    const funded = await f.handle({ credits: 1 });
    const bare = await f.handle();
    const listed = async (options?: { unledgeredHandles?: boolean }): Promise<string[]> => {
      const out: string[] = [];
      for await (const account of f.store.ledgerAccounts(options)) if (account.kind === 'handle') out.push(account.handleHash);
      return out.sort();
    };
    t.same(await listed(), [funded]);
    t.same(await listed({ unledgeredHandles: true }), [funded, bare].sort());
    t.equal(await f.store.ledgerCheckpoint(handleAccount(bare)), null, 'a handle that holds nothing and has no ledger has nothing to check');
  });

  behaviour('ledger: a checkpoint names the last entry and the holdings per SKU', async (f, t) => {
    const handleHash = await f.handle({ credits: 5, fingerprint: 'tb_s_chec..kpt1' });
    await f.store.grantCredits(handleHash, 'archive', 3);
    await f.spend(handleHash, { reservationId: 'r1', cost: 2 });
    t.match(await f.store.ledgerCheckpoint(handleAccount(handleHash)), {
      fingerprint: 'tb_s_chec..kpt1',
      lastSeq: 2,
      holdings: { [SKU]: { balance: 3, reserved: 2 }, archive: { balance: 3, reserved: 0 } },
    });
  });

  behaviour('ledger: reads page by entry and filter by time (since inclusive, until exclusive)', async (f, t) => {
    const handleHash = await f.handle();
    const start = f.clock.now();
    for (let i = 0; i < 5; i++) {
      await f.store.grantCredits(handleHash, SKU, 1);
      f.clock.advance(1_000);
    }
    const account = handleAccount(handleHash);
    t.same((await allEntries(f.store, account, 2)).map((entry) => entry.seq), [1, 2, 3, 4, 5]);
    t.same((await f.store.readLedger(account, { since: start + 1_000, until: start + 3_000, limit: 10 })).map((entry) => entry.seq), [2, 3]);
    t.same((await f.store.readLedger(account, { through: { at: start + 1_000, seq: 2 }, limit: 10 })).map((entry) => entry.seq), [1, 2]);
    t.same((await f.store.ledgerTail(handleHash, 2)).map((entry) => entry.seq), [4, 5], 'the tail, oldest first');
  });
}
