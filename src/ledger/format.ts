// How ledger entries leave the gateway (SPEC §17): one export record per entry, as a JSON line or a
// CSV row, and the time bounds an operator types. An entry never holds a handle, a link id or a URL
// (the store writes none); the account is shown as the handle's fingerprint, or the x402 payer's
// address (public on chain).
import { GatewayError } from '../errors.js';
import type { LedgerAccount, LedgerEntry } from '../store/store.js';

export type ExportFormat = 'jsonl' | 'csv';
export const EXPORT_FORMATS: readonly ExportFormat[] = ['jsonl', 'csv'];

/** One exported entry. Keys in this order; absent optional fields are left out (JSONL) or empty (CSV). */
export interface ExportRecord {
  at: string; // ISO 8601, UTC, milliseconds
  seq: number;
  kind: LedgerEntry['kind'];
  fingerprint?: string; // handle ledgers
  payer?: string; // x402 ledgers
  sku: string;
  credits: number;
  balanceAfter: number;
  ref: string | null;
  tool?: string;
  amount?: string;
  currency?: string;
  network?: string;
  asset?: string;
  transaction?: string;
  reason?: string;
  /** The hash chain link (store/ledger-chain.ts); absent on entries written before the chain existed. */
  prev?: string;
  /** The ledger's name in the trailer, only when it is not this row's fingerprint or payer (trailer.ts). */
  ledger?: string;
}

export const CSV_COLUMNS = ['at', 'seq', 'kind', 'fingerprint', 'payer', 'sku', 'credits', 'balanceAfter', 'ref', 'tool', 'amount', 'currency', 'network', 'asset', 'transaction', 'reason', 'prev', 'ledger'] as const satisfies readonly (keyof ExportRecord)[];

/** The optional string fields an entry and its record share. */
const OPTIONAL_FIELDS = ['tool', 'amount', 'currency', 'network', 'asset', 'transaction', 'reason', 'prev'] as const;

/**
 * One entry as exported. Lossless for the hash chain: entryOfRecord gives back an entry with the same
 * canonical JSON. `ledger`: the name the export gives the entry's ledger (see trailer.ts).
 */
export function exportRecord(account: LedgerAccount, entry: LedgerEntry, ledger?: string): ExportRecord {
  const owner = account.kind === 'handle' ? { fingerprint: entry.fingerprint } : { payer: entry.payer ?? account.payer };
  const record: ExportRecord = {
    at: new Date(entry.at).toISOString(),
    seq: entry.seq,
    kind: entry.kind,
    ...owner,
    sku: entry.sku,
    credits: entry.credits,
    balanceAfter: entry.balanceAfter,
    ref: entry.ref,
  };
  for (const key of OPTIONAL_FIELDS) {
    const value = entry[key];
    if (value !== undefined) record[key] = value;
  }
  if (ledger !== undefined && ledger !== (owner.fingerprint ?? owner.payer)) record.ledger = ledger;
  return record;
}

/** The ledger a record belongs to, by the name the export gave it. */
export function ledgerOfRecord(record: ExportRecord): string {
  return record.ledger ?? record.fingerprint ?? record.payer ?? '';
}

/**
 * The entry an exported record stands for, as far as the hash chain sees it (its canonical JSON is
 * the stored entry's). A payer ledger's entries name the payer and no fingerprint.
 */
export function entryOfRecord(record: ExportRecord): LedgerEntry {
  const entry: LedgerEntry = {
    seq: record.seq,
    at: Date.parse(record.at),
    kind: record.kind,
    sku: record.sku,
    credits: record.credits,
    balanceAfter: record.balanceAfter,
    ref: record.ref,
    fingerprint: record.fingerprint ?? '',
  };
  if (record.payer !== undefined && record.fingerprint === undefined) entry.payer = record.payer;
  for (const key of OPTIONAL_FIELDS) {
    const value = record[key];
    if (value !== undefined) entry[key] = value;
  }
  return entry;
}

export function csvHeader(): string {
  return CSV_COLUMNS.join(',');
}

export function csvRow(record: ExportRecord): string {
  return CSV_COLUMNS.map((column) => csvField(record[column])).join(',');
}

/** RFC 4180: quote a field holding a comma, quote, CR or LF, doubling inner quotes. */
function csvField(value: string | number | null | undefined): string {
  if (value === null || value === undefined) return '';
  const text = String(value);
  return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

/** `--since` / `--until`: an ISO 8601 date or date-time (a bare date is UTC midnight), or epoch milliseconds. */
export function parseTimeBound(option: string, text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const ms = /^\d+$/.test(text) ? Number(text) : /^\d{4}-\d{2}-\d{2}/.test(text) ? Date.parse(text) : Number.NaN;
  if (!Number.isSafeInteger(ms)) {
    throw new GatewayError('TB_ERR_INVALID_PARAMS', `${option} must be an ISO 8601 date or date-time (2026-01-31, 2026-01-31T12:00:00Z) or epoch milliseconds, got ${JSON.stringify(text)}`);
  }
  return ms;
}

/**
 * The operator's reason of an `adjust` entry, made safe to keep: a handle becomes its fingerprint, a
 * URL becomes "[url]", control characters become spaces, at most 500 characters.
 */
export function safeReason(reason: string, redactHandles: (text: string) => string): string {
  return redactHandles(reason)
    .replace(/\b[a-z][a-z0-9+.-]*:\/\/\S+/gi, '[url]')
    // eslint-disable-next-line no-control-regex -- control characters are what this strips
    .replace(/[\u0000-\u001f\u007f]+/g, ' ')
    .trim()
    .slice(0, 500);
}
