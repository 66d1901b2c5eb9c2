// The ledger's hash chain (tamper evidence): every entry carries `prev`, the SHA-256 (hex) of the
// previous entry of the same ledger in canonical JSON; the first entry's `prev` is GENESIS_HASH. The
// Redis store computes it inside the appending script (lua/ledger.ts, lua/sha256.ts), the memory store
// in its append; verify and export recompute it here. Both sides must produce the same bytes, so the
// canonical form is defined once, narrowly (src/store/README.md, "Ledger hash chain"):
// - an object of the entry's fields with keys in ascending code-unit order, no whitespace;
// - seq, at, credits, balanceAfter as JSON integers (the store keeps only safe integers);
// - kind, sku, fingerprint always, as strings; ref a string, or null when absent or empty;
// - tool, amount, currency, reason, network, asset, payer, transaction, prev only when non-empty;
// - strings escaped as JSON.stringify does: `"` `\` and U+0000–U+001F only (\b \f \n \r \t, else
//   \u00xx lower-case); `/`, U+007F and every non-ASCII character as they are, in UTF-8.
import { createHash } from 'node:crypto';
import type { LedgerEntry } from './store.js';

export const GENESIS_HASH = '0'.repeat(64);

/** The optional string fields, in the order they sort among the entry's keys. */
const OPTIONAL_KEYS = ['amount', 'asset', 'currency', 'network', 'payer', 'prev', 'reason', 'tool', 'transaction'] as const;

/** The entry's canonical JSON text (see the header). */
export function canonicalEntry(entry: LedgerEntry): string {
  const fields: Record<string, string | number | null> = {
    seq: entry.seq,
    at: entry.at,
    kind: entry.kind,
    sku: entry.sku,
    credits: entry.credits,
    balanceAfter: entry.balanceAfter,
    ref: entry.ref === null || entry.ref === '' ? null : entry.ref,
    fingerprint: entry.fingerprint,
  };
  for (const key of OPTIONAL_KEYS) {
    const value = entry[key];
    if (value !== undefined && value !== '') fields[key] = value;
  }
  return canonicalJson(fields);
}

/** SHA-256 (hex) of the entry's canonical JSON: what the next entry's `prev` holds. */
export function entryHash(entry: LedgerEntry): string {
  return createHash('sha256').update(canonicalEntry(entry), 'utf8').digest('hex');
}

/** JSON with every object's keys sorted (code-unit order) and no whitespace. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map((item) => canonicalJson(item)).join(',')}]`;
  const record = value as Record<string, unknown>;
  const keys = Object.keys(record)
    .filter((key) => record[key] !== undefined)
    .sort();
  return `{${keys.map((key) => `${JSON.stringify(key)}:${canonicalJson(record[key])}`).join(',')}}`;
}
