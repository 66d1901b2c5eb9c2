// Ledger reads and the expiry step in the memory store (SPEC §17). Entries are appended inside the
// method that moves the credits (core.ts `appendEntry`, no await in between). A handle's ledger
// outlives it by ledgerRetentionMs; an ended handle's fingerprint is remembered for HANDLE_GRACE_MS
// (as Redis keeps its hash), for the grant entry of a late payment.
import type { LedgerAccount, LedgerCheckpoint, LedgerEntry, LedgerHolding, LedgerRange } from '../store.js';
import { MemoryCore } from './core.js';

export class MemoryLedgerReads {
  constructor(private readonly core: MemoryCore) {}

  async expireHandles(now: number, limit: number): Promise<number> {
    let ended = 0;
    for (const [handleHash, handle] of this.core.handles) {
      if (ended >= limit) break;
      if (handle.expiresAt > now) continue;
      this.core.endHandle(handleHash, handle, Math.max(now, this.core.clock()));
      ended++;
    }
    return ended;
  }

  async ledgerTail(handleHash: string, count: number): Promise<LedgerEntry[]> {
    const entries = this.core.ledgers.get(handleHash)?.entries ?? [];
    return count <= 0 ? [] : entries.slice(-count).map((entry) => ({ ...entry }));
  }

  async *ledgerAccounts(options: { unledgeredHandles?: boolean } = {}): AsyncIterable<LedgerAccount> {
    for (const handleHash of this.core.ledgers.keys()) yield { kind: 'handle', handleHash };
    for (const payer of this.core.paymentLedgers.keys()) yield { kind: 'payer', payer };
    if (!options.unledgeredHandles) return;
    for (const handleHash of this.core.handles.keys()) if (!this.core.ledgers.has(handleHash)) yield { kind: 'handle', handleHash };
  }

  async ledgerCheckpoint(account: LedgerAccount): Promise<LedgerCheckpoint | null> {
    const ledger = account.kind === 'handle' ? this.core.ledgers.get(account.handleHash) : this.core.paymentLedgers.get(account.payer.toLowerCase());
    const last = ledger?.entries.at(-1);
    // Not liveHandle: a read must not end a handle; one past its life still holds what it held.
    const handle = account.kind === 'handle' ? this.core.handles.get(account.handleHash) : undefined;
    const holdings: Record<string, LedgerHolding> = {};
    if (handle) {
      for (const [sku, balance] of handle.balances) holdings[sku] = { balance, reserved: 0 };
      for (const { sku, cost } of handle.reservations.values()) holdings[sku] = { balance: holdings[sku]?.balance ?? 0, reserved: (holdings[sku]?.reserved ?? 0) + cost };
    }
    if (!last && Object.keys(holdings).length === 0) return null;
    return { account, fingerprint: handle?.fingerprint ?? ledger?.fingerprint ?? '', lastSeq: last?.seq ?? 0, lastAt: last?.at ?? 0, holdings };
  }

  async readLedger(account: LedgerAccount, range: LedgerRange): Promise<LedgerEntry[]> {
    const ledger = account.kind === 'handle' ? this.core.ledgers.get(account.handleHash) : this.core.paymentLedgers.get(account.payer.toLowerCase());
    if (!ledger || range.limit <= 0) return [];
    const { since, until, after, through } = range;
    // seq is the position + 1: start right after `after`.
    const out: LedgerEntry[] = [];
    for (let i = after ? after.seq : 0; i < ledger.entries.length && out.length < range.limit; i++) {
      const entry = ledger.entries[i] as LedgerEntry;
      if (through && entry.seq > through.seq) break;
      if (until !== undefined && entry.at >= until) break;
      if (since !== undefined && entry.at < since) continue;
      out.push({ ...entry });
    }
    return out;
  }
}
