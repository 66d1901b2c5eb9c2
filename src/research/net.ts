// The network guard every outbound connection of the research server goes through (SPEC §13).
// Its tools take hostnames from a model, so a string check on the hostname is not enough: the name
// is resolved, every answer must be public unicast, and the connection goes to the address that was
// checked (no second lookup a rebinding DNS server could answer differently). Redirects are
// followed by hand, each hop checked again. See README.md beside this file for the reasoning.

import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { Agent, buildConnector, request, type Dispatcher } from 'undici';
import { bareAddress, classifyAddress } from './addresses.js';
import { ResearchError, isResearchError } from './errors.js';

export const DEFAULT_ALLOWED_PORTS: readonly number[] = [80, 443, 8080, 8443];
export const MAX_BODY_BYTES = 2 * 1024 * 1024;
export const FETCH_TIMEOUT_MS = 10_000;
export const MAX_REDIRECTS = 3;

const LOCAL_NAME_SUFFIXES = ['.localhost', '.local', '.internal'];
const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);

export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

export type Resolve = (hostname: string) => Promise<ResolvedAddress[]>;

/** Where a checked URL may be connected to. */
export interface CheckedTarget {
  url: URL;
  /** The hostname without brackets or trailing dot, lower-case. */
  hostname: string;
  /** The address that passed the check; the connection goes here. */
  address: string;
  family: 4 | 6;
  port: number;
}

export interface NetDeps {
  /** Name → addresses. Default: the OS resolver (dns.lookup, all answers). */
  resolve?: Resolve;
  /** Default: 80, 443, 8080, 8443. */
  allowPorts?: readonly number[];
  /**
   * TEST-ONLY. Changes where the socket is dialled after the guard has passed, so that tests can
   * resolve `public.test` to a public-looking address and still reach a server on 127.0.0.1.
   * The guard itself never sees this; production code must leave it unset.
   */
  connectOverride?: (target: CheckedTarget) => { host: string; port: number };
}

export const systemResolve: Resolve = async (hostname) => {
  const answers = await lookup(hostname, { all: true, verbatim: true });
  return answers.map((answer) => ({ address: answer.address, family: answer.family === 6 ? 6 : 4 }));
};

/** Builds the refusal for the first URL or for a redirect hop, as one sentence. */
type Refuse = (code: ResearchError['code'], reason: string) => ResearchError;

const refuseRequest: Refuse = (code, reason) => new ResearchError(code, `Refused: ${reason}.`);
const refuseRedirect =
  (href: string): Refuse =>
  (code, reason) =>
    new ResearchError(code, `Refused: the page redirected to ${href}, but ${reason}.`);

const ONLY_PUBLIC = 'only public hosts can be fetched';

function isLocalName(hostname: string): boolean {
  return hostname === 'localhost' || LOCAL_NAME_SUFFIXES.some((suffix) => hostname.endsWith(suffix));
}

function defaultPort(protocol: string): number {
  return protocol === 'https:' ? 443 : 80;
}

function listPorts(ports: readonly number[]): string {
  return ports.length <= 1 ? ports.join('') : `${ports.slice(0, -1).join(', ')} and ${ports.at(-1)}`;
}

/**
 * Checks `input` and resolves its host. Returns the address to connect to, or throws a
 * ResearchError whose message is the one sentence to show.
 */
export async function assertFetchableUrl(input: string | URL, deps: NetDeps = {}): Promise<CheckedTarget> {
  return checkUrl(input, deps, refuseRequest);
}

