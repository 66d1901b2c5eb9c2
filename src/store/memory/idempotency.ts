// Idempotent results in one process (SPEC §24): slot → the first call's marker, then its result. No
// await between the look-up and the write, so exactly one caller of a slot is 'first'. Entries end on
// the injected clock and are dropped when looked at, or by `sweep` (the store's lazy sweep).
import type { IdempotentBegin, IdempotentClaim } from '../store.js';

interface Entry {
  scope: string;
  owner: string;
  /** null while the first call runs. */
  result: string | null;
  expiresAt: number;
}

export class MemoryIdempotency {
  readonly #entries = new Map<string, Entry>();

  constructor(private readonly now: () => number) {}

  begin(slot: string, claim: IdempotentClaim): IdempotentBegin {
    const entry = this.#live(slot);
    if (!entry) {
      this.#entries.set(slot, { scope: claim.scope, owner: claim.owner, result: null, expiresAt: this.now() + claim.runningTtlMs });
      return { kind: 'first' };
    }
    if (entry.scope !== claim.scope) return { kind: 'conflict' };
    if (entry.result !== null) return { kind: 'done', result: entry.result };
    // The same attempt asking again (the Redis store re-runs a script whose reply was lost) is still first.
    return entry.owner === claim.owner ? { kind: 'first' } : { kind: 'running' };
  }

  finish(slot: string, owner: string, result: string, ttlMs: number): boolean {
    const entry = this.#live(slot);
    if (!entry || entry.owner !== owner) return false;
    entry.result = result;
    entry.expiresAt = this.now() + ttlMs;
    return true;
  }

  abandon(slot: string, owner: string): void {
    const entry = this.#live(slot);
    // A finished result is never taken back: only the in-flight marker of this attempt goes.
    if (entry && entry.owner === owner && entry.result === null) this.#entries.delete(slot);
  }

  /** Drops every ended entry (memory stays bounded by what is live). */
  sweep(now: number): void {
    for (const [slot, entry] of this.#entries) if (entry.expiresAt <= now) this.#entries.delete(slot);
  }

  #live(slot: string): Entry | null {
    const entry = this.#entries.get(slot);
    if (!entry) return null;
    if (entry.expiresAt > this.now()) return entry;
    this.#entries.delete(slot);
    return null;
  }
}
