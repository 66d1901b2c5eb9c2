// `tollbooth ledger export` (SPEC §17): every entry of every ledger in time order, with the handle's
// fingerprint (or the x402 payer's address), as JSON lines or CSV, optionally inside [since, until).
// Ledgers are read one at a time, a page at a time; the global time order comes from a bounded
// external sort (external-sort.ts), so memory does not grow with the number of handles or entries.
import type { LedgerAccount, Store } from '../store/store.js';
import { ExternalSorter, type SortOptions } from './external-sort.js';
import { csvHeader, csvRow, exportRecord, type ExportFormat, type ExportRecord } from './format.js';

export interface ExportOptions {
  format: ExportFormat;
  since?: number; // epoch ms, inclusive
  until?: number; // epoch ms, exclusive
  sort?: SortOptions;
}

export interface ExportReport {
  accounts: number;
  entries: number;
  /** Sorted runs written to disk (0: the export fitted in one run). */
  runs: number;
}

/** Entries read from a ledger per store call. */
const PAGE = 1_000;
/** Output is handed to `write` in chunks of about this many characters. */
const CHUNK_CHARS = 64 * 1024;

/** Writes the export through `write` (which should wait while its destination is full). */
export async function exportLedger(store: Store, options: ExportOptions, write: (chunk: string) => Promise<void>): Promise<ExportReport> {
  const sorter = new ExternalSorter(options.sort);
  const report: ExportReport = { accounts: 0, entries: 0, runs: 0 };
  try {
    for await (const account of store.ledgerAccounts()) {
      const ordinal = report.accounts++;
      for await (const entry of entriesOf(store, account, options)) {
        report.entries++;
        await sorter.add({ at: entry.at, account: ordinal, seq: entry.seq, line: JSON.stringify(exportRecord(account, entry)) });
      }
    }
    let chunk = options.format === 'csv' ? `${csvHeader()}\n` : '';
    for await (const line of sorter.sorted()) {
      chunk += `${options.format === 'csv' ? csvRow(JSON.parse(line) as ExportRecord) : line}\n`;
      if (chunk.length >= CHUNK_CHARS) {
        await write(chunk);
        chunk = '';
      }
    }
    if (chunk.length > 0) await write(chunk);
    report.runs = sorter.runsWritten;
    return report;
  } finally {
    await sorter.dispose();
  }
}

/** One ledger's entries inside the window, page by page. */
async function* entriesOf(store: Store, account: LedgerAccount, options: ExportOptions) {
  let after: { at: number; seq: number } | undefined;
  for (;;) {
    const page = await store.readLedger(account, { since: options.since, until: options.until, after, limit: PAGE });
    yield* page;
    const last = page.at(-1);
    if (!last || page.length < PAGE) return;
    after = { at: last.at, seq: last.seq };
  }
}
