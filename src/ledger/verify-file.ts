// `tollbooth ledger verify --file EXPORT`: checks an exported file offline, with nothing but the file
// (and `ledger.signingKey`, when the trailer is signed). Each ledger's rows must run seq n, n+1, …
// with every `prev` the hash of the row before it (store/ledger-chain.ts), the file must stay in time
// order, and the trailer (trailer.ts) must match what the rows add up to: per ledger its entry count,
// first and last seq and the hash of its last row; its mac must verify. So an edited, deleted,
// inserted or reordered row, a truncated file, and a changed trailer are each reported, naming the
// ledger (fingerprint or payer) and the seq. Both export formats are read: JSON lines, and CSV with
// the header `ledger export --format csv` writes (the trailer is a JSON line in both).
// Memory grows with the number of ledgers in the file (one small record each), not with its rows.
import { entryHash, GENESIS_HASH } from '../store/ledger-chain.js';
import type { LedgerKind } from '../store/store.js';
import { CSV_COLUMNS, csvHeader, entryOfRecord, ledgerOfRecord, type ExportFormat, type ExportRecord } from './format.js';
import { macMatches, TRAILER_PREFIX, type LedgerSummary, type Trailer } from './trailer.js';
import { chainCheck } from './verify.js';

export interface FileProblem {
  /** The ledger's name in the file (fingerprint or payer address), or "(file)". */
  ledger: string;
  seq: number | null;
  detail: string;
}

export interface FileReport {
  format: ExportFormat | null;
  rows: number;
  ledgers: number;
  problems: number;
  signed: boolean;
}

interface LedgerState {
  entries: number;
  firstSeq: number;
  lastSeq: number;
  lastHash: string;
  chained: boolean;
}

const KINDS: ReadonlySet<string> = new Set<LedgerKind>(['grant', 'adjust', 'spend', 'expire', 'x402_settle']);
const OPTIONAL_STRINGS = ['fingerprint', 'payer', 'tool', 'amount', 'currency', 'network', 'asset', 'transaction', 'reason', 'prev', 'ledger'] as const;
const KNOWN_KEYS: ReadonlySet<string> = new Set<string>(CSV_COLUMNS);
const FILE = '(file)';

