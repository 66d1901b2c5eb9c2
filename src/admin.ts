// Operator verbs (SPEC §2) for resolving disputes: look at a handle, grant credits by hand, list
// charges. Pure functions over a store, the config and an output writer, so tests drive them
// without a process. What they print follows the logging rules (§10): never a handle, a handle
// hash in full, a checkout URL or a provider link id.
import { GatewayError } from './errors.js';
import type { GatewayConfig } from './config/schema.js';
import { fingerprint, redactHandles } from './observability/fingerprint.js';
import type { Logger } from './observability/logger.js';
import { hashHandle, isWellFormedHandle } from './paywall/handles.js';
import type { ChargeRecord, ChargeStatus, HandleState, Store } from './store/store.js';

export interface AdminContext {
  store: Store;
  config: GatewayConfig;
  /** Receives one line of human-readable output at a time (no trailing newline). */
  out: (line: string) => void;
  logger: Pick<Logger, 'info'>;
  now?: () => number;
}

export const LISTABLE_CHARGE_STATUSES = ['pending', 'underpaid', 'settled', 'abandoned', 'expired'] as const satisfies readonly ChargeStatus[];

interface ResolvedHandle {
  handleHash: string;
  fingerprint: string;
  state: HandleState;
}

/** `tollbooth handle show <handle|fingerprint>`: fingerprint, principal, balance per SKU, expiry. */
export async function showHandle(context: AdminContext, reference: string): Promise<void> {
  const handles = await resolveHandles(context, reference);
  handles.forEach((handle, index) => {
    if (index > 0) context.out('');
    describeHandle(context, handle);
  });
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
  const balance = await context.store.grantCredits(handle.handleHash, sku, credits);
  // The reason is free text: a handle pasted into it is logged as its fingerprint (SPEC §10).
  context.logger.info({ evt: 'admin_grant', fingerprint: handle.fingerprint, sku, credits, reason: redactHandles(reason), balance }, 'credits granted by an operator');
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
  const header = ['OPENED', 'STATUS', 'SKU', 'AMOUNT', 'CURRENCY', 'CREDITS', 'GRANTED', 'HANDLE HASH'];
  const rows = charges.map((charge: ChargeRecord) => [
    new Date(charge.openedAt).toISOString(),
    charge.status,
    charge.sku,
    charge.amount,
    charge.currency,
    String(charge.credits),
    String(charge.grantedCredits),
    shortHash(charge.handleHash),
  ]);
  for (const line of formatTable(header, rows)) context.out(line);
}

/** A full handle is hashed; anything else is taken as a fingerprint (`tb_s_KLeV..EPcw`). */
async function resolveHandles(context: AdminContext, reference: string): Promise<ResolvedHandle[]> {
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

function formatTable(header: string[], rows: string[][]): string[] {
  const widths = header.map((title, column) => Math.max(title.length, ...rows.map((row) => (row[column] ?? '').length)));
  const format = (cells: string[]): string => cells.map((cell, column) => cell.padEnd(widths[column] ?? 0)).join('  ').trimEnd();
  return [format(header), ...rows.map(format)];
}
