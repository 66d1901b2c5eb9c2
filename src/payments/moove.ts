// The Moove payment provider (SPEC §7.2): one payment link per charge, read back by polling or on a
// webhook trigger. What this file guarantees, and why:
// - The API key travels only in the X-API-Key header of keyed calls. It is held in a #private field
//   (util.inspect does not show those) and never reaches an error message, property or cause, a log
//   line or a metric label: errors are built here from the status and Moove's error code, and
//   transport errors from undici (which may carry request options) are reduced to their name/code.
// - Link ids and checkout URLs are never logged either (SPEC §10): they identify a payer's charge.
// - Retries: only 429, 5xx and transport failures, full-jitter exponential backoff, at most 4 tries.
//   Opening a charge gives up after `createDeadlineMs` overall, so a challenge stays well inside the
//   call deadline; reads have the same kind of bound (`readDeadlineMs`).
// - Keyed calls go through an adaptive pacer (AIMD): near 2 req/s, halved on every 429 down to a
//   floor, recovering additively on every other answer. Public reads are not paced: Moove rate
//   limits keyed calls per key, and a public read carries no key.
// - Auth, scope and account-not-ready failures need an operator, not a retry: one warn line per
//   error code per 5 minutes says what to fix.
import { Agent, request, type Dispatcher } from 'undici';
import { readCapped } from '../io/body.js';
import { isRecord, parseJsonOrUndefined } from '../io/json.js';
import type { Logger } from '../observability/logger.js';
import type { Metrics } from '../observability/metrics.js';
import { compareDecimal, isDecimalString } from '../money/decimal.js';
import { ProviderError, type ChargeReading, type OpenChargeInput, type OpenedCharge, type PaymentProvider } from './provider.js';

export interface MoovePacingOptions {
  /** Starting (and maximum) rate of keyed calls. */
  ratePerSecond: number;
  /** The rate never drops below this, however many 429s arrive. */
  floorPerSecond: number;
  /** Keyed calls that may go out back to back after a quiet spell. */
  burst: number;
  /** Added to the rate after every keyed answer that was not a 429. */
  recoveryPerAnswer: number;
}

export interface MooveRetryOptions {
  maxAttempts: number;
  baseDelayMs: number;
  maxDelayMs: number;
}

export interface MooveProviderOptions {
  apiKey: string;
  /** e.g. https://api.moove.xyz (no trailing path). */
  baseUrl: string;
  logger: Logger;
  metrics?: Metrics;
  /** Epoch ms; drives pacing, deadlines and the operator-log throttle. Waiting itself uses real timers. */
  clock?: () => number;
  /** [0, 1); only used for backoff jitter. */
  random?: () => number;
  createDeadlineMs?: number;
  readDeadlineMs?: number;
  requestTimeoutMs?: number;
  retry?: Partial<MooveRetryOptions>;
  pacing?: Partial<MoovePacingOptions>;
}

/** What Moove says about a link, plus the amount it was created for (normalised by Moove: "5.00" → "5"). */
export interface MooveChargeReading extends ChargeReading {
  toAmount: string | null;
}

const DEFAULT_PACING: MoovePacingOptions = { ratePerSecond: 2, floorPerSecond: 0.25, burst: 2, recoveryPerAnswer: 0.1 };
const DEFAULT_RETRY: MooveRetryOptions = { maxAttempts: 4, baseDelayMs: 200, maxDelayMs: 2_000 };
const DESCRIPTION_MAX = 500;
const MAX_RESPONSE_BYTES = 256 * 1024;
const OPERATOR_LOG_INTERVAL_MS = 5 * 60_000;
const NONCE_PATTERN = /^[A-Za-z0-9_-]{1,128}$/;
const LINK_ID_MAX = 200;
const ERROR_CODE_PATTERN = /^[A-Z][A-Z0-9_]{0,63}$/;

type Operation = 'create' | 'read';

interface Exchange {
  op: Operation;
  method: 'GET' | 'POST';
  path: string;
  keyed: boolean;
  body?: string;
}

/**
 * The link description: `tb_<nonce> · <label> — <credits> credits (<tool>)`, at most 500 UTF-16 units.
 * The nonce prefix is what ties a link to its charge, so only the tail is ever cut.
 */
