// The three research tools as plain async functions: arguments in, a result object out, a
// ResearchError (one sentence) thrown for anything the caller should see as a tool error.
// Every connection goes through net.ts; nothing here dials on its own without the guard's answer.

import { Resolver } from 'node:dns/promises';
import { isIP } from 'node:net';
import { connect as tlsConnect, type PeerCertificate } from 'node:tls';
import { bareAddress } from './addresses.js';
import { ResearchError } from './errors.js';
import { tablesFromHtml, readableText, type HtmlTable } from './html.js';
import {
  FETCH_TIMEOUT_MS,
  abortable,
  assertFetchableUrl,
  safeFetch,
  type CheckedTarget,
  type FetchedPage,
  type NetDeps,
  type SafeFetchOptions,
} from './net.js';

/** The DNS queries inspect_domain makes; node:dns/promises Resolver satisfies it. */
export type DnsRecordResolver = Pick<Resolver, 'resolve4' | 'resolve6' | 'resolveMx' | 'resolveNs' | 'resolveTxt' | 'resolveCname'>;

export interface ResearchDeps extends NetDeps {
  /** inspect_domain's record lookups. Default: a node:dns Resolver (system servers, 3 s per try). */
  dns?: DnsRecordResolver;
  /** The clock for certificate days-left. */
  now?: () => Date;
  /** Overrides of safeFetch limits (tests shorten the timeout). */
  fetch?: SafeFetchOptions;
}

const HTML_TYPES = new Set(['text/html', 'application/xhtml+xml']);
export const DEFAULT_MAX_CHARS = 20_000;

function decode(page: FetchedPage): string {
  try {
    return new TextDecoder(page.charset || 'utf-8').decode(page.body);
  } catch {
    return new TextDecoder('utf-8').decode(page.body); // unknown charset label
  }
}

async function fetchOk(url: string, deps: ResearchDeps): Promise<FetchedPage> {
  const page = await safeFetch(url, deps.fetch, deps);
  if (page.status < 200 || page.status > 299) {
    throw new ResearchError('RS_ERR_HTTP_STATUS', `The page at ${page.url} answered HTTP ${page.status}.`);
  }
  return page;
}

function looksLikeHtml(page: FetchedPage): boolean {
  return HTML_TYPES.has(page.contentType) || page.contentType === '';
}

export interface ReadableResult {
  url: string;
  title: string;
  text: string;
  truncated: boolean;
}

export async function fetchReadable(args: { url: string; max_chars?: number }, deps: ResearchDeps = {}): Promise<ReadableResult> {
  const page = await fetchOk(args.url, deps);
  let title = '';
  let text: string;
  if (looksLikeHtml(page)) {
    ({ title, text } = readableText(decode(page)));
  } else if (page.contentType.startsWith('text/')) {
    text = decode(page);
  } else {
    throw new ResearchError(
      'RS_ERR_CONTENT_TYPE',
      `The page at ${page.url} is ${page.contentType}; only HTML and text pages can be read.`,
    );
  }
  const maxChars = args.max_chars ?? DEFAULT_MAX_CHARS;
  return { url: page.url, title, text: text.slice(0, maxChars), truncated: text.length > maxChars };
}

export interface TablesResult {
  url: string;
  tables: HtmlTable[];
}

export async function extractTables(args: { url: string }, deps: ResearchDeps = {}): Promise<TablesResult> {
  const page = await fetchOk(args.url, deps);
  if (!looksLikeHtml(page)) {
    throw new ResearchError('RS_ERR_CONTENT_TYPE', `The page at ${page.url} is ${page.contentType}; tables can only be read from HTML.`);
  }
  return { url: page.url, tables: tablesFromHtml(decode(page)) };
}

export interface CertificateInfo {
  subject_cn: string;
  subject_o: string;
  issuer_cn: string;
  issuer_o: string;
  valid_from: string;
  valid_to: string;
  days_left: number;
  subject_alt_names: string[];
  /** Whether the chain and the name verify against the system roots. */
  authorized: boolean;
  authorization_error: string;
}

export interface DomainReport {
  domain: string;
  /** The address that passed the guard; the TLS connection went there. */
  address: string;
  records: {
    A: string[];
    AAAA: string[];
    MX: Array<{ exchange: string; priority: number }>;
    NS: string[];
    TXT: string[];
    CNAME: string[];
  };
  /** Record types whose lookup failed for a reason other than "no such record", e.g. "MX: ETIMEOUT". */
  dns_errors: string[];
  certificate: CertificateInfo | null;
  /** Why there is no certificate, '' when there is one. */
  tls_error: string;
}

/** Accepts "example.com", "example.com." or a URL, and returns the bare lower-case name. */
function domainFromInput(input: string): string {
  const trimmed = input.trim();
  let host = trimmed;
  if (trimmed.includes('/')) {
    try {
      host = new URL(trimmed.includes('://') ? trimmed : `https://${trimmed}`).hostname;
    } catch {
      throw new ResearchError('RS_ERR_INVALID_INPUT', `${JSON.stringify(trimmed.slice(0, 200))} is not a domain name.`);
    }
  }
  host = host.toLowerCase().replace(/\.$/, '');
  if (isIP(bareAddress(host)) !== 0) {
    throw new ResearchError(
      'RS_ERR_INVALID_INPUT',
      `inspect_domain takes a domain name such as example.com, not an IP address (${host}).`,
    );
  }
  return host;
}

