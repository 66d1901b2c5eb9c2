// The last line of every `ledger export` file: what the file holds per ledger, so that an entry
// removed, added or changed anywhere — the last one of a ledger included, which no later `prev`
// covers — is found offline by `ledger verify --file` (verify-file.ts). With `ledger.signingKey` set
// the line carries an HMAC-SHA-256 of the trailer, so the trailer itself cannot be rewritten to match
// an edited file; without it `mac` is null and the file is only as trustworthy as where it was kept.
//   {"trailer":{"entries":N,"exportedAt":"…","format":"jsonl","since":null,"until":null,
//    "lastHash":{"<ledger>":"<hash of its last entry in the file>"},
//    "ledgers":{"<ledger>":{"entries":n,"firstSeq":a,"lastSeq":b}}},"mac":"<hex>"|null}
// The trailer is written in canonical JSON (sorted keys, no whitespace); the mac is over exactly that
// text. A ledger is named by its handle's fingerprint or its x402 payer's address (rows carry the
// same); a name already taken in the file, or an empty fingerprint, gets "#2", "#3" … and its rows
// then carry it as `ledger`.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { canonicalJson } from '../store/ledger-chain.js';
import type { ExportFormat } from './format.js';

export interface LedgerSummary {
  entries: number;
  firstSeq: number;
  lastSeq: number;
}

export interface Trailer {
  entries: number;
  exportedAt: string;
  format: ExportFormat;
  since: string | null;
  until: string | null;
  lastHash: Record<string, string>;
  ledgers: Record<string, LedgerSummary>;
}

export const TRAILER_PREFIX = '{"trailer":';

export function trailerMac(trailer: Trailer, signingKey: string): string {
  return createHmac('sha256', signingKey).update(canonicalJson(trailer), 'utf8').digest('hex');
}

/** The trailer line (no newline); mac null without a signing key. */
export function trailerLine(trailer: Trailer, signingKey: string): string {
  const mac = signingKey === '' ? null : trailerMac(trailer, signingKey);
  return `${TRAILER_PREFIX}${canonicalJson(trailer)},"mac":${JSON.stringify(mac)}}`;
}

/** Does `mac` sign `trailer` under `signingKey`? (constant time) */
export function macMatches(trailer: Trailer, mac: string, signingKey: string): boolean {
  const expected = Buffer.from(trailerMac(trailer, signingKey), 'hex');
  const found = Buffer.from(/^[0-9a-f]{64}$/.test(mac) ? mac : '', 'hex');
  return found.length === expected.length && timingSafeEqual(found, expected);
}

/** Gives each ledger of one export a distinct name: its fingerprint or payer, else with "#n". */
export class LedgerNames {
  readonly #taken = new Set<string>();

  name(base: string): string {
    let name = base === '' ? '(no fingerprint)#1' : base;
    for (let n = 2; this.#taken.has(name); n++) name = `${base === '' ? '(no fingerprint)' : base}#${n}`;
    this.#taken.add(name);
    return name;
  }
}
