// Operator verbs (SPEC §2, §17) for resolving disputes: look at a handle, grant credits by hand, list
// charges, export and verify the ledger. Pure functions over a store, the config and an output
// writer, so tests drive them without a process. What they print follows the logging rules (§10): never a handle, a handle
// hash in full, a checkout URL or a provider link id.
import { createReadStream } from 'node:fs';
import { createInterface } from 'node:readline';
import { GatewayError } from './errors.js';
import type { GatewayConfig } from './config/schema.js';
import { exportLedger } from './ledger/export.js';
import { EXPORT_FORMATS, parseTimeBound, safeReason, type ExportFormat } from './ledger/format.js';
import { verifyLedger } from './ledger/verify.js';
import { verifyExportFile } from './ledger/verify-file.js';
import { fingerprint, redactHandles } from './observability/fingerprint.js';
import type { Logger } from './observability/logger.js';
import { hashHandle, isWellFormedHandle } from './paywall/handles.js';
import type { ChargeRecord, ChargeStatus, HandleState, LedgerEntry, Store } from './store/store.js';

export interface AdminContext {
  store: Store;
  config: GatewayConfig;
  /** Receives one line of human-readable output at a time (no trailing newline). */
  out: (line: string) => void;
  /** Bulk output (`ledger export`): resolves once the destination can take more. Default: through `out`. */
  write?: (chunk: string) => Promise<void>;
  logger: Pick<Logger, 'info'>;
  now?: () => number;
}

export const LISTABLE_CHARGE_STATUSES = ['pending', 'underpaid', 'settled', 'abandoned', 'expired'] as const satisfies readonly ChargeStatus[];

/** `handle show` lists this many of the handle's last ledger entries. */
const SHOWN_ENTRIES = 10;

interface ResolvedHandle {
  handleHash: string;
  fingerprint: string;
  state: HandleState;
}

/** `tollbooth handle show <handle|fingerprint>`: fingerprint, principal, balance per SKU, expiry, last ledger entries. */
export async function showHandle(context: AdminContext, reference: string): Promise<void> {
  const handles = await resolveHandles(context, reference);
  for (const [index, handle] of handles.entries()) {
    if (index > 0) context.out('');
    describeHandle(context, handle);
    describeEntries(context, await context.store.ledgerTail(handle.handleHash, SHOWN_ENTRIES));
  }
}

/** `tollbooth credits grant <handle> --sku S --credits N --reason TEXT`; returns the new balance. */
export async function grantCredits(
  context: AdminContext,
  reference: string,
  request: { sku: string | undefined; credits: string | undefined; reason: string | undefined },
): Promise<number> {
  const { sku, reason } = request;
  if (sku === undefined || !Object.hasOwn(context.config.skus, sku)) {
    const known = Object.keys(context.config.skus).join(', ') || 'none configured';
    throw new GatewayError('TB_ERR_INVALID_PARAMS', `--sku must name an SKU under skus in the config (known: ${known}), got ${sku === undefined ? 'nothing' : JSON.stringify(sku)}`);
  }
  const credits = parsePositiveInteger(request.credits);
  if (credits === null) {
    throw new GatewayError('TB_ERR_INVALID_PARAMS', `--credits must be a positive integer, got ${request.credits === undefined ? 'nothing' : JSON.stringify(request.credits)}`);
  }
  if (reason === undefined || reason.trim() === '') {
    throw new GatewayError('TB_ERR_INVALID_PARAMS', '--reason is required: say why the credits are granted (it goes to the audit log)');
  }
  const handles = await resolveHandles(context, reference);
  const [handle] = handles;
  if (handle === undefined || handles.length > 1) {
    throw new GatewayError('TB_ERR_INVALID_PARAMS', `${handles.length} live handles share the fingerprint ${JSON.stringify(reference)}: pass the full handle instead`);
  }
  // The reason is free text: a handle pasted into it is kept and logged as its fingerprint (SPEC §10),
  // a URL as "[url]" (SPEC §17: no URL in the ledger).
  const kept = safeReason(reason, redactHandles);
  const balance = await context.store.grantCredits(handle.handleHash, sku, credits, kept);
  context.logger.info({ evt: 'admin_grant', fingerprint: handle.fingerprint, sku, credits, reason: kept, balance }, 'credits granted by an operator');
  context.out(`granted ${credits} ${sku} credits to ${handle.fingerprint}; balance now ${balance}`);
  return balance;
}