export function describeCharge(input: Pick<OpenChargeInput, 'nonce' | 'label' | 'credits' | 'tool'>): string {
  if (!NONCE_PATTERN.test(input.nonce)) throw new TypeError('a charge nonce is base64url of at most 128 characters');
  // eslint-disable-next-line no-control-regex -- control characters are what this strips
  const flat = (text: string): string => text.replace(/[\u0000-\u001f\u007f]+/g, ' ');
  const full = `tb_${input.nonce} · ${flat(input.label)} — ${input.credits} credits (${flat(input.tool)})`;
  if (full.length <= DESCRIPTION_MAX) return full;
  let cut = DESCRIPTION_MAX - 1; // room for the ellipsis
  const last = full.charCodeAt(cut - 1);
  if (last >= 0xd800 && last <= 0xdbff) cut -= 1; // never split a surrogate pair
  return `${full.slice(0, cut)}…`;
}

/** Additive-increase, multiplicative-decrease token bucket for keyed calls. */
export class AdaptivePacer {
  readonly #options: MoovePacingOptions;
  readonly #clock: () => number;
  #rate: number;
  #tokens: number;
  #refilledAt: number;

  constructor(options: MoovePacingOptions, clock: () => number) {
    this.#options = options;
    this.#clock = clock;
    this.#rate = options.ratePerSecond;
    this.#tokens = options.burst;
    this.#refilledAt = clock();
  }

  get ratePerSecond(): number {
    return this.#rate;
  }

  /** Takes the next slot and returns how many ms to wait before using it (slots queue up in order). */
  take(): number {
    this.#refill();
    this.#tokens -= 1;
    return this.#tokens >= 0 ? 0 : Math.ceil((-this.#tokens / this.#rate) * 1000);
  }

  /** Returns a slot that was taken but not used. */
  giveBack(): void {
    this.#tokens = Math.min(this.#options.burst, this.#tokens + 1);
  }

  onRateLimited(): void {
    this.#refill();
    this.#rate = Math.max(this.#options.floorPerSecond, this.#rate / 2);
    this.#tokens = Math.min(this.#tokens, 0); // no burst straight after a 429
  }

  onAnswered(): void {
    this.#refill();
    this.#rate = Math.min(this.#options.ratePerSecond, this.#rate + this.#options.recoveryPerAnswer);
  }

  #refill(): void {
    const now = this.#clock();
    const elapsed = Math.max(0, now - this.#refilledAt);
    this.#tokens = Math.min(this.#options.burst, this.#tokens + (elapsed * this.#rate) / 1000);
    this.#refilledAt = now;
  }
}

export class MooveProvider implements PaymentProvider {
  readonly name = 'moove' as const;
  readonly #apiKey: string;
  readonly #baseUrl: string;
  readonly #logger: Logger;
  readonly #metrics: Metrics | undefined;
  readonly #clock: () => number;
  readonly #random: () => number;
  readonly #createDeadlineMs: number;
  readonly #readDeadlineMs: number;
  readonly #requestTimeoutMs: number;
  readonly #retry: MooveRetryOptions;
  readonly #pacer: AdaptivePacer;
  readonly #agent: Agent;
  /** error code → when the operator was last told, and how many repeats were not logged since. */
  readonly #operatorNotices = new Map<string, { at: number; suppressed: number }>();

  constructor(options: MooveProviderOptions) {
    if (!options.apiKey) throw new TypeError('the Moove provider needs an API key (payments.moove.apiKey)');
    this.#apiKey = options.apiKey;
    this.#baseUrl = options.baseUrl.replace(/\/+$/, '');
    this.#logger = options.logger;
    this.#metrics = options.metrics;
    this.#clock = options.clock ?? Date.now;
    this.#random = options.random ?? Math.random;
    this.#createDeadlineMs = options.createDeadlineMs ?? 10_000;
    this.#readDeadlineMs = options.readDeadlineMs ?? 10_000;
    this.#requestTimeoutMs = options.requestTimeoutMs ?? 5_000;
    this.#retry = { ...DEFAULT_RETRY, ...options.retry };
    this.#pacer = new AdaptivePacer({ ...DEFAULT_PACING, ...options.pacing }, this.#clock);
    this.#agent = new Agent({ connect: { timeout: this.#requestTimeoutMs }, keepAliveTimeout: 10_000 });
  }

