// Idempotent retries (SPEC §24). A priced call carrying an idempotency key (idempotency-key.ts) is
// looked up in the store before it is authorised: in a slot named by the payer and the key, whose
// scope is the payer, the endpoint, the tool and the canonical arguments (the token left out).
// - the first call runs as any other; when its credit (or x402 payment) is committed, the result it
//   delivered (the JSON-RPC `result`, receipt included) is kept `idempotency.ttl`;
// - a retry with the same key and scope, on any replica, waits while the first runs (bounded by
//   callDeadline, polling the store) and gets the kept result, byte for byte: no upstream call, no charge;
// - the same key with another scope is refused `idempotency_conflict`;
// - a call that is released (failed, deadline, a refusal) removes its marker: its retry runs anew.
// The payer is the principal, else the handle (its keyed hash), else the x402 payer. An x402 payer is
// taken only from a payment that verified (anyone can write an address): such a retry is authorised
// first, and when the kept result answers it, its payment is released unsettled (the payer keeps it).
import { createHash, randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { refusalResult } from '../mcp/challenge.js';
import { isObject, type JsonObject } from '../mcp/jsonrpc.js';
import { fingerprint } from '../observability/fingerprint.js';
import type { Logger } from '../observability/logger.js';
import type { Metrics } from '../observability/metrics.js';
import { canonicalJson } from '../store/ledger-chain.js';
import type { IdempotentBegin, Store } from '../store/store.js';
import { isWellFormedHandle } from './handles.js';
import { stripIdempotencyKey } from './idempotency-key.js';
import type { Authorisation, CallFacts, Conclusion, PricedCall } from './outcome.js';

export interface IdempotencySettings {
  /** How long a committed result is kept for retries (idempotency.ttl). */
  ttlMs: number;
  /** Larger results are not kept (idempotency.maxResultBytes): their retries run anew. */
  maxResultBytes: number;
}

export const DEFAULT_IDEMPOTENCY: IdempotencySettings = { ttlMs: 24 * 3_600_000, maxResultBytes: 1024 ** 2 };

export interface IdempotencyDeps {
  settings: IdempotencySettings;
  callDeadlineMs: number;
  argumentName: string;
  store: Store;
  metrics: Metrics;
  logger: Logger;
  now: () => number;
  /** The endpoint (SPEC §18): part of the scope, and the metrics' `server` label. */
  server: string;
  hashHandle: (handle: string) => string;
  /** Gives back an x402 payment that was verified and claimed but will not be used (a retry answered from the kept result). */
  releaseX402: (priced: PricedCall, held: Extract<Authorisation, { kind: 'x402' }>) => Promise<void>;
}

/** A call that holds its slot's in-flight marker until it is concluded. */
interface Running {
  slot: string;
  owner: string;
}

/** How long a crashed first call's marker outlives its call deadline (the reconciler's margin for reservations). */
const MARKER_MARGIN_MS = 5_000;
const FIRST_POLL_MS = 25;
const MAX_POLL_MS = 200;
/** Consecutive failed looks at a slot before the call is refused payments_unavailable (a store that is down, not slow). */
const MAX_LOOK_FAILURES = 3;
const STILL_RUNNING = 'An earlier call with this idempotency key is still running, so this one did not run and nothing was charged. Retry the same call later to get its result.';

export class IdempotentCalls {
  readonly #deps: IdempotencyDeps;
  readonly #running = new WeakMap<PricedCall, Running>();

  constructor(deps: IdempotencyDeps) {
    this.#deps = deps;
  }

  /**
   * Answers a keyed call from its slot (the kept result, a conflict) or runs `authorise` for it as the
   * slot's first call. Never throws: a store failure refuses `payments_unavailable` (fail closed).
   */
  async authorise(priced: PricedCall, authorise: () => Promise<Authorisation>): Promise<Authorisation> {
    const key = priced.idempotencyKey ?? null;
    if (key === null) return authorise();
    const payer = this.#payerOf(priced);
    if (payer === null) return this.#afterPayment(priced, key, await authorise());
    const facts = this.#factsOf(priced);
    const running = { slot: slotOf(payer, key), owner: newOwner() };
    const waited = await this.#await(priced, running, scopeOf(payer, this.#deps.server, priced, this.#deps.argumentName), facts);
    if (waited) return waited;
    const authorised = await authorise();
    if (authorised.kind === 'answer') {
      this.#abandon(running); // a challenge or refusal is not a result: nothing is kept
      return authorised;
    }
    this.#running.set(priced, running);
    return { ...authorised, forwardParams: stripIdempotencyKey(authorised.forwardParams) };
  }

  /**
   * A keyed call has been concluded: a committed result is kept for its retries before it goes out (so a
   * retry that follows its delivery finds it); anything else frees the slot.
   */
  async concluded(priced: PricedCall, conclusion: Conclusion): Promise<Conclusion> {
    const running = this.#running.get(priced);
    if (!running) return conclusion;
    this.#running.delete(priced);
    const result = conclusion.state === 'committed' ? conclusion.message?.result : undefined;
    if (!isObject(result)) {
      this.#abandon(running);
      return conclusion;
    }
    const text = JSON.stringify(result);
    if (Buffer.byteLength(text, 'utf8') > this.#deps.settings.maxResultBytes) {
      this.#notKept(priced, 'too_large', Buffer.byteLength(text, 'utf8'));
      this.#abandon(running);
      return conclusion;
    }
    try {
      if (!(await this.#deps.store.finishIdempotent(running.slot, running.owner, text, this.#deps.settings.ttlMs))) this.#notKept(priced, 'marker_gone');
    } catch {
      this.#notKept(priced, 'store_failed');
      this.#abandon(running);
    }
    return conclusion;
  }

  /** An x402 call without principal or handle: its verified payer keys the slot, so the payment is checked first. */
  async #afterPayment(priced: PricedCall, key: string, authorised: Authorisation): Promise<Authorisation> {
    if (authorised.kind !== 'x402') return authorised;
    const payer = `x:${authorised.claim.key.payer.toLowerCase()}`;
    const running = { slot: slotOf(payer, key), owner: newOwner() };
    const waited = await this.#await(priced, running, scopeOf(payer, this.#deps.server, priced, this.#deps.argumentName), authorised.facts);
    if (!waited) {
      this.#running.set(priced, running);
      return { ...authorised, forwardParams: stripIdempotencyKey(authorised.forwardParams) };
    }
    // Answered from the slot: this payment is not used, the payer keeps it.
    await this.#deps.releaseX402(priced, authorised).catch(() => undefined);
    return waited;
  }

  /**
   * Null: this call is the slot's first (its marker is written). Otherwise the answer to give. A look
   * that fails is asked again (a few times, within the wait): it moves no money, and a look whose reply
   * was lost after it wrote this attempt's marker answers 'first' again (the same owner).
   */
  async #await(priced: PricedCall, running: Running, scope: string, facts: CallFacts): Promise<Authorisation | null> {
    const { store, now, callDeadlineMs } = this.#deps;
    const giveUpAt = now() + callDeadlineMs;
    let pause = FIRST_POLL_MS;
    let failures = 0;
    for (;;) {
      let begun: IdempotentBegin;
      try {
        begun = await store.beginIdempotent(running.slot, { scope, owner: running.owner, runningTtlMs: callDeadlineMs + MARKER_MARGIN_MS });
        failures = 0;
      } catch (error) {
        this.#deps.metrics.storeErrors.inc({ op: 'beginIdempotent' });
        if (++failures >= MAX_LOOK_FAILURES || now() + pause > giveUpAt) return this.#unavailable(priced, facts, error);
        await sleep(pause);
        continue;
      }
      if (begun.kind === 'first') return null;
      if (begun.kind === 'done') return this.#replay(begun.result, priced, facts);
      if (begun.kind === 'conflict') return { kind: 'answer', result: refusalResult('idempotency_conflict', await priced.resultShape()), outcome: 'refused_conflict', facts };
      if (now() + pause > giveUpAt) return { kind: 'answer', result: refusalResult('deadline_exceeded', await priced.resultShape(), { text: STILL_RUNNING }), outcome: 'deadline_exceeded', facts };
      await sleep(pause);
      pause = Math.min(MAX_POLL_MS, pause * 2);
    }
  }

  async #replay(kept: string, priced: PricedCall, facts: CallFacts): Promise<Authorisation> {
    let result: JsonObject;
    try {
      result = JSON.parse(kept) as JsonObject;
    } catch (error) {
      return this.#unavailable(priced, facts, error); // never written by us: fail closed rather than run the call twice
    }
    this.#deps.metrics.idempotentReplays.inc({ server: this.#deps.server });
    return { kind: 'answer', result, outcome: 'replayed', facts };
  }

  async #unavailable(priced: PricedCall, facts: CallFacts, error: unknown): Promise<Authorisation> {
    this.#deps.logger.warn({ evt: 'paywall_unavailable', reqId: priced.reqId, op: 'beginIdempotent', code: (error as { code?: string } | null)?.code ?? 'unknown' }, 'a priced call was refused or withheld because the store or the payment provider failed');
    return { kind: 'answer', result: refusalResult('payments_unavailable', await priced.resultShape()), outcome: 'refused_unavailable', facts };
  }

  /** Principal, else the handle's keyed hash; null when neither (an x402 payer, or nobody yet: a challenge). */
  #payerOf(priced: PricedCall): string | null {
    if (priced.principal !== null) return `p:${priced.principal}`;
    const token = priced.call.args[this.#deps.argumentName];
    return typeof token === 'string' && isWellFormedHandle(token) ? `h:${this.#deps.hashHandle(token)}` : null;
  }

  #factsOf(priced: PricedCall): CallFacts {
    const token = priced.call.args[this.#deps.argumentName];
    return { rail: 'credits', tokenPresented: token !== undefined, tokenFingerprint: typeof token === 'string' ? fingerprint(token) : null, tokenRecognised: false };
  }

  #abandon(running: Running): void {
    this.#deps.store.abandonIdempotent(running.slot, running.owner).catch(() => undefined); // else the marker ends by its TTL
  }

  #notKept(priced: PricedCall, reason: 'too_large' | 'store_failed' | 'marker_gone', bytes?: number): void {
    this.#deps.metrics.idempotentNotKept.inc({ server: this.#deps.server, reason });
    this.#deps.logger.warn(
      { evt: 'idempotent_result_not_kept', reqId: priced.reqId, tool: priced.call.name, reason, bytes, maxResultBytes: this.#deps.settings.maxResultBytes },
      'a committed result of a call with an idempotency key was not kept: a retry with that key runs (and is charged) again',
    );
  }
}

const sha256 = (text: string): string => createHash('sha256').update(text, 'utf8').digest('hex');
const newOwner = (): string => randomBytes(12).toString('base64url');

/** The slot of one payer's key: the key alone would let two payers' calls meet. */
function slotOf(payer: string, key: string): string {
  return sha256(JSON.stringify([payer, key]));
}

/** Payer, endpoint, tool and the arguments in canonical JSON, without the token (a retry may carry another handle form of the same payer). */
function scopeOf(payer: string, server: string, priced: PricedCall, argumentName: string): string {
  const { [argumentName]: _token, ...args } = priced.call.args;
  return sha256(canonicalJson([payer, server, priced.call.name, args]));
}
