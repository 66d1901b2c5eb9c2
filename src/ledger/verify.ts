// `tollbooth ledger verify` (SPEC §17): recomputes each handle's credits from its entries and compares
// them with what the store holds — the stored balance plus the credits its reservations hold (a
// reservation is not an entry: the ledger counts what the handle owns, the balance what it can still
// reserve). Each ledger is checked against a checkpoint taken in one atomic step (its last entry and
// the handle's holdings), so a gateway writing meanwhile causes no false mismatch. Within a ledger it
// also checks that seq runs 1, 2, 3 …, that each entry's balanceAfter is the running sum, and that
// each entry's `prev` is the hash of the entry before it (store/ledger-chain.ts; entries written
// before the chain existed carry none and may only come first).
// Ledgers are read one at a time (a few in parallel), a page at a time: memory does not grow with
// the number of handles.
import { entryHash, GENESIS_HASH } from '../store/ledger-chain.js';
import type { LedgerAccount, LedgerCheckpoint, Store } from '../store/store.js';

export type MismatchProblem =
  | 'balance' // ledger sum ≠ stored balance + reserved
  | 'balance_after' // an entry's balanceAfter ≠ the running sum before it plus its credits
  | 'sequence' // a seq is missing or out of order
  | 'chain'; // an entry's prev is not the hash of the entry before it

export interface Mismatch {
  /** The handle's fingerprint, or "payer 0x…" for an x402 ledger. */
  account: string;
  sku: string;
  expected: number;
  found: number;
  problem: MismatchProblem;
  /** What was compared, in words (no handle, no hash). */
  detail: string;
}

export interface VerifyReport {
  accounts: number;
  entries: number;
  mismatches: number;
}

const PAGE = 1_000;
/** Ledgers checked at once: enough to hide round trips, few enough to keep memory flat. */
const PARALLEL = 16;

export async function verifyLedger(store: Store, onMismatch: (mismatch: Mismatch) => void | Promise<void>): Promise<VerifyReport> {
  const report: VerifyReport = { accounts: 0, entries: 0, mismatches: 0 };
  const inFlight = new Set<Promise<void>>();
  const check = async (account: LedgerAccount): Promise<void> => {
    const checkpoint = await store.ledgerCheckpoint(account);
    if (!checkpoint) return;
    report.accounts++;
    for (const mismatch of await checkAccount(store, checkpoint, report)) {
      report.mismatches++;
      await onMismatch(mismatch);
    }
  };
  let failure: { error: unknown } | null = null;
  for await (const account of store.ledgerAccounts({ unledgeredHandles: true })) {
    const running: Promise<void> = check(account)
      .catch((error: unknown) => void (failure ??= { error }))
      .finally(() => inFlight.delete(running));
    inFlight.add(running);
    if (inFlight.size >= PARALLEL) await Promise.race(inFlight);
    if (failure) break;
  }
  await Promise.all(inFlight);
  if (failure) throw (failure as { error: unknown }).error;
  return report;
}

async function checkAccount(store: Store, checkpoint: LedgerCheckpoint, report: VerifyReport): Promise<Mismatch[]> {
  const { account } = checkpoint;
  const name = account.kind === 'handle' ? checkpoint.fingerprint || '(fingerprint unknown)' : `payer ${account.payer}`;
  const mismatches: Mismatch[] = [];
  const sums = new Map<string, number>();
  let expectedSeq = 1;
  let previousHash: string | null = null; // null: no entry read yet
  let chained = false;
  let after: { at: number; seq: number } | undefined;
  const through = { at: checkpoint.lastAt, seq: checkpoint.lastSeq };
  while (checkpoint.lastSeq > 0) {
    const page = await store.readLedger(account, { after, through, limit: PAGE });
    for (const entry of page) {
      report.entries++;
      if (entry.seq !== expectedSeq) {
        mismatches.push({ account: name, sku: entry.sku, expected: expectedSeq, found: entry.seq, problem: 'sequence', detail: `entry seq ${entry.seq} where seq ${expectedSeq} was expected: entries are missing` });
      }
      expectedSeq = entry.seq + 1;
      const chainProblem = chainCheck(entry.seq, entry.prev, previousHash, chained);
      if (chainProblem) mismatches.push({ account: name, sku: entry.sku, expected: entry.seq, found: entry.seq, problem: 'chain', detail: chainProblem });
      chained ||= entry.prev !== undefined;
      previousHash = entryHash(entry);
      const sum = (sums.get(entry.sku) ?? 0) + entry.credits;
      sums.set(entry.sku, sum);
      if (entry.balanceAfter !== sum) {
        mismatches.push({ account: name, sku: entry.sku, expected: sum, found: entry.balanceAfter, problem: 'balance_after', detail: `entry seq ${entry.seq} (${entry.kind}) says balanceAfter ${entry.balanceAfter}; the entries up to it add up to ${sum}` });
      }
    }
    const last = page.at(-1);
    if (!last || last.seq >= checkpoint.lastSeq || page.length < PAGE) break;
    after = { at: last.at, seq: last.seq };
  }
  if (account.kind === 'payer') return mismatches;
  for (const sku of new Set([...sums.keys(), ...Object.keys(checkpoint.holdings)])) {
    const expected = sums.get(sku) ?? 0;
    const holding = checkpoint.holdings[sku] ?? { balance: 0, reserved: 0 };
    const found = holding.balance + holding.reserved;
    if (expected === found) continue;
    const history = checkpoint.lastSeq === 0 ? 'no ledger entries' : `ledger sum through seq ${checkpoint.lastSeq}`;
    mismatches.push({ account: name, sku, expected, found, problem: 'balance', detail: `${history} vs stored balance ${holding.balance} + reserved ${holding.reserved}` });
  }
  return mismatches;
}

/**
 * What is wrong with one entry's link to the entry before it (null: nothing). `previousHash` null: it
 * is the first entry read. An entry without `prev` was written before the chain existed: allowed only
 * while no entry before it had one.
 */
export function chainCheck(seq: number, prev: string | undefined, previousHash: string | null, chained: boolean): string | null {
  if (prev === undefined) return chained ? `entry seq ${seq} has no prev after chained entries: it was inserted or edited` : null;
  const expected = previousHash ?? GENESIS_HASH;
  if (prev === expected) return null;
  return previousHash === null
    ? `entry seq ${seq} is the first and its prev is not 64 zeros: entries before it are missing`
    : `entry seq ${seq}'s prev is not the hash of seq ${seq - 1}: an entry was edited, removed, inserted or reordered`;
}