  /** The current keyed-call rate (req/s), for tests and diagnostics. */
  get keyedRatePerSecond(): number {
    return this.#pacer.ratePerSecond;
  }

  async openCharge(input: OpenChargeInput, signal?: AbortSignal): Promise<OpenedCharge> {
    if (!isDecimalString(input.amount) || compareDecimal(input.amount, '0') <= 0) {
      throw new ProviderError('bad_amount', 'a charge amount must be a positive decimal string like "5.00"');
    }
    const body = JSON.stringify({
      toAmount: input.amount,
      description: describeCharge(input),
      maxUsage: 1,
      expirationDate: new Date(input.expiresAt).toISOString(),
    });
    try {
      const payload = await this.#send({ op: 'create', method: 'POST', path: '/v1/payment-link', keyed: true, body }, this.#createDeadlineMs, signal);
      return parseCreatedLink(payload);
    } catch (error) {
      this.#tellOperator(error);
      throw error;
    }
  }

  async readCharge(providerRef: string, signal?: AbortSignal): Promise<MooveChargeReading> {
    if (typeof providerRef !== 'string' || providerRef.length === 0 || providerRef.length > LINK_ID_MAX) {
      throw new ProviderError('not_found', 'not a Moove payment link id', { httpStatus: null });
    }
    const path = `/v1/payment-link/${encodeURIComponent(providerRef)}`;
    try {
      let payload: unknown;
      try {
        payload = await this.#send({ op: 'read', method: 'GET', path, keyed: false }, this.#readDeadlineMs, signal);
      } catch (error) {
        // Links are public; an account that requires auth for reads answers 401: ask again with the key.
        if (!(error instanceof ProviderError) || error.httpStatus !== 401) throw error;
        payload = await this.#send({ op: 'read', method: 'GET', path, keyed: true }, this.#readDeadlineMs, signal);
      }
      return parseReading(payload);
    } catch (error) {
      this.#tellOperator(error);
      throw error;
    }
  }

  async close(): Promise<void> {
    await this.#agent.close();
  }

  /** One logical call: paced (when keyed), retried on 429/5xx/transport errors, bounded by a deadline. */
  async #send(exchange: Exchange, deadlineMs: number, signal: AbortSignal | undefined): Promise<unknown> {
    const deadlineAt = this.#clock() + deadlineMs;
    const giveUp = (last: ProviderError | undefined): ProviderError =>
      new ProviderError(last?.kind ?? 'network', `gave up on Moove after ${deadlineMs} ms${last ? `: ${last.message}` : ''}`, {
        httpStatus: last?.httpStatus ?? null,
        providerCode: last?.providerCode ?? null,
        cause: last,
      });
    let last: ProviderError | undefined;
    for (let attempt = 1; ; attempt += 1) {
      if (exchange.keyed) {
        const wait = this.#pacer.take();
        if (this.#clock() + wait >= deadlineAt) {
          this.#pacer.giveBack();
          throw giveUp(last);
        }
        if (wait > 0) await sleep(wait, signal);
      }
      const timeoutMs = Math.min(this.#requestTimeoutMs, deadlineAt - this.#clock());
      if (timeoutMs <= 0) throw giveUp(last);
      try {
        return await this.#exchangeOnce(exchange, timeoutMs, signal);
      } catch (error) {
        if (!(error instanceof ProviderError)) throw error;
        last = error;
      }
      if (!last.retryable || attempt >= this.#retry.maxAttempts || signal?.aborted) throw last;
      const delay = this.#random() * Math.min(this.#retry.maxDelayMs, this.#retry.baseDelayMs * 2 ** (attempt - 1));
      if (this.#clock() + delay >= deadlineAt) throw giveUp(last);
      this.#logger.debug({ evt: 'provider_retry', provider: 'moove', op: exchange.op, attempt, kind: last.kind, delayMs: Math.round(delay) }, 'retrying a Moove request');
      await sleep(delay, signal);
    }
  }

  /** One HTTP request and its answer, mapped to a payload or a ProviderError. */
  async #exchangeOnce(exchange: Exchange, timeoutMs: number, signal: AbortSignal | undefined): Promise<unknown> {
    const headers: Record<string, string> = { accept: 'application/json' };
    if (exchange.body !== undefined) headers['content-type'] = 'application/json';
    if (exchange.keyed) headers['x-api-key'] = this.#apiKey;
    const timeout = AbortSignal.timeout(timeoutMs);
    let response: Dispatcher.ResponseData | undefined;
    let text: string;
    try {
      if (signal?.aborted) throw signal.reason;
      response = await request(`${this.#baseUrl}${exchange.path}`, {
        method: exchange.method,
        headers,
        body: exchange.body ?? null,
        signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
        dispatcher: this.#agent,
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
      });
      text = await readCapped(response.body, MAX_RESPONSE_BYTES, (limit) => new ProviderError('bad_response', `Moove answered with a body over ${limit} bytes`));
    } catch (error) {
      this.#count(exchange.op, response ? String(response.statusCode) : 'network');
      throw transportError(error, { cancelled: signal?.aborted === true, timedOut: timeout.aborted, timeoutMs });
    }
    const status = response.statusCode;
    this.#count(exchange.op, String(status));
    if (exchange.keyed) {
      if (status === 429) this.#pacer.onRateLimited();
      else this.#pacer.onAnswered();
    }
    const payload = parseJsonOrUndefined(text);
    if (status >= 200 && status < 300) {
      if (payload === undefined) throw new ProviderError('bad_response', `Moove answered ${status} with a body that is not JSON`, { httpStatus: status });
      return payload;
    }
    throw errorFromAnswer(status, payload);
  }

  #count(op: Operation, status: string): void {
    this.#metrics?.providerRequests.inc({ op, status });
  }

