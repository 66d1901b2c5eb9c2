// Ledger entries as the Redis store keeps them (SPEC §17): one stream per ledger, entry id
// "<at>-<seq>", short field names (lua/ledger.ts lists them). Parsing lives here so redis.ts only
// moves replies around.
import type { LedgerEntry, LedgerKind, LedgerRange } from './store.js';

const KINDS: ReadonlySet<string> = new Set<LedgerKind>(['grant', 'adjust', 'spend', 'expire', 'x402_settle']);

/** Optional string fields: stream field → entry property. */
const OPTIONAL = [
  ['t', 'tool'],
  ['a', 'amount'],
  ['cu', 'currency'],
  ['why', 'reason'],
  ['n', 'network'],
  ['as', 'asset'],
  ['p', 'payer'],
  ['tx', 'transaction'],
  ['pv', 'prev'],
] as const;

/** One XRANGE reply item: [id, [field, value, …]]. */
export type StreamItem = [string, string[]];

export function parseStreamEntry([id, flat]: StreamItem): LedgerEntry {
  const fields = new Map<string, string>();
  for (let i = 0; i + 1 < flat.length; i += 2) fields.set(flat[i] as string, flat[i + 1] as string);
  const [at, seq] = parseStreamId(id);
  const kind = fields.get('k') ?? '';
  const entry: LedgerEntry = {
    seq,
    at,
    kind: (KINDS.has(kind) ? kind : 'adjust') as LedgerKind,
    sku: fields.get('s') ?? '',
    credits: Number(fields.get('c') ?? 0),
    balanceAfter: Number(fields.get('b') ?? 0),
    ref: fields.get('r') ?? null,
    fingerprint: fields.get('fp') ?? '',
  };
  for (const [field, property] of OPTIONAL) {
    const value = fields.get(field);
    if (value !== undefined && value !== '') entry[property] = value;
  }
  return entry;
}

/** "1767225600000-12" → [at, seq]. */
export function parseStreamId(id: string): [number, number] {
  const dash = id.indexOf('-');
  return [Number(id.slice(0, dash)), Number(id.slice(dash + 1))];
}

/** XRANGE bounds for a range: the later of `after`/`since` starts it, the earlier of `through`/`until` ends it. */
export function streamBounds(range: LedgerRange): [string, string] {
  const since = range.since !== undefined ? Math.max(0, Math.ceil(range.since)) : undefined;
  const until = range.until !== undefined ? Math.max(0, Math.ceil(range.until)) : undefined;
  const { after, through } = range;
  let start = '-';
  if (after && (since === undefined || after.at >= since)) start = `(${after.at}-${after.seq}`;
  else if (since !== undefined) start = `${since}-0`;
  let end = '+';
  if (through && (until === undefined || through.at < until)) end = `${through.at}-${through.seq}`;
  else if (until !== undefined) end = `(${until}-0`;
  return [start, end];
}
