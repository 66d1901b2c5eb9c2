// The x402 facilitator client (SPEC §19): POST /verify, POST /settle, GET /supported, with the same
// discipline as the Moove client (moove.ts). What this file guarantees, and why:
// - Deadlines. Every call is bounded: verify and supported by `verifyDeadlineMs` overall (retries
//   included), settle by `settleDeadlineMs` (an on-chain transfer takes seconds).
// - Retries only where safe. /verify has no effect, so it is retried on transport errors, 429 and
//   5xx (full-jitter backoff). /settle moves money: it is retried ONLY when the connection was never
//   made (refused, no such host, connect timeout), i.e. the facilitator certainly never saw the
//   request. Any other failure is final, and FacilitatorError.mayHaveReached says whether the
//   settlement's outcome is unknown (the facilitator may have settled after we stopped waiting).
// - Secrets. The request body holds the payer's signed authorization: it goes to the facilitator and
//   nowhere else. Errors are built here from the operation, the status and a kind; the facilitator's
//   body text, the payload and the signature never reach an error message, a cause or a log line.
//   Transport errors are reduced to their name and code (undici errors may carry request options).
// - Bounded answers: a body over 64 KiB is a bad response, not a memory problem.
//
// Why not @x402/core's HTTPFacilitatorClient: it takes no AbortSignal, does not tell a connect
// failure from a lost answer (so settle could not be retried safely, nor verify selectively), reads
// answers of any size, puts up to 200 characters of the facilitator's body into its error messages,
// and writes extension headers to stdout with console.log (our logs are JSON lines). Its request and
// answer types are the ones used here.
import type { PaymentPayload, PaymentRequirements, SettleResponse, SupportedResponse, VerifyResponse } from '@x402/core/types';
import { Agent, request, type Dispatcher } from 'undici';
import { z } from 'zod';
import { GatewayError } from '../../errors.js';
import { readCapped } from '../../io/body.js';
import { isRecord, parseJsonOrUndefined } from '../../io/json.js';
import type { Logger } from '../../observability/logger.js';
import type { Metrics } from '../../observability/metrics.js';

export type FacilitatorOp = 'verify' | 'settle' | 'supported';
export type FacilitatorErrorKind = 'network' | 'timeout' | 'cancelled' | 'rate_limited' | 'server' | 'refused' | 'bad_response';

export class FacilitatorError extends GatewayError {
  readonly op: FacilitatorOp;
  readonly kind: FacilitatorErrorKind;
  readonly httpStatus: number | null;
  /** False only when the request certainly never reached the facilitator (no connection was made). */
  readonly mayHaveReached: boolean;

  constructor(op: FacilitatorOp, kind: FacilitatorErrorKind, message: string, details: { httpStatus?: number | null; mayHaveReached: boolean; cause?: unknown }) {
    super('TB_ERR_FACILITATOR', message, details.cause === undefined ? undefined : { cause: details.cause });
    this.name = 'FacilitatorError';
    this.op = op;
    this.kind = kind;
    this.httpStatus = details.httpStatus ?? null;
    this.mayHaveReached = details.mayHaveReached;
  }
}

export interface FacilitatorClientOptions {
  /** Base URL: {url}/verify, {url}/settle, {url}/supported. */
  url: string;
  logger: Logger;
  metrics?: Metrics;
  /** Epoch ms; drives deadlines. Waiting itself uses real timers. */
  clock?: () => number;
  /** [0, 1); only used for backoff jitter. */
  random?: () => number;
  /** verify and supported, all attempts included. */
  verifyDeadlineMs?: number;
  /** One attempt of verify or supported. */
  requestTimeoutMs?: number;
  /** settle, all (connect-failure) attempts included. */
  settleDeadlineMs?: number;
  maxAttempts?: number;
  baseDelayMs?: number;
  maxDelayMs?: number;
}

