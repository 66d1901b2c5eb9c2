// The exact ledger of one test run (issue 33): what a handle was granted, spent and still holds, read
// from the store's ledger, and every spend matched to the call that made it. A spend entry's `ref` is
// the call's reservation id; the gateway writes the same id on the call's `evt:"call"` line and, when a
// commit's outcome is unknown (the store failed, or its reply was lost after the script ran), on the
// `paywall_unavailable` line. So a run's spends split exactly into calls that were committed and
// delivered with a receipt, and commits whose reply was lost (the caller was refused: a logged,
// counted exception). Anything else is a spend nobody can account for.
import { verifyLedger, type Mismatch } from '../../src/ledger/verify.js';
import type { LedgerEntry, Store } from '../../src/store/store.js';

export interface RunLedger {
  entries: LedgerEntry[];
  /** Credits granted (grant and adjust entries). */
  granted: number;
  /** Credits spent (spend entries), and how many spend entries. */
  spent: number;
  spends: number;
  /** Credits written off with an ended handle (expire entries). */
  expired: number;
  /** What the handle holds now: its balance and what its reservations hold. */
  balance: number;
  reserved: number;
  /** `ledger verify` over the whole store: sequence, running totals, hash chain, stored balances. */
  mismatches: Mismatch[];
}

/** Reads one handle's whole ledger and what it holds now, in one SKU. */
export async function runLedger(store: Store, handleHash: string, sku: string): Promise<RunLedger> {
  const account = { kind: 'handle', handleHash } as const;
  const entries: LedgerEntry[] = [];
  let after: { at: number; seq: number } | undefined;
  for (;;) {
    const page = await store.readLedger(account, { after, limit: 500 });
    entries.push(...page);
    const last = page.at(-1);
    if (!last || page.length < 500) break;
    after = { at: last.at, seq: last.seq };
  }
  const ofSku = entries.filter((entry) => entry.sku === sku);
  const sum = (kinds: LedgerEntry['kind'][]): number => ofSku.filter((entry) => kinds.includes(entry.kind)).reduce((total, entry) => total + entry.credits, 0);
  const checkpoint = await store.ledgerCheckpoint(account);
  const holding = checkpoint?.holdings[sku] ?? { balance: 0, reserved: 0 };
  const mismatches: Mismatch[] = [];
  await verifyLedger(store, (mismatch) => void mismatches.push(mismatch));
  return {
    entries,
    granted: sum(['grant', 'adjust']),
    spent: -sum(['spend']),
    spends: ofSku.filter((entry) => entry.kind === 'spend').length,
    expired: -sum(['expire']),
    balance: holding.balance,
    reserved: holding.reserved,
    mismatches,
  };
}

export interface SpendMatch {
  /** Spends of a call the gateway committed and answered with its receipt (its call line has cost > 0). */
  delivered: string[];
  /** Spends whose commit ran although the gateway saw it fail (its `paywall_unavailable` line, op commit): the caller was refused. */
  lostReplies: string[];
  /** Spends no call accounts for. */
  unaccounted: string[];
  /** Calls the gateway logged as committed (cost > 0) with no spend entry. */
  committedWithoutSpend: string[];
  /** Refs on more than one spend entry. */
  duplicated: string[];
  /** Logged commit failures (op commit) whose commit never ran: nothing spent, the reconciler released them. */
  failedCommits: number;
}

/** Matches every spend entry to the gateways' log lines (the JSON lines of every replica of the run). */
export function matchSpends(entries: LedgerEntry[], logs: Record<string, unknown>[]): SpendMatch {
  const refs = entries.filter((entry) => entry.kind === 'spend').map((entry) => entry.ref ?? '');
  const committed = new Set(logs.filter((line) => line.evt === 'call' && typeof line.cost === 'number' && line.cost > 0).map((line) => String(line.ref)));
  const unknown = new Set(logs.filter((line) => line.evt === 'paywall_unavailable' && line.op === 'commit' && typeof line.ref === 'string').map((line) => line.ref as string));
  const seen = new Set<string>();
  const duplicated = refs.filter((ref) => seen.has(ref) || !seen.add(ref));
  return {
    delivered: refs.filter((ref) => committed.has(ref)),
    lostReplies: refs.filter((ref) => !committed.has(ref) && unknown.has(ref)),
    unaccounted: refs.filter((ref) => !committed.has(ref) && !unknown.has(ref)),
    committedWithoutSpend: [...committed].filter((ref) => !seen.has(ref)),
    duplicated,
    failedCommits: [...unknown].filter((ref) => !seen.has(ref)).length,
  };
}