/** `tollbooth charges list [--status S]`: one row per charge, oldest first. */
export async function listCharges(context: AdminContext, status?: string): Promise<void> {
  if (status !== undefined && !(LISTABLE_CHARGE_STATUSES as readonly string[]).includes(status)) {
    throw new GatewayError('TB_ERR_INVALID_PARAMS', `--status must be one of ${LISTABLE_CHARGE_STATUSES.join(', ')}, got ${JSON.stringify(status)}`);
  }
  const charges = await context.store.listCharges(status as ChargeStatus | undefined);
  if (charges.length === 0) {
    context.out(status === undefined ? 'no charges' : `no ${status} charges`);
    return;
  }
  // HANDLE is the fingerprint `handle show` takes; a handle that is gone (expired) shows its short hash.
  const handles = new Map<string, string>();
  for (const charge of charges) {
    if (handles.has(charge.handleHash)) continue;
    const state = await context.store.getHandle(charge.handleHash);
    handles.set(charge.handleHash, state?.fingerprint ?? `gone ${shortHash(charge.handleHash)}`);
  }
  const header = ['OPENED', 'STATUS', 'SKU', 'AMOUNT', 'RECEIVED', 'CURRENCY', 'CREDITS', 'GRANTED', 'HANDLE'];
  const rows = charges.map((charge: ChargeRecord) => [
    new Date(charge.openedAt).toISOString(),
    charge.status,
    charge.sku,
    charge.amount,
    charge.receivedAmount ?? '-',
    charge.currency,
    String(charge.credits),
    String(charge.grantedCredits),
    handles.get(charge.handleHash) as string,
  ]);
  for (const line of formatTable(header, rows)) context.out(line);
}

/** `tollbooth charges orphans`: payments the provider reported for charges the store did not know (SPEC §21). */
export async function listOrphans(context: AdminContext): Promise<void> {
  const orphans = await context.store.listOrphanPayments();
  if (orphans.length === 0) {
    context.out('no orphan payments');
    return;
  }
  const header = ['NOTICED', 'PROVIDER REF', 'RECEIVED', 'SOURCE'];
  const rows = orphans.map((orphan) => [new Date(orphan.noticedAt).toISOString(), orphan.providerRef, orphan.receivedAmount ?? '?', orphan.source]);
  for (const line of formatTable(header, rows)) context.out(line);
}

/** `tollbooth ledger export [--since T] [--until T] [--format jsonl|csv]`: every entry in time order. */
export async function ledgerExport(context: AdminContext, options: { since?: string; until?: string; format?: string }): Promise<void> {
  const format = (options.format ?? 'jsonl') as ExportFormat;
  if (!EXPORT_FORMATS.includes(format)) {
    throw new GatewayError('TB_ERR_INVALID_PARAMS', `--format must be one of ${EXPORT_FORMATS.join(', ')}, got ${JSON.stringify(options.format)}`);
  }
  const since = parseTimeBound('--since', options.since);
  const until = parseTimeBound('--until', options.until);
  const write = context.write ?? (async (chunk: string) => chunk.replace(/\n$/, '').split('\n').forEach((line) => context.out(line)));
  const now = (context.now ?? Date.now)();
  const report = await exportLedger(context.store, { format, since, until, now, signingKey: context.config.ledger.signingKey }, write);
  context.logger.info({ evt: 'ledger_export', format, accounts: report.accounts, entries: report.entries, runs: report.runs }, 'ledger exported');
}

/** `tollbooth ledger verify`: 0 when every ledger agrees with the stored balances, 1 listing each mismatch. */
export async function ledgerVerify(context: AdminContext): Promise<number> {
  const report = await verifyLedger(context.store, (mismatch) => {
    context.out(`mismatch  ${mismatch.account}  sku=${mismatch.sku}  expected=${mismatch.expected}  found=${mismatch.found}  ${mismatch.problem}: ${mismatch.detail}`);
  });
  const summary = `${report.accounts} ledgers, ${report.entries} entries checked, ${report.mismatches} ${report.mismatches === 1 ? 'mismatch' : 'mismatches'}`;
  context.out(report.mismatches === 0 ? `ledger verified: ${summary}` : `ledger NOT verified: ${summary} (docs/operations.md, "Ledger verify mismatches")`);
  return report.mismatches === 0 ? 0 : 1;
}

/**
 * `tollbooth ledger verify --file EXPORT`: 0 when the exported file is whole and unchanged, 1 listing
 * each problem with the ledger's fingerprint (or payer) and seq.
 */
export async function ledgerVerifyFile(out: (line: string) => void, path: string, signingKey: string): Promise<number> {
  const input = createReadStream(path, { encoding: 'utf8' });
  const opened = new Promise<void>((resolve, reject) => input.once('open', () => resolve()).once('error', reject));
  await opened.catch((error: NodeJS.ErrnoException) => {
    throw new GatewayError('TB_ERR_INVALID_PARAMS', `--file: cannot read ${JSON.stringify(path)} (${error.code ?? error.message})`);
  });
  const lines = createInterface({ input, crlfDelay: Infinity });
  const report = await verifyExportFile(lines, signingKey, (problem) => {
    out(`tamper  ${problem.ledger}  seq=${problem.seq ?? '-'}  ${problem.detail}`);
  });
  const summary = `${report.rows} entries of ${report.ledgers} ledgers (${report.format ?? 'unknown format'}, trailer ${report.signed ? 'signed' : 'unsigned'}), ${report.problems} ${report.problems === 1 ? 'problem' : 'problems'}`;
  out(report.problems === 0 ? `export verified: ${summary}` : `export NOT verified: ${summary} (docs/operations.md, "Ledger verify mismatches")`);
  return report.problems === 0 ? 0 : 1;
}