const MAX_RESPONSE_BYTES = 64 * 1024;
/** Errors that happen before a single byte of the request left: the facilitator never saw it. */
const NOT_CONNECTED = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'EADDRNOTAVAIL', 'UND_ERR_CONNECT_TIMEOUT']);
const RETRYABLE_VERIFY: ReadonlySet<FacilitatorErrorKind> = new Set(['network', 'timeout', 'rate_limited', 'server']);
const REASON = /^[A-Za-z0-9_.:-]{1,96}$/;
const SHORT_TEXT = z.string().max(512);

const verifyAnswer = z.looseObject({ isValid: z.boolean(), invalidReason: SHORT_TEXT.nullish(), payer: SHORT_TEXT.nullish() });
const settleAnswer = z.looseObject({
  success: z.boolean(),
  errorReason: SHORT_TEXT.nullish(),
  payer: SHORT_TEXT.nullish(),
  transaction: SHORT_TEXT.nullish(),
  network: SHORT_TEXT.nullish(),
  amount: SHORT_TEXT.nullish(),
});
const supportedAnswer = z.looseObject({
  kinds: z.array(z.looseObject({ x402Version: z.number(), scheme: z.string(), network: z.string() })),
  extensions: z.array(z.string()).default([]),
  signers: z.record(z.string(), z.array(z.string())).default({}),
});

interface Exchange {
  op: FacilitatorOp;
  method: 'GET' | 'POST';
  path: string;
  body?: string;
}

interface Answer {
  status: number;
  payload: unknown; // parsed JSON, or undefined when the body is not JSON
}

export class FacilitatorClient {
  readonly #url: string;
  readonly #logger: Logger;
  readonly #metrics: Metrics | undefined;
  readonly #clock: () => number;
  readonly #random: () => number;
  readonly #verifyDeadlineMs: number;
  readonly #requestTimeoutMs: number;
  readonly #settleDeadlineMs: number;
  readonly #maxAttempts: number;
  readonly #baseDelayMs: number;
  readonly #maxDelayMs: number;
  readonly #agent: Agent;

  constructor(options: FacilitatorClientOptions) {
    this.#url = options.url.replace(/\/+$/, '');
    this.#logger = options.logger;
    this.#metrics = options.metrics;
    this.#clock = options.clock ?? Date.now;
    this.#random = options.random ?? Math.random;
    this.#verifyDeadlineMs = options.verifyDeadlineMs ?? 10_000;
    this.#requestTimeoutMs = options.requestTimeoutMs ?? 5_000;
    this.#settleDeadlineMs = options.settleDeadlineMs ?? 30_000;
    this.#maxAttempts = options.maxAttempts ?? 3;
    this.#baseDelayMs = options.baseDelayMs ?? 100;
    this.#maxDelayMs = options.maxDelayMs ?? 1_000;
    this.#agent = new Agent({ connect: { timeout: Math.min(this.#requestTimeoutMs, 5_000) }, keepAliveTimeout: 10_000 });
  }

  /** Asks whether `payload` pays `requirements`. A refusal is an answer (isValid: false), not an error. */
  async verify(payload: PaymentPayload, requirements: PaymentRequirements, signal?: AbortSignal): Promise<VerifyResponse> {
    const body = JSON.stringify({ x402Version: payload.x402Version, paymentPayload: payload, paymentRequirements: requirements });
    const answer = await this.#withRetries({ op: 'verify', method: 'POST', path: '/verify', body }, signal);
    const parsed = verifyAnswer.safeParse(answer.payload);
    // Facilitators answer an invalid payment with 200 or 4xx and {isValid: false}; anything else is not an answer.
    if (!parsed.success || (parsed.data.isValid && !ok(answer.status))) {
      if (ok(answer.status)) throw badAnswer('verify', answer.status);
      throw new FacilitatorError('verify', 'refused', `the x402 facilitator refused the verify request with HTTP ${answer.status}`, { httpStatus: answer.status, mayHaveReached: true });
    }
    const { isValid, invalidReason, payer } = parsed.data;
    return { isValid, ...(isValid ? {} : { invalidReason: cleanReason(invalidReason) }), ...(payer ? { payer } : {}) };
  }