async function checkUrl(input: string | URL, deps: NetDeps, refuse: Refuse): Promise<CheckedTarget> {
  let url: URL;
  try {
    url = new URL(input);
  } catch {
    throw refuse('RS_ERR_INVALID_URL', `${JSON.stringify(String(input).slice(0, 200))} is not a valid URL`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw refuse('RS_ERR_SCHEME', `only http and https URLs can be fetched, not ${url.protocol}`);
  }
  const port = url.port === '' ? defaultPort(url.protocol) : Number(url.port);
  const allowPorts = deps.allowPorts ?? DEFAULT_ALLOWED_PORTS;
  if (!allowPorts.includes(port)) {
    throw refuse('RS_ERR_PORT', `port ${port} is not allowed; only ports ${listPorts(allowPorts)} can be fetched`);
  }

  const hostname = bareAddress(url.hostname.toLowerCase()).replace(/\.$/, '');
  if (hostname === '') throw refuse('RS_ERR_INVALID_URL', `${url.href} has no host`);

  if (isIP(hostname) !== 0) {
    const verdict = classifyAddress(hostname);
    if (!verdict.public) throw refuse('RS_ERR_ADDRESS', `${hostname} is ${verdict.why}; ${ONLY_PUBLIC}`);
    return { url, hostname, address: hostname, family: isIP(hostname) === 6 ? 6 : 4, port };
  }
  if (isLocalName(hostname)) {
    throw refuse('RS_ERR_LOCAL_NAME', `${hostname} is a local name; ${ONLY_PUBLIC}`);
  }

  let answers: ResolvedAddress[];
  try {
    answers = await (deps.resolve ?? systemResolve)(hostname);
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    throw new ResearchError('RS_ERR_DNS', `Could not resolve ${hostname}${typeof code === 'string' ? ` (${code})` : ''}.`, {
      cause: err,
    });
  }
  const first = answers[0];
  if (first === undefined) throw new ResearchError('RS_ERR_DNS', `Could not resolve ${hostname}: it has no addresses.`);
  // Every answer, not just the one we would use: a client may be steered to any of them.
  for (const answer of answers) {
    const verdict = classifyAddress(answer.address);
    if (!verdict.public) {
      throw refuse('RS_ERR_ADDRESS', `${hostname} resolves to ${bareAddress(answer.address)}, ${verdict.why}; ${ONLY_PUBLIC}`);
    }
  }
  return { url, hostname, address: bareAddress(first.address), family: first.family, port };
}

export interface SafeFetchOptions {
  headers?: Record<string, string>;
  /** Default 2 MB. */
  maxBytes?: number;
  /** Whole call, all hops included. Default 10 s. */
  timeoutMs?: number;
  /** Default 3. */
  maxRedirects?: number;
}

export interface FetchedPage {
  /** The URL the body came from, after redirects. */
  url: string;
  status: number;
  /** Lower-case media type without parameters, '' when absent. */
  contentType: string;
  /** The charset parameter of Content-Type, '' when absent. */
  charset: string;
  body: Buffer;
  /** Every URL that was requested, in order. */
  hops: string[];
}

const DEFAULT_HEADERS: Record<string, string> = {
  'user-agent': 'tollbooth-research/0.1',
  accept: 'text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.5',
};

/** An undici Agent that can only reach the checked address (or the test override). */
function pinnedAgent(target: CheckedTarget, deps: NetDeps, timeoutMs: number): Agent {
  const dial = deps.connectOverride?.(target) ?? { host: target.address, port: target.port };
  const connector = buildConnector({ timeout: timeoutMs });
  const servername = isIP(target.hostname) === 0 ? target.hostname : undefined;
  return new Agent({
    connections: 1,
    // undici would dial options.hostname; it only ever gets the checked address. TLS still
    // verifies the certificate against the name in the URL (servername).
    connect: (options, callback) =>
      connector({ ...options, hostname: dial.host, port: String(dial.port), servername }, callback),
  });
}

/** Drops a response body we will not read; undici reports the abort as an error we expect. */
function discard(body: Dispatcher.ResponseData['body']): void {
  body.on('error', () => undefined);
  body.destroy();
}

function resolveLocation(location: string, base: URL): string {
  try {
    return new URL(location, base).href;
  } catch {
    throw new ResearchError(
      'RS_ERR_INVALID_URL',
      `Refused: the page redirected to ${JSON.stringify(location.slice(0, 200))}, which is not a valid URL.`,
    );
  }
}

function headerValue(value: string | string[] | undefined): string {
  return Array.isArray(value) ? (value[0] ?? '') : (value ?? '');
}

function formatBytes(bytes: number): string {
  return bytes % (1024 * 1024) === 0 ? `${bytes / (1024 * 1024)} MB` : `${bytes} bytes`;
}

/**
 * GET `input` through the guard: every hop checked with assertFetchableUrl and connected to the
 * address that passed, at most `maxRedirects` redirects, the body capped while it streams.
 * Non-2xx statuses are returned, not thrown; refusals and failures throw ResearchError.
 */
export async function safeFetch(input: string | URL, options: SafeFetchOptions = {}, deps: NetDeps = {}): Promise<FetchedPage> {
  const maxBytes = options.maxBytes ?? MAX_BODY_BYTES;
  const timeoutMs = options.timeoutMs ?? FETCH_TIMEOUT_MS;
  const maxRedirects = options.maxRedirects ?? MAX_REDIRECTS;
  const deadline = AbortSignal.timeout(timeoutMs);
  const timedOut = (): ResearchError =>
    new ResearchError('RS_ERR_TIMEOUT', `Timed out: the page did not load within ${timeoutMs / 1000} s.`);

  const hops: string[] = [];
  let next: string | URL = input;
  let refuse = refuseRequest;
  for (;;) {
    const target = await abortable(checkUrl(next, deps, refuse), deadline, timedOut);
    hops.push(target.url.href);
    const agent = pinnedAgent(target, deps, timeoutMs);
    try {
      const response = await request(target.url, {
        method: 'GET',
        dispatcher: agent,
        headers: { ...DEFAULT_HEADERS, ...options.headers },
        signal: deadline,
      });
      const location = headerValue(response.headers.location);
      if (REDIRECT_STATUSES.has(response.statusCode) && location !== '') {
        discard(response.body);
        const href = resolveLocation(location, target.url);
        if (hops.length > maxRedirects) {
          throw new ResearchError(
            'RS_ERR_TOO_MANY_REDIRECTS',
            `Refused: the page redirected more than ${maxRedirects} times (last to ${href}).`,
          );
        }
        next = href;
        refuse = refuseRedirect(href);
        continue;
      }

      const declared = Number(headerValue(response.headers['content-length']));
      if (Number.isFinite(declared) && declared > maxBytes) {
        discard(response.body);
        throw new ResearchError(
          'RS_ERR_BODY_TOO_LARGE',
          `Refused: the page declares ${declared} bytes, over the ${formatBytes(maxBytes)} limit.`,
        );
      }
      const chunks: Buffer[] = [];
      let received = 0;
      for await (const chunk of response.body) {
        const buffer = chunk as Buffer;
        received += buffer.length;
        if (received > maxBytes) {
          // Stop reading now: a server that lies about (or omits) its length gets no more of our memory.
          discard(response.body);
          throw new ResearchError(
            'RS_ERR_BODY_TOO_LARGE',
            `Refused: the page sent more than ${formatBytes(maxBytes)}; the download was stopped.`,
          );
        }
        chunks.push(buffer);
      }
      const [mediaType = '', ...params] = headerValue(response.headers['content-type']).split(';');
      const charset = params.map((p) => p.trim().toLowerCase()).find((p) => p.startsWith('charset='));
      return {
        url: target.url.href,
        status: response.statusCode,
        contentType: mediaType.trim().toLowerCase(),
        charset: charset === undefined ? '' : charset.slice('charset='.length).replace(/"/g, ''),
        body: Buffer.concat(chunks),
        hops,
      };
    } catch (err) {
      if (isResearchError(err)) throw err;
      if (deadline.aborted) throw timedOut();
      const code = (err as { code?: unknown }).code;
      throw new ResearchError(
        'RS_ERR_FETCH_FAILED',
        `Fetching ${target.url.href} failed${typeof code === 'string' ? ` (${code})` : ''}: ${(err as Error).message.replace(/\.$/, '')}.`,
        { cause: err },
      );
    } finally {
      agent.destroy().catch(() => undefined);
    }
  }
}

/** Rejects with `onAbort()` as soon as `signal` aborts (DNS lookups cannot be cancelled). */
export function abortable<T>(work: Promise<T>, signal: AbortSignal, onAbort: () => Error): Promise<T> {
  if (signal.aborted) return Promise.reject(onAbort());
  return new Promise<T>((resolve, reject) => {
    const abort = (): void => reject(onAbort());
    signal.addEventListener('abort', abort, { once: true });
    work.finally(() => signal.removeEventListener('abort', abort)).then(resolve, reject);
  });
}
