// `tollbooth ledger export` (SPEC §17): every entry of every ledger in time order, with the handle's
// fingerprint (or the x402 payer's address), as JSON lines or CSV, optionally inside [since, until).
// Ledgers are read one at a time, a page at a time; the global time order comes from a bounded
// external sort (external-sort.ts), so memory does not grow with the number of entries. The file
// ends with a trailer line (trailer.ts): per ledger, how many entries it holds and the hash of the
// last one — the one part that grows with the number of ledgers (about 150 bytes each).
import { entryHash } from '../store/ledger-chain.js';
import type { LedgerAccount, Store } from '../store/store.js';
import { ExternalSorter, type SortOptions } from './external-sort.js';
import { csvHeader, csvRow, exportRecord, type ExportFormat, type ExportRecord } from './format.js';
import { LedgerNames, trailerLine, type Trailer } from './trailer.js';

export interface ExportOptions {
  format: ExportFormat;
  since?: number; // epoch ms, inclusive
  until?: number; // epoch ms, exclusive
  sort?: SortOptions;
  /** `ledger.signingKey`: the trailer's HMAC key ('' or absent: mac null). */
  signingKey?: string;
  /** The trailer's exportedAt (epoch ms; default the system clock). */
  now?: number;
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
  const names = new LedgerNames();
  const trailer: Trailer = {
    entries: 0,
    exportedAt: new Date(options.now ?? Date.now()).toISOString(),
    format: options.format,
    since: options.since === undefined ? null : new Date(options.since).toISOString(),
    until: options.until === undefined ? null : new Date(options.until).toISOString(),
    lastHash: {},
    ledgers: {},
  };
  try {
    for await (const account of store.ledgerAccounts()) {
      const ordinal = report.accounts++;
      let name: string | undefined;
      for await (const entry of entriesOf(store, account, options)) {
        report.entries++;
        name ??= names.name(account.kind === 'handle' ? entry.fingerprint : (entry.payer ?? account.payer));
        const summary = (trailer.ledgers[name] ??= { entries: 0, firstSeq: entry.seq, lastSeq: entry.seq });
        summary.entries++;
        summary.lastSeq = entry.seq;
        trailer.lastHash[name] = entryHash(entry);
        await sorter.add({ at: entry.at, account: ordinal, seq: entry.seq, line: JSON.stringify(exportRecord(account, entry, name)) });
      }
    }
    trailer.entries = report.entries;
    let chunk = options.format === 'csv' ? `${csvHeader()}\n` : '';
    for await (const line of sorter.sorted()) {
      chunk += `${options.format === 'csv' ? csvRow(JSON.parse(line) as ExportRecord) : line}\n`;
      if (chunk.length >= CHUNK_CHARS) {
        await write(chunk);
        chunk = '';
      }
    }
    await write(`${chunk}${trailerLine(trailer, options.signingKey ?? '')}\n`);
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