/** A full handle is hashed; anything else is taken as a fingerprint (`tb_s_KLeV..EPcw`). */
export async function resolveHandles(context: AdminContext, reference: string): Promise<ResolvedHandle[]> {
  const { store, config } = context;
  if (isWellFormedHandle(reference)) {
    const handleHash = hashHandle(reference, config.handles.hashSecret);
    const state = await store.getHandle(handleHash);
    if (state === null) throw notFound(fingerprint(reference));
    return [{ handleHash, fingerprint: fingerprint(reference), state }];
  }
  if (!reference.includes('..')) {
    throw new GatewayError('TB_ERR_INVALID_PARAMS', 'expected a handle (tb_s_ followed by 22 characters) or its fingerprint as logged (e.g. tb_s_KLeV..EPcw)');
  }
  const resolved: ResolvedHandle[] = [];
  for (const handleHash of await store.findHandlesByFingerprint(reference)) {
    const state = await store.getHandle(handleHash);
    if (state !== null) resolved.push({ handleHash, fingerprint: reference, state });
  }
  if (resolved.length === 0) throw notFound(reference);
  return resolved;
}

function notFound(fingerprintText: string): GatewayError {
  return new GatewayError('TB_ERR_NOT_FOUND', `no live handle ${fingerprintText}: it never existed, has expired, or the config points at another store`);
}

function describeHandle(context: AdminContext, { handleHash, fingerprint: fingerprintText, state }: ResolvedHandle): void {
  const now = (context.now ?? Date.now)();
  const skus = [...new Set([...Object.keys(context.config.skus), ...Object.keys(state.balances)])];
  const lines: [string, string][] = [
    ['fingerprint', fingerprintText],
    ['hash', shortHash(handleHash)],
    ['principal', state.principal ?? 'unbound'],
    ['expires', `${new Date(state.expiresAt).toISOString()} (${formatRemaining(state.expiresAt - now)})`],
  ];
  if (skus.length === 0) lines.push(['balance', 'none']);
  for (const sku of skus) {
    const notes = [state.funded[sku] ? 'funded' : 'never funded'];
    if (!Object.hasOwn(context.config.skus, sku)) notes.push('not in config');
    lines.push([`balance ${sku}`, `${state.balances[sku] ?? 0} (${notes.join(', ')})`]);
  }
  const width = Math.max(...lines.map(([label]) => label.length));
  for (const [label, value] of lines) context.out(`${label.padEnd(width)}  ${value}`);
}

function describeEntries(context: AdminContext, entries: LedgerEntry[]): void {
  if (entries.length === 0) {
    context.out('ledger            no entries');
    return;
  }
  const last = entries.at(-1) as LedgerEntry;
  context.out(`ledger            last ${entries.length} of ${last.seq} entries, oldest first`);
  const rows = entries.map((entry) => [
    `#${entry.seq}`,
    new Date(entry.at).toISOString(),
    entry.kind,
    entry.sku,
    entry.credits > 0 ? `+${entry.credits}` : String(entry.credits),
    `= ${entry.balanceAfter}`,
    entryDetail(entry),
  ]);
  for (const line of formatTable(['SEQ', 'AT', 'KIND', 'SKU', 'CREDITS', 'OWNED', 'DETAIL'], rows)) context.out(`  ${line}`);
}

function entryDetail(entry: LedgerEntry): string {
  switch (entry.kind) {
    case 'grant':
      return `charge ${entry.ref ?? '?'}, received ${entry.amount ?? 'unknown'}${entry.currency ? ` ${entry.currency}` : ''}`;
    case 'adjust':
      return entry.reason ? `reason: ${entry.reason}` : '';
    case 'spend':
      return entry.tool ? `tool ${entry.tool}` : '';
    default:
      return '';
  }
}

/** Enough of a hash to tell handles apart in a listing, never the whole lookup key. */
function shortHash(handleHash: string): string {
  return `${handleHash.slice(0, 8)}…`;
}

function parsePositiveInteger(text: string | undefined): number | null {
  if (text === undefined || !/^[1-9][0-9]*$/.test(text)) return null;
  const value = Number(text);
  return Number.isSafeInteger(value) ? value : null;
}

function formatRemaining(ms: number): string {
  if (ms <= 0) return 'expired';
  const hours = Math.floor(ms / 3_600_000);
  const minutes = Math.floor((ms % 3_600_000) / 60_000);
  return hours >= 24 ? `in ${Math.floor(hours / 24)}d ${hours % 24}h` : `in ${hours}h ${minutes}m`;
}

export function formatTable(header: string[], rows: string[][]): string[] {
  const widths = header.map((title, column) => Math.max(title.length, ...rows.map((row) => (row[column] ?? '').length)));
  const format = (cells: string[]): string => cells.map((cell, column) => cell.padEnd(widths[column] ?? 0)).join('  ').trimEnd();
  return [format(header), ...rows.map(format)];
}
