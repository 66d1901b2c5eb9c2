// The last ledger entry this process appended per handle, with its SHA-256, so the next commit's
// script can take the chain link from the gateway instead of hashing in Lua (interpreted SHA-256 is
// ≈ 185 µs of Redis CPU per spend, node:crypto ≈ 1.5 µs: ../README.md, "Ledger hash chain"). The
// script uses the hash only when the ledger's last entry is exactly the remembered text, so a stale,
// lost or foreign head costs a Lua hash, never a wrong link. Bounded: the oldest handle is forgotten
// first; forgetting one costs its next commit a Lua hash.
import { hash } from 'node:crypto';

/** Handles remembered at most (≈ 350 bytes each: ~3.5 MB). */
export const CHAIN_HEADS_MAX = 10_000;

export interface ChainHead {
  /** The entry's canonical JSON, as the script returned it. */
  readonly text: string;
  /** Its SHA-256, hex: the next entry's `prev`. */
  readonly hash: string;
}

export class ChainHeads {
  private readonly heads = new Map<string, ChainHead>();
  private byGateway = 0;
  private byScript = 0;

  constructor(private readonly max = CHAIN_HEADS_MAX) {}

  /** What to pass as the commit's chain arguments: the text and hash, or two empty strings. */
  args(handleHash: string): [string, string] {
    const head = this.heads.get(handleHash);
    return head ? [head.text, head.hash] : ['', ''];
  }

  /** Records the entry a commit appended (its reply's canonical JSON) and who hashed its link (none: a first entry). */
  remember(handleHash: string, text: string, linkedBy: 'gateway' | 'script' | undefined): void {
    if (linkedBy === 'gateway') this.byGateway++;
    else if (linkedBy === 'script') this.byScript++;
    // Re-inserted, so the Map's insertion order is the least recently appended first.
    this.heads.delete(handleHash);
    this.heads.set(handleHash, { text, hash: hash('sha256', text, 'hex') });
    if (this.heads.size > this.max) this.heads.delete(this.heads.keys().next().value as string);
  }

  /** Links made since start, by who hashed the previous entry (tollbooth_store_ledger_links_total). */
  links(): Record<string, number> {
    return { gateway: this.byGateway, script: this.byScript };
  }

  get size(): number {
    return this.heads.size;
  }
}