/** Reads the file's lines (without newlines) and reports each problem; the report counts them. */
export async function verifyExportFile(lines: AsyncIterable<string>, signingKey: string, onProblem: (problem: FileProblem) => void | Promise<void>): Promise<FileReport> {
  const report: FileReport = { format: null, rows: 0, ledgers: 0, problems: 0, signed: false };
  const problem = async (ledger: string, seq: number | null, detail: string): Promise<void> => {
    report.problems++;
    await onProblem({ ledger, seq, detail });
  };
  const ledgers = new Map<string, LedgerState>();
  let trailer: { text: string } | null = null;
  let lastAt = -Infinity;
  let pendingCsv = ''; // a CSV record whose quoted field spans lines
  let lineNumber = 0;

  const row = async (record: ExportRecord): Promise<void> => {
    report.rows++;
    const name = ledgerOfRecord(record);
    const entry = entryOfRecord(record);
    if (entry.at < lastAt) await problem(name, record.seq, `row ${report.rows} (seq ${record.seq}) is earlier than the row before it: rows were reordered`);
    lastAt = Math.max(lastAt, entry.at);
    const state = ledgers.get(name);
    const hash = entryHash(entry);
    if (!state) {
      ledgers.set(name, { entries: 1, firstSeq: record.seq, lastSeq: record.seq, lastHash: hash, chained: record.prev !== undefined });
      if (record.seq === 1 && record.prev !== undefined && record.prev !== GENESIS_HASH) await problem(name, 1, 'entry seq 1 is the first and its prev is not 64 zeros: it was edited');
      return;
    }
    state.entries++;
    if (record.seq !== state.lastSeq + 1) {
      await problem(
        name,
        record.seq,
        record.seq <= state.lastSeq
          ? `entry seq ${record.seq} comes after seq ${state.lastSeq}: rows were reordered, duplicated or inserted`
          : `entry seq ${record.seq} follows seq ${state.lastSeq}: ${record.seq - state.lastSeq === 2 ? `seq ${state.lastSeq + 1} is` : `seq ${state.lastSeq + 1}–${record.seq - 1} are`} missing (deleted)`,
      );
    } else {
      const broken = chainCheck(record.seq, record.prev, state.lastHash, state.chained);
      if (broken) await problem(name, record.seq, `${broken} (check seq ${record.seq - 1} and seq ${record.seq})`);
    }
    state.chained ||= record.prev !== undefined;
    state.lastSeq = Math.max(state.lastSeq, record.seq);
    state.lastHash = hash;
  };

  for await (const line of lines) {
    lineNumber++;
    if (lineNumber === 1) {
      if (line === csvHeader()) {
        report.format = 'csv';
        continue;
      }
      if (line.startsWith('{')) report.format = 'jsonl';
      else {
        await problem(FILE, null, 'the first line is neither a JSON ledger entry nor the CSV header of `ledger export` (an export of an older version, or not an export)');
        return finish();
      }
    }
    if (pendingCsv === '' && line.startsWith(TRAILER_PREFIX)) {
      if (trailer) await problem(FILE, null, `line ${lineNumber} is a second trailer: the file was altered`);
      trailer = { text: line };
      continue;
    }
    if (line === '' && pendingCsv === '') continue;
    if (trailer) {
      await problem(FILE, null, `line ${lineNumber} comes after the trailer: rows were appended`);
      continue;
    }
    let parsed: ExportRecord | string;
    if (report.format === 'csv') {
      pendingCsv = pendingCsv === '' ? line : `${pendingCsv}\n${line}`;
      if ((pendingCsv.match(/"/g)?.length ?? 0) % 2 === 1) continue; // inside a quoted field
      parsed = csvRecord(pendingCsv);
      pendingCsv = '';
    } else {
      parsed = jsonRecord(line);
    }
    if (typeof parsed === 'string') await problem(nameInText(line), null, `line ${lineNumber} is not a ledger entry as exported (${parsed}): it was edited`);
    else await row(parsed);
  }
  return finish();

  async function finish(): Promise<FileReport> {
    report.ledgers = ledgers.size;
    if (pendingCsv !== '') await problem(FILE, null, 'the file ends inside a quoted CSV field: it is truncated');
    if (!trailer) {
      if (report.format !== null) await problem(FILE, null, 'no trailer line: the file is truncated (or its trailer was removed)');
      return report;
    }
    const read = readTrailer(trailer.text);
    if (typeof read === 'string') {
      await problem(FILE, null, `the trailer is not readable (${read}): it was changed or cut`);
      return report;
    }
    const { trailer: summary, mac } = read;
    report.signed = mac !== null;
    if (mac === null && signingKey !== '') await problem(FILE, null, 'the trailer is not signed, but ledger.signingKey is set: the mac was removed, or the file was not exported with this key');
    if (mac !== null && signingKey === '') await problem(FILE, null, 'the trailer is signed but ledger.signingKey is not set here: the mac cannot be checked');
    if (mac !== null && signingKey !== '' && !macMatches(summary, mac, signingKey)) await problem(FILE, null, 'the trailer\'s mac does not match: the trailer was changed (or signed with another key)');
    if (summary.format !== report.format) await problem(FILE, null, `the trailer says format ${summary.format}, the file is ${report.format ?? 'unknown'}`);
    if (summary.entries !== report.rows) await problem(FILE, null, `the trailer counts ${summary.entries} entries, the file has ${report.rows}`);
    for (const [name, expected] of Object.entries(summary.ledgers)) {
      const found = ledgers.get(name);
      await compareLedger(name, expected, summary.lastHash[name], found);
    }
    for (const [name, found] of ledgers) {
      if (!(name in summary.ledgers)) await problem(name, found.firstSeq, `the trailer does not list this ledger: its ${found.entries} ${found.entries === 1 ? 'row was' : 'rows were'} inserted (seq ${found.firstSeq}–${found.lastSeq})`);
    }
    return report;
  }

  async function compareLedger(name: string, expected: LedgerSummary, lastHash: string | undefined, found: LedgerState | undefined): Promise<void> {
    if (!found) {
      await problem(name, expected.firstSeq, `all ${expected.entries} rows of this ledger (seq ${expected.firstSeq}–${expected.lastSeq}) are missing`);
      return;
    }
    if (found.firstSeq !== expected.firstSeq) {
      await problem(name, expected.firstSeq, found.firstSeq > expected.firstSeq ? `the ledger's first row (seq ${expected.firstSeq}) is missing: the file starts it at seq ${found.firstSeq}` : `the file starts this ledger at seq ${found.firstSeq}, the trailer at seq ${expected.firstSeq}`);
    }
    if (found.lastSeq !== expected.lastSeq) {
      await problem(name, expected.lastSeq, found.lastSeq < expected.lastSeq ? `the ledger's last ${expected.lastSeq - found.lastSeq === 1 ? 'row' : 'rows'} (through seq ${expected.lastSeq}) are missing: the file ends it at seq ${found.lastSeq}` : `the file ends this ledger at seq ${found.lastSeq}, the trailer at seq ${expected.lastSeq}`);
    } else if (found.lastHash !== lastHash) {
      await problem(name, found.lastSeq, `the last row (seq ${found.lastSeq}) does not hash to the trailer's lastHash: it was edited (or the trailer was)`);
    }
    if (found.entries !== expected.entries) await problem(name, null, `the trailer counts ${expected.entries} rows for this ledger, the file has ${found.entries}`);
  }
}

/** One JSON line → a record, or why it is not one. */
function jsonRecord(line: string): ExportRecord | string {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch {
    return 'not JSON';
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return 'not an object';
  const fields = value as Record<string, unknown>;
  const unknown = Object.keys(fields).find((key) => !KNOWN_KEYS.has(key));
  if (unknown !== undefined) return `unknown field ${JSON.stringify(unknown)}`;
  return checkedRecord(fields);
}

/** One CSV record (the header's columns) → a record, or why it is not one. Empty fields are absent. */
function csvRecord(text: string): ExportRecord | string {
  const values = csvFields(text);
  if (values === null) return 'malformed CSV';
  if (values.length !== CSV_COLUMNS.length) return `${values.length} fields where ${CSV_COLUMNS.length} were expected`;
  const fields: Record<string, unknown> = {};
  CSV_COLUMNS.forEach((column, i) => {
    const value = values[i] as string;
    if (column === 'seq' || column === 'credits' || column === 'balanceAfter') fields[column] = /^-?\d+$/.test(value) ? Number(value) : value;
    else if (column === 'ref') fields[column] = value === '' ? null : value;
    else if (value !== '') fields[column] = value;
  });
  // A payer row has no fingerprint; a handle row's fingerprint may be empty (no longer known).
  if (fields.payer === undefined) fields.fingerprint ??= '';
  return checkedRecord(fields);
}

function checkedRecord(fields: Record<string, unknown>): ExportRecord | string {
  const { at, seq, kind, sku, credits, balanceAfter, ref } = fields;
  if (typeof at !== 'string' || !Number.isSafeInteger(Date.parse(at)) || new Date(Date.parse(at)).toISOString() !== at) return 'at is not an ISO 8601 UTC time';
  if (typeof seq !== 'number' || !Number.isSafeInteger(seq) || seq < 1) return 'seq is not a positive integer';
  if (typeof kind !== 'string' || !KINDS.has(kind)) return 'unknown kind';
  if (typeof sku !== 'string') return 'sku is not a string';
  if (typeof credits !== 'number' || !Number.isSafeInteger(credits)) return 'credits is not an integer';
  if (typeof balanceAfter !== 'number' || !Number.isSafeInteger(balanceAfter)) return 'balanceAfter is not an integer';
  if (ref !== null && typeof ref !== 'string') return 'ref is neither a string nor null';
  for (const key of OPTIONAL_STRINGS) if (fields[key] !== undefined && typeof fields[key] !== 'string') return `${key} is not a string`;
  if (fields.prev !== undefined && !/^[0-9a-f]{64}$/.test(fields.prev as string)) return 'prev is not a SHA-256 hex digest';
  return fields as unknown as ExportRecord;
}

/** RFC 4180 fields of one record; null when a quote is misplaced. */
function csvFields(text: string): string[] | null {
  const fields: string[] = [];
  let i = 0;
  for (;;) {
    if (text[i] === '"') {
      let value = '';
      i++;
      for (;;) {
        const quote = text.indexOf('"', i);
        if (quote === -1) return null;
        value += text.slice(i, quote);
        if (text[quote + 1] === '"') {
          value += '"';
          i = quote + 2;
          continue;
        }
        i = quote + 1;
        break;
      }
      fields.push(value);
      if (i === text.length) return fields;
      if (text[i] !== ',') return null;
      i++;
    } else {
      const comma = text.indexOf(',', i);
      const value = text.slice(i, comma === -1 ? text.length : comma);
      if (value.includes('"')) return null;
      fields.push(value);
      if (comma === -1) return fields;
      i = comma + 1;
    }
  }
}

/** A ledger name for a row that could not be read: its fingerprint or payer if one shows. */
function nameInText(line: string): string {
  return /tb_s_[A-Za-z0-9_-]{4}\.\.[A-Za-z0-9_-]{4}/.exec(line)?.[0] ?? /0x[0-9a-f]{40}/.exec(line)?.[0] ?? '(unreadable row)';
}

function readTrailer(text: string): { trailer: Trailer; mac: string | null } | string {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return 'not JSON';
  }
  const { trailer, mac } = (value ?? {}) as { trailer?: unknown; mac?: unknown };
  if (mac !== null && typeof mac !== 'string') return 'mac is neither a string nor null';
  if (trailer === null || typeof trailer !== 'object') return 'no trailer object';
  const t = trailer as Partial<Trailer>;
  if (typeof t.entries !== 'number' || typeof t.exportedAt !== 'string' || typeof t.lastHash !== 'object' || t.lastHash === null || typeof t.ledgers !== 'object' || t.ledgers === null) return 'entries, exportedAt, lastHash or ledgers missing';
  for (const summary of Object.values(t.ledgers)) {
    const s = summary as Partial<LedgerSummary> | null;
    if (!s || typeof s.entries !== 'number' || typeof s.firstSeq !== 'number' || typeof s.lastSeq !== 'number') return 'a ledger summary is malformed';
  }
  return { trailer: trailer as Trailer, mac };
}