  /**
   * Asks the facilitator to execute the payment. Never cancelled by the caller (a paid call is
   * concluded whatever the client does); a failure with mayHaveReached: true has an unknown outcome.
   */
  async settle(payload: PaymentPayload, requirements: PaymentRequirements): Promise<SettleResponse> {
    const body = JSON.stringify({ x402Version: payload.x402Version, paymentPayload: payload, paymentRequirements: requirements });
    const exchange: Exchange = { op: 'settle', method: 'POST', path: '/settle', body };
    const deadlineAt = this.#clock() + this.#settleDeadlineMs;
    let answer: Answer | undefined;
    for (let attempt = 1; answer === undefined; attempt += 1) {
      try {
        answer = await this.#exchangeOnce(exchange, deadlineAt - this.#clock(), undefined);
      } catch (error) {
        const failure = error as FacilitatorError;
        // Only a connection that was never made is safe to try again: nothing reached the facilitator.
        const delay = this.#backoff(attempt);
        if (failure.mayHaveReached || attempt >= this.#maxAttempts || this.#clock() + delay >= deadlineAt) throw failure;
        this.#logger.debug({ evt: 'facilitator_retry', op: 'settle', attempt, kind: failure.kind, delayMs: Math.round(delay) }, 'retrying an x402 settle that never reached the facilitator');
        await sleep(delay);
      }
    }
    const parsed = settleAnswer.safeParse(answer.payload);
    if (!parsed.success) throw badAnswer('settle', answer.status, true);
    const data = parsed.data;
    if (data.success && (!ok(answer.status) || !data.transaction)) throw badAnswer('settle', answer.status, true);
    const response: SettleResponse = {
      success: data.success,
      transaction: data.transaction ?? '',
      network: (data.network ?? requirements.network) as SettleResponse['network'],
      ...(data.payer ? { payer: data.payer } : {}),
      ...(data.amount ? { amount: data.amount } : {}),
      ...(data.success ? {} : { errorReason: cleanReason(data.errorReason) }),
    };
    return response;
  }

  /** The facilitator's supported kinds (for start-up checks and diagnostics). */
  async supported(signal?: AbortSignal): Promise<SupportedResponse> {
    const answer = await this.#withRetries({ op: 'supported', method: 'GET', path: '/supported' }, signal);
    const parsed = supportedAnswer.safeParse(answer.payload);
    if (!ok(answer.status) || !parsed.success) throw badAnswer('supported', answer.status);
    return parsed.data as unknown as SupportedResponse;
  }

  async close(): Promise<void> {
    await this.#agent.close();
  }

  /** verify / supported: retried on transport errors, 429 and 5xx, within the verify deadline. */
  async #withRetries(exchange: Exchange, signal: AbortSignal | undefined): Promise<Answer> {
    const deadlineAt = this.#clock() + this.#verifyDeadlineMs;
    for (let attempt = 1; ; attempt += 1) {
      let failure: FacilitatorError;
      try {
        const answer = await this.#exchangeOnce(exchange, Math.min(this.#requestTimeoutMs, deadlineAt - this.#clock()), signal);
        if (answer.status !== 429 && answer.status < 500) return answer;
        failure = new FacilitatorError(exchange.op, answer.status === 429 ? 'rate_limited' : 'server', `the x402 facilitator answered ${exchange.op} with HTTP ${answer.status}`, { httpStatus: answer.status, mayHaveReached: true });
      } catch (error) {
        failure = error as FacilitatorError;
      }
      const delay = this.#backoff(attempt);
      if (!RETRYABLE_VERIFY.has(failure.kind) || attempt >= this.#maxAttempts || signal?.aborted || this.#clock() + delay >= deadlineAt) throw failure;
      this.#logger.debug({ evt: 'facilitator_retry', op: exchange.op, attempt, kind: failure.kind, delayMs: Math.round(delay) }, 'retrying an x402 facilitator request');
      await sleep(delay, exchange.op, signal);
    }
  }

  /** One HTTP request; its answer, or a FacilitatorError saying whether it may have reached the facilitator. */
  async #exchangeOnce(exchange: Exchange, timeoutMs: number, signal: AbortSignal | undefined): Promise<Answer> {
    if (timeoutMs <= 0) throw new FacilitatorError(exchange.op, 'timeout', `the x402 facilitator ${exchange.op} ran out of time`, { mayHaveReached: false });
    const timeout = AbortSignal.timeout(timeoutMs);
    let response: Dispatcher.ResponseData | undefined;
    let text: string;
    try {
      if (signal?.aborted) throw new DOMException('aborted', 'AbortError');
      response = await request(`${this.#url}${exchange.path}`, {
        method: exchange.method,
        headers: exchange.body === undefined ? { accept: 'application/json' } : { accept: 'application/json', 'content-type': 'application/json' },
        body: exchange.body ?? null,
        signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
        dispatcher: this.#agent,
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
      });
      text = await readCapped(response.body, MAX_RESPONSE_BYTES, (limit) => new FacilitatorError(exchange.op, 'bad_response', `the x402 facilitator answered ${exchange.op} with more than ${limit} bytes`, { mayHaveReached: true }));
    } catch (error) {
      this.#count(exchange.op, response ? String(response.statusCode) : 'network');
      throw transportError(exchange.op, error, { cancelled: signal?.aborted === true, timedOut: timeout.aborted, timeoutMs, answered: response !== undefined });
    }
    this.#count(exchange.op, String(response.statusCode));
    return { status: response.statusCode, payload: parseJsonOrUndefined(text) };
  }