const NO_RECORD_CODES = new Set(['ENODATA', 'ENOTFOUND', 'NOTFOUND', 'NODATA']);

async function records<T>(type: string, query: () => Promise<T[]>, errors: string[]): Promise<T[]> {
  try {
    return await query();
  } catch (err) {
    const raw = (err as { code?: unknown }).code;
    const code = typeof raw === 'string' || typeof raw === 'number' ? String(raw) : String((err as Error).message);
    if (!NO_RECORD_CODES.has(code)) errors.push(`${type}: ${code}`);
    return [];
  }
}

function firstValue(value: string | string[] | undefined): string {
  return Array.isArray(value) ? (value[0] ?? '') : (value ?? '');
}

const DAY_MS = 86_400_000;

function describeCertificate(cert: PeerCertificate, authorized: boolean, authorizationError: string, now: Date): CertificateInfo {
  const validTo = new Date(cert.valid_to);
  return {
    subject_cn: firstValue(cert.subject?.CN),
    subject_o: firstValue(cert.subject?.O),
    issuer_cn: firstValue(cert.issuer?.CN),
    issuer_o: firstValue(cert.issuer?.O),
    valid_from: new Date(cert.valid_from).toISOString(),
    valid_to: validTo.toISOString(),
    days_left: Math.floor((validTo.getTime() - now.getTime()) / DAY_MS),
    subject_alt_names: (cert.subjectaltname ?? '')
      .split(',')
      .map((name) => name.trim())
      .filter((name) => name !== ''),
    authorized,
    authorization_error: authorizationError,
  };
}

/**
 * Reads the certificate the host presents on port 443. The chain is not enforced (an expired or
 * self-signed certificate is exactly what a caller may want to see); `authorized` reports it.
 * Nothing is sent after the handshake.
 */
function readCertificate(target: CheckedTarget, deps: ResearchDeps, timeoutMs: number): Promise<CertificateInfo> {
  const dial = deps.connectOverride?.(target) ?? { host: target.address, port: target.port };
  return new Promise((resolve, reject) => {
    const socket = tlsConnect({ host: dial.host, port: dial.port, servername: target.hostname, rejectUnauthorized: false });
    socket.setTimeout(timeoutMs, () => socket.destroy(new Error(`no TLS handshake within ${timeoutMs / 1000} s`)));
    socket.once('error', reject);
    socket.once('secureConnect', () => {
      const cert = socket.getPeerCertificate();
      const authorizationError = socket.authorizationError ? String(socket.authorizationError) : '';
      socket.destroy();
      if (!cert || Object.keys(cert).length === 0) reject(new Error('the server presented no certificate'));
      else resolve(describeCertificate(cert, socket.authorized, authorizationError, (deps.now ?? (() => new Date()))()));
    });
  });
}

export async function inspectDomain(args: { domain: string }, deps: ResearchDeps = {}): Promise<DomainReport> {
  const domain = domainFromInput(args.domain);
  // Same guard as fetching: a name that resolves anywhere private is refused before any connection.
  const target = await assertFetchableUrl(`https://${domain}/`, deps);
  const timeoutMs = deps.fetch?.timeoutMs ?? FETCH_TIMEOUT_MS;
  const dns = deps.dns ?? new Resolver({ timeout: 3000, tries: 2 });
  const dnsErrors: string[] = [];
  const deadline = AbortSignal.timeout(timeoutMs);
  const timedOut = (): ResearchError =>
    new ResearchError('RS_ERR_TIMEOUT', `Timed out: inspecting ${domain} took longer than ${timeoutMs / 1000} s.`);

  const certificate = readCertificate(target, deps, timeoutMs).then(
    (cert) => ({ cert, error: '' }),
    (err: unknown) => ({ cert: null, error: (err as Error).message }),
  );
  const [A, AAAA, MX, NS, TXT, CNAME, tls] = await abortable(
    Promise.all([
      records('A', () => dns.resolve4(domain), dnsErrors),
      records('AAAA', () => dns.resolve6(domain), dnsErrors),
      records('MX', () => dns.resolveMx(domain), dnsErrors),
      records('NS', () => dns.resolveNs(domain), dnsErrors),
      records('TXT', () => dns.resolveTxt(domain), dnsErrors),
      records('CNAME', () => dns.resolveCname(domain), dnsErrors),
      certificate,
    ]),
    deadline,
    timedOut,
  );
  return {
    domain,
    address: target.address,
    records: {
      A,
      AAAA,
      MX: MX.map(({ exchange, priority }) => ({ exchange, priority })).sort((a, b) => a.priority - b.priority),
      NS,
      TXT: TXT.map((chunks) => chunks.join('')),
      CNAME,
    },
    dns_errors: dnsErrors,
    certificate: tls.cert,
    tls_error: tls.error,
  };
}
