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
}

export const CSV_COLUMNS = ['at', 'seq', 'kind', 'fingerprint', 'payer', 'sku', 'credits', 'balanceAfter', 'ref', 'tool', 'amount', 'currency', 'network', 'asset', 'transaction', 'reason'] as const satisfies readonly (keyof ExportRecord)[];

export function exportRecord(account: LedgerAccount, entry: LedgerEntry): ExportRecord {
  const record: ExportRecord = {
    at: new Date(entry.at).toISOString(),
    seq: entry.seq,
    kind: entry.kind,
    ...(account.kind === 'handle' ? { fingerprint: entry.fingerprint } : { payer: account.payer }),
    sku: entry.sku,
    credits: entry.credits,
    balanceAfter: entry.balanceAfter,
    ref: entry.ref,
  };
  for (const key of ['tool', 'amount', 'currency', 'network', 'asset', 'transaction', 'reason'] as const) {
    const value = entry[key];
    if (value !== undefined) record[key] = value;
  }
  return record;
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