  /** Failures only an operator can fix: one line per error code per 5 minutes. */
  #tellOperator(error: unknown): void {
    if (!(error instanceof ProviderError)) return;
    const advice = operatorAdvice(error);
    if (!advice) return;
    const code = error.providerCode ?? `HTTP_${error.httpStatus ?? 'unknown'}`;
    const now = this.#clock();
    const notice = this.#operatorNotices.get(code);
    if (notice && now - notice.at < OPERATOR_LOG_INTERVAL_MS) {
      notice.suppressed += 1;
      return;
    }
    this.#operatorNotices.set(code, { at: now, suppressed: 0 });
    this.#logger.warn(
      { evt: 'provider_action_needed', provider: 'moove', code, httpStatus: error.httpStatus, repeatsSinceLastNotice: notice?.suppressed ?? 0 },
      advice,
    );
  }
}

function operatorAdvice(error: ProviderError): string | null {
  switch (error.kind) {
    case 'account_not_ready':
      return 'Moove says the account is not ready to receive payments: create a Moove handle and set a default wallet, then payments will resume';
    case 'scope':
      return 'The Moove API key lacks the scope to manage payment links: create a key with payment-link access and set payments.moove.apiKey (MOOVE_API_KEY); no charge can be opened until then';
    case 'auth':
      if (error.providerCode === 'EXPIRED_API_KEY') {
        return 'The Moove API key has expired: create a new key in Moove and set payments.moove.apiKey (MOOVE_API_KEY); no charge can be opened until then';
      }
      if (error.providerCode === 'INVALID_API_KEY') {
        return 'Moove does not recognise the API key: check payments.moove.apiKey (MOOVE_API_KEY) for a typo or a revoked key; no charge can be opened until then';
      }
      return 'Moove did not accept the request as authenticated: set payments.moove.apiKey (MOOVE_API_KEY) to a valid key; no charge can be opened until then';
    default:
      return null;
  }
}