  #backoff(attempt: number): number {
    return this.#random() * Math.min(this.#maxDelayMs, this.#baseDelayMs * 2 ** (attempt - 1));
  }

  #count(op: FacilitatorOp, status: string): void {
    this.#metrics?.providerRequests.inc({ op: `x402_${op}`, status });
  }
}

/** A facilitator reason code as the agent will see it: kept when it looks like a code, else a generic one. */
function cleanReason(reason: string | null | undefined): string {
  return typeof reason === 'string' && REASON.test(reason) ? reason : 'unexpected_facilitator_reason';
}

const ok = (status: number): boolean => status >= 200 && status < 300;

function badAnswer(op: FacilitatorOp, status: number, mayHaveReached = true): FacilitatorError {
  return new FacilitatorError(op, 'bad_response', `the x402 facilitator answered ${op} with HTTP ${status} and a body that is not an x402 ${op} answer`, { httpStatus: status, mayHaveReached });
}

/** Transport failures keep only the error's name and code: undici errors can carry request options (the body). */
function transportError(op: FacilitatorOp, error: unknown, how: { cancelled: boolean; timedOut: boolean; timeoutMs: number; answered: boolean }): FacilitatorError {
  if (error instanceof FacilitatorError) return error; // a body over the cap
  const name = error instanceof Error ? error.name : 'Error';
  const rawCode = isRecord(error) && typeof error.code === 'string' ? error.code : null;
  const code = rawCode && /^[A-Z0-9_]{1,64}$/.test(rawCode) ? rawCode : null;
  const cause = Object.assign(new Error(`${name}${code ? ` ${code}` : ''}`), { code });
  const mayHaveReached = how.answered || code === null || !NOT_CONNECTED.has(code);
  if (how.cancelled) return new FacilitatorError(op, 'cancelled', `the x402 facilitator ${op} was cancelled by the caller`, { mayHaveReached, cause });
  if (how.timedOut) return new FacilitatorError(op, 'timeout', `the x402 facilitator did not answer ${op} within ${how.timeoutMs} ms`, { mayHaveReached, cause });
  return new FacilitatorError(op, 'network', `could not reach the x402 facilitator for ${op} (${code ?? name})`, { mayHaveReached, cause });
}

function sleep(ms: number, op: FacilitatorOp = 'settle', signal?: AbortSignal): Promise<void> {
  // Only between attempts: the last attempt's outcome is already known, so mayHaveReached reflects the previous one.
  const cancelled = (): FacilitatorError => new FacilitatorError(op, 'cancelled', `the x402 facilitator ${op} was cancelled by the caller`, { mayHaveReached: true });
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(cancelled());
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener(
      'abort',
      () => {
        clearTimeout(timer);
        reject(cancelled());
      },
      { once: true },
    );
  });
}