/** Maps a non-2xx answer by status; Moove's error code is kept (when it looks like one) but its free text is not. */
function errorFromAnswer(status: number, payload: unknown): ProviderError {
  const code = firstErrorCode(payload);
  const details = { httpStatus: status, providerCode: code };
  const said = code ?? `HTTP ${status}`;
  if (status === 429) return new ProviderError('rate_limited', `Moove is rate limiting this API key (${said})`, details);
  if (status >= 500) return new ProviderError('server', `Moove failed with ${status}${code ? ` ${code}` : ''}`, details);
  switch (status) {
    case 401:
      return new ProviderError('auth', `Moove refused the API key (${said})`, details);
    case 403:
      return new ProviderError('scope', `the Moove API key lacks the scope for this call (${said})`, details);
    case 404:
      return new ProviderError('not_found', `Moove has no payment link with that id (${said})`, details);
    case 409:
      return new ProviderError('account_not_ready', `the Moove account is not ready to receive payments (${said})`, details);
    case 422:
      return new ProviderError('bad_amount', `Moove refused the payment link amount (${said})`, details);
    default:
      return new ProviderError('bad_response', `Moove answered ${status} (${said})`, details);
  }
}

function firstErrorCode(payload: unknown): string | null {
  if (!isRecord(payload) || !Array.isArray(payload.errors)) return null;
  const first: unknown = payload.errors[0];
  if (!isRecord(first) || typeof first.code !== 'string') return null;
  return ERROR_CODE_PATTERN.test(first.code) ? first.code : null;
}

/** Transport failures carry only undici's error name and code: its errors can hold request options. */
function transportError(error: unknown, how: { cancelled: boolean; timedOut: boolean; timeoutMs: number }): ProviderError {
  if (error instanceof ProviderError) return error; // a body over the size cap
  const name = error instanceof Error ? error.name : 'Error';
  const rawCode = isRecord(error) && typeof error.code === 'string' ? error.code : null;
  const code = rawCode && /^[A-Z0-9_]{1,64}$/.test(rawCode) ? rawCode : null;
  const cause = Object.assign(new Error(`${name}${code ? ` ${code}` : ''}`), { code });
  if (how.cancelled) return new ProviderError('network', 'the Moove request was cancelled by the caller', { cause });
  if (how.timedOut) return new ProviderError('network', `Moove did not answer within ${how.timeoutMs} ms`, { cause });
  return new ProviderError('network', `could not reach Moove (${code ?? name})`, { cause });
}

function parseCreatedLink(payload: unknown): OpenedCharge {
  if (isRecord(payload) && isLinkId(payload.id) && typeof payload.url === 'string' && /^https?:\/\//.test(payload.url) && URL.canParse(payload.url)) {
    return { providerRef: payload.id, checkoutUrl: payload.url };
  }
  throw new ProviderError('bad_response', 'Moove created a payment link but its answer has no usable id and url', { httpStatus: 200 });
}

const STATUSES: Record<string, ChargeReading['status']> = { active: 'active', completed: 'completed', inactive: 'expired' };

function parseReading(payload: unknown): MooveChargeReading {
  const status = isRecord(payload) && typeof payload.status === 'string' && Object.hasOwn(STATUSES, payload.status) ? STATUSES[payload.status] : undefined;
  if (!isRecord(payload) || status === undefined) {
    throw new ProviderError('bad_response', 'Moove answered a payment link read without a known status', { httpStatus: 200 });
  }
  const receivedAmount = amountField(payload.receivedAmount);
  const toAmount = amountField(payload.toAmount);
  if (receivedAmount === undefined || toAmount === undefined) {
    throw new ProviderError('bad_response', 'Moove answered a payment link read with an amount that is not a decimal', { httpStatus: 200 });
  }
  return { status, receivedAmount, toAmount };
}

/**
 * Amounts are decimal strings. A JSON number is accepted only when its shortest form is plain
 * decimal notation (Moove documents strings; refusing a number would leave a paid charge unread).
 * Missing or null → null; anything else → undefined (a bad answer).
 */
function amountField(value: unknown): string | null | undefined {
  if (value === undefined || value === null) return null;
  if (isDecimalString(value)) return value;
  if (typeof value === 'number' && Number.isFinite(value) && isDecimalString(String(value))) return String(value);
  return undefined;
}

const isLinkId = (value: unknown): value is string => typeof value === 'string' && value.length > 0 && value.length <= LINK_ID_MAX;

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    const cancelled = (): ProviderError => new ProviderError('network', 'the Moove request was cancelled by the caller');
    if (signal?.aborted) {
      reject(cancelled());
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(cancelled());
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
