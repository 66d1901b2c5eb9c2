// The x402 rail (SPEC §19): what the request path calls for a priced call whose SKU is priced in
// the rail's currency. Three moments, each one call:
//   1. challengeAdditions — every challenge (and x402 refusal) also carries `PaymentRequired`;
//   2. authorise          — a retry carrying `_meta["x402/payment"]`: local checks, facilitator
//                           verify, then the atomic nonce claim; only then may the call be forwarded
//                           (with the payment stripped from its params);
//   3. conclude           — once the upstream answered: settle only when the tool's charge policy
//                           would commit; deliver with `x402/payment-response`, or withhold the result
//                           when settlement fails, or say that nothing was taken.
// The payload (a signed authorization, a bearer instrument until settled) lives only inside an
// X402Claim, out of reach of logs, errors and JSON; it goes to the facilitator and nowhere else.
import type { PaymentPayload, PaymentRequirements, SettleResponse } from '@x402/core/types';
import type { GatewayConfig } from '../../config/schema.js';
import { GatewayError } from '../../errors.js';
import type { JsonObject } from '../../mcp/jsonrpc.js';
import type { PriceTag } from '../../mcp/tools-list.js';
import type { Logger } from '../../observability/logger.js';
import type { Metrics, X402PaymentResult } from '../../observability/metrics.js';
import { refusalResult } from '../../mcp/challenge.js';
import type { Outbox } from '../../store/outbox.js';
import type { PaymentNonceKey, Store } from '../../store/store.js';
import { PAYMENT_RESPONSE_META_KEY, withPaymentRequired } from './challenge.js';
import { FacilitatorClient, FacilitatorError } from './facilitator.js';
import { checkPayload, nonceKey, paymentIn, stripPayment } from './payload.js';
import { paymentRequiredFor, requirementsFor, type X402Call, type X402Terms } from './requirements.js';

/** `_meta` key of the note on a call whose payment was not settled (the gateway's namespace, §20). */
export const X402_NOTE_META_KEY = 'xyz.tollbooth/x402';

/** What the rail needs from a facilitator (FacilitatorClient, or anything with the same contract). */
export type Facilitator = Pick<FacilitatorClient, 'verify' | 'settle'>;

export interface X402RailOptions {
  /** payments.x402; its currency decides which SKUs get the rail. */
  terms: X402Terms;
  facilitator: Facilitator;
  store: Pick<Store, 'claimPaymentNonce' | 'finishPaymentNonce'>;
  /** SPEC §21: where a settlement's record goes (the store, or the local file while it is down); without one, straight to the store. */
  outbox?: Pick<Outbox, 'submit'> | null;
  logger: Logger;
  metrics?: Metrics;
  /** Epoch ms. */
  clock?: () => number;
  /** Clock difference tolerated between payer, gateway and chain, in seconds (validity window bound, claim margin). */
  clockSkewSeconds?: number;
}

/** Why a verified payment is not settled (the tool's charge policy would release). */
export type NotSettledReason = 'tool_error' | 'upstream_error' | 'deadline_exceeded' | 'unmatched_response' | 'store_failure';

export type X402Authorisation =
  | { kind: 'refuse'; reason: 'payment_invalid' | 'payments_unavailable'; result: JsonObject }
  | { kind: 'verified'; claim: X402Claim; forwardParams: JsonObject };

export type X402Conclusion =
  /** Settled: merge `meta` into the result's `_meta` and deliver it (no Tollbooth receipt). */
  | { kind: 'deliver'; meta: { [PAYMENT_RESPONSE_META_KEY]: SettleResponse } }
  /** Settlement failed: the upstream's result must not reach the client; send `result` instead. */
  | { kind: 'withhold'; result: JsonObject }
  /** Not settled (the payer keeps the money): merge `meta` into whatever the client gets. */
  | { kind: 'release-no-settle'; meta: { [X402_NOTE_META_KEY]: { settled: false; reason: NotSettledReason } } };

// The payload of each claim, reachable only from this module; a claim hands it out once, to conclude.
const payloads = new WeakMap<X402Claim, PaymentPayload>();

function takePayload(claim: X402Claim): PaymentPayload {
  const payload = payloads.get(claim);
  if (!payload) throw new GatewayError('TB_ERR_INTERNAL', 'an x402 claim was concluded twice');
  payloads.delete(claim);
  return payload;
}

/** A verified payment whose nonce this call owns. Holds no secret in any enumerable or printable field. */
export class X402Claim {
  readonly key: PaymentNonceKey;
  readonly requirements: PaymentRequirements;
  readonly call: X402Call;
  /** Lower-case payer address. */
  readonly payer: string;

  constructor(call: X402Call, requirements: PaymentRequirements, key: PaymentNonceKey, payload: PaymentPayload) {
    this.call = call;
    this.requirements = requirements;
    this.key = key;
    this.payer = key.payer;
    payloads.set(this, payload);
  }

  /** For the call log line (SPEC §10: which rail paid): no payload, no signature, the payer shortened. */
  logFields(): { rail: 'x402'; payer: string; network: string; amount: string } {
    return { rail: 'x402', payer: shortAddress(this.payer), network: this.key.network, amount: this.requirements.amount };
  }
}

export class X402Rail {
  readonly terms: X402Terms;
  readonly #facilitator: Facilitator;
  readonly #store: X402RailOptions['store'];
  readonly #outbox: Pick<Outbox, 'submit'> | null;
  readonly #logger: Logger;
  readonly #metrics: Metrics | undefined;
  readonly #clock: () => number;
  readonly #skewSeconds: number;
  #ownedFacilitator: FacilitatorClient | null = null;

  constructor(options: X402RailOptions) {
    this.terms = options.terms;
    this.#facilitator = options.facilitator;
    this.#store = options.store;
    this.#outbox = options.outbox ?? null;
    this.#logger = options.logger;
    this.#metrics = options.metrics;
    this.#clock = options.clock ?? Date.now;
    this.#skewSeconds = options.clockSkewSeconds ?? 60;
  }

  /** The rail for this config, or null when `payments.x402` is off. Without `deps.facilitator` it opens (and `close` closes) its own client. */
  static fromConfig(config: GatewayConfig, deps: Omit<X402RailOptions, 'terms' | 'facilitator'> & { facilitator?: Facilitator }): X402Rail | null {
    const x402 = config.payments.x402;
    if (x402.facilitatorUrl === '' || !x402.extra) return null; // validation guarantees extra when on
    const owned = deps.facilitator ? null : new FacilitatorClient({ url: x402.facilitatorUrl, logger: deps.logger, ...(deps.metrics ? { metrics: deps.metrics } : {}), ...(deps.clock ? { clock: deps.clock } : {}) });
    const terms: X402Terms = { network: x402.network, asset: x402.asset, assetDecimals: x402.assetDecimals, currency: x402.currency, payTo: x402.payTo, maxTimeoutSeconds: x402.maxTimeoutSeconds, extra: x402.extra };
    const rail = new X402Rail({ ...deps, terms, facilitator: deps.facilitator ?? (owned as FacilitatorClient) });
    rail.#ownedFacilitator = owned;
    return rail;
  }

  async close(): Promise<void> {
    await this.#ownedFacilitator?.close();
  }

  /** True when calls at this price are offered the x402 rail: the SKU is priced in the rail's currency. */
  offers(price: PriceTag): boolean {
    return price.currency === this.terms.currency;
  }

  /** The requirements this call's payment must meet (what the challenge offers). */
  requirementsFor(call: X402Call): PaymentRequirements {
    return requirementsFor(call, this.terms);
  }

  /**
   * A gateway result (a challenge, or any other result for this call) with `PaymentRequired` added
   * (SPEC §19); unchanged when this SKU is not offered x402. Pure.
   */
  challengeAdditions(call: X402Call, result: JsonObject, error = `Payment required to call ${call.tool}`): JsonObject {
    if (!this.offers(call.price)) return result;
    return withPaymentRequired(result, paymentRequiredFor(call, this.terms, error));
  }

  /**
   * A retry carrying `params._meta["x402/payment"]`: checks, verify, nonce claim. Only a 'verified'
   * answer may be forwarded, with `forwardParams` (the payment removed) as the call's params.
   */
  async authorise(call: X402Call, params: JsonObject, signal?: AbortSignal): Promise<X402Authorisation> {
    const requirements = this.requirementsFor(call);
    const nowSeconds = Math.floor(this.#clock() / 1000);
    const checked = this.offers(call.price) ? checkPayload(paymentIn(params), requirements, nowSeconds, this.#skewSeconds) : ({ ok: false, reason: 'unsupported_asset' } as const);
    if (!checked.ok) return this.#invalid(call, checked.reason, 'invalid');

    try {
      const verdict = await this.#facilitator.verify(checked.payload, requirements, signal);
      if (!verdict.isValid) return this.#invalid(call, verdict.invalidReason ?? 'invalid_payment', 'invalid');
    } catch (error) {
      return this.#unavailable(call, 'verify', error);
    }

    const key = nonceKey(requirements, checked.authorization);
    let claimed: boolean;
    try {
      claimed = await this.#store.claimPaymentNonce({
        ...key,
        expiresAt: (checked.authorization.validBefore + this.#skewSeconds) * 1000,
        claimedAt: this.#clock(),
        sku: call.price.sku,
        tool: call.tool,
        amount: requirements.amount,
      });
    } catch (error) {
      return this.#unavailable(call, 'claim', error);
    }
    if (!claimed) return this.#invalid(call, 'invalid_exact_evm_nonce_already_used', 'replayed');

    this.#count(call, 'verified');
    return { kind: 'verified', claim: new X402Claim(call, requirements, key, checked.payload), forwardParams: stripPayment(params) };
  }

  /**
   * After the upstream answered. `wouldCommit` is the tool's charge policy applied to that answer
   * (§6.5: `success` → a result without isError; `attempt` → the upstream accepted the call).
   */
  async conclude(claim: X402Claim, outcome: { wouldCommit: true } | { wouldCommit: false; reason: NotSettledReason }): Promise<X402Conclusion> {
    const payload = takePayload(claim);
    const { call } = claim;
    if (!outcome.wouldCommit) {
      await this.#finish(claim, 'not_settled', null);
      this.#count(call, 'not_settled');
      this.#logger.info({ evt: 'x402_payment', result: 'not_settled', sku: call.price.sku, tool: call.tool, reason: outcome.reason, payer: shortAddress(claim.payer) }, 'an x402 payment was not settled: the call would not be charged');
      return { kind: 'release-no-settle', meta: { [X402_NOTE_META_KEY]: { settled: false, reason: outcome.reason } } };
    }

    let settlement: SettleResponse;
    try {
      settlement = await this.#facilitator.settle(payload, claim.requirements);
    } catch (error) {
      const unknown = !(error instanceof FacilitatorError) || error.mayHaveReached;
      await this.#finish(claim, 'settle_failed', null);
      this.#count(call, 'settle_failed');
      const details = facilitatorFailure(error);
      if (unknown) {
        // The facilitator may have executed the transfer after we stopped waiting: an operator must look.
        this.#logger.warn({ evt: 'x402_settle_unknown', sku: call.price.sku, tool: call.tool, network: claim.key.network, payer: claim.payer, nonce: claim.key.nonce, amount: claim.requirements.amount, ...details }, 'x402 settlement outcome unknown: the result was withheld; check on chain whether this authorization was used');
      } else {
        this.#logger.warn({ evt: 'x402_payment', result: 'settle_failed', sku: call.price.sku, tool: call.tool, ...details }, 'x402 settlement failed before reaching the facilitator: the result was withheld');
      }
      return { kind: 'withhold', result: this.#paymentFailed(call, unknown ? 'settlement_outcome_unknown' : 'facilitator_unreachable', null, unknown) };
    }

    if (!settlement.success) {
      await this.#finish(claim, 'settle_failed', settlement.transaction || null);
      this.#count(call, 'settle_failed');
      this.#logger.warn({ evt: 'x402_payment', result: 'settle_failed', sku: call.price.sku, tool: call.tool, errorReason: settlement.errorReason, payer: shortAddress(claim.payer) }, 'the x402 facilitator refused to settle: the result was withheld');
      return { kind: 'withhold', result: this.#paymentFailed(call, settlement.errorReason ?? 'settle_failed', settlement, false) };
    }

    await this.#recordSettled(claim, settlement.transaction);
    this.#count(call, 'settled');
    this.#logger.info(
      { evt: 'x402_payment', result: 'settled', sku: call.price.sku, tool: call.tool, network: settlement.network, amount: claim.requirements.amount, transaction: settlement.transaction, payer: shortAddress(claim.payer) },
      'x402 payment settled',
    );
    return { kind: 'deliver', meta: { [PAYMENT_RESPONSE_META_KEY]: settlement } };
  }

  /** The text of the gateway's own refusals on the x402 rail: no credit is involved, no payment was taken. */
  refusalText(reason: 'deadline_exceeded' | 'upstream_unavailable' | 'payments_unavailable'): string {
    switch (reason) {
      case 'deadline_exceeded':
        return 'The tool did not finish in time and was stopped; the x402 payment was not taken. You may retry with a new payment.';
      case 'upstream_unavailable':
        return 'The tool server is unavailable or answered with an error; the x402 payment was not taken. Retry later with a new payment.';
      case 'payments_unavailable':
        return 'Payments are temporarily unavailable, so this paid tool cannot run right now; the x402 payment was not taken. Retry in a minute.';
    }
  }

  #invalid(call: X402Call, reason: string, result: 'invalid' | 'replayed'): X402Authorisation {
    this.#count(call, result);
    this.#logger.info({ evt: 'x402_payment', result, sku: call.price.sku, tool: call.tool, reason }, 'an x402 payment was refused');
    const text = `The x402 payment was not accepted (${reason}), so the tool did not run and nothing was charged. ${result === 'replayed' ? 'This payment was already used: sign a new one' : 'Sign a new payment for the requirements in this result'} and retry.`;
    const refusal = refusalResult('payment_invalid', call.shape, { text, details: { invalidReason: reason } });
    return { kind: 'refuse', reason: 'payment_invalid', result: this.challengeAdditions(call, refusal, `Payment invalid: ${reason}`) };
  }

  #unavailable(call: X402Call, step: 'verify' | 'claim', error: unknown): X402Authorisation {
    this.#count(call, 'unavailable');
    this.#logger.warn({ evt: 'x402_payment', result: 'unavailable', step, sku: call.price.sku, tool: call.tool, ...facilitatorFailure(error) }, 'an x402 payment could not be checked: the call was refused payments_unavailable');
    return { kind: 'refuse', reason: 'payments_unavailable', result: refusalResult('payments_unavailable', call.shape, { text: this.refusalText('payments_unavailable') }) };
  }

  #paymentFailed(call: X402Call, reason: string, settlement: SettleResponse | null, unknown: boolean): JsonObject {
    const text = unknown
      ? 'The x402 payment could not be confirmed, so the result is withheld. If your wallet shows this payment as sent, contact the operator; otherwise retry with a new payment.'
      : `The x402 payment could not be settled (${reason}), so the result is withheld and the payment was not taken. Retry with a new payment.`;
    const refusal = refusalResult('payment_failed', call.shape, { text, details: { errorReason: reason } });
    if (settlement) refusal._meta = { ...(refusal._meta as JsonObject), [PAYMENT_RESPONSE_META_KEY]: settlement };
    return this.challengeAdditions(call, refusal, `Settlement failed: ${reason}`);
  }

  /**
   * The money moved: its record must reach the store (SPEC §21). Through the outbox it is stored now or
   * queued in the local file and retried until stored; the result is delivered either way (the payer paid).
   */
  async #recordSettled(claim: X402Claim, transaction: string): Promise<void> {
    if (!this.#outbox) return this.#finish(claim, 'settled', transaction);
    const record = { ...claim.key, sku: claim.call.price.sku, tool: claim.call.tool, amount: claim.requirements.amount, transaction, at: this.#clock() };
    try {
      await this.#outbox.submit({ kind: 'x402_settle', record });
    } catch (error) {
      this.#logger.error(
        { evt: 'x402_record_lost', sku: record.sku, tool: record.tool, network: record.network, payer: record.payer, nonce: record.nonce, amount: record.amount, transaction, code: error instanceof GatewayError ? error.code : (error as { code?: string }).code },
        'a settled x402 payment could be written neither to the store nor to the outbox file: add its x402_settle record by hand from this line',
      );
    }
  }

  async #finish(claim: X402Claim, state: 'settled' | 'settle_failed' | 'not_settled', transaction: string | null): Promise<void> {
    try {
      await this.#store.finishPaymentNonce(claim.key, { state, transaction, at: this.#clock() });
    } catch (error) {
      // The claim still refuses the nonce until it expires; only the record of how it ended is missing.
      this.#logger.warn({ evt: 'x402_payment', step: 'finish', state, code: error instanceof GatewayError ? error.code : 'unknown' }, 'could not record how an x402 claim ended');
    }
  }

  #count(call: X402Call, result: X402PaymentResult): void {
    this.#metrics?.x402Payments.inc({ sku: call.price.sku, result });
  }
}

/** What may be logged about a facilitator or store failure: kind, status, code. Never a message from outside. */
function facilitatorFailure(error: unknown): Record<string, string | number | null> {
  if (error instanceof FacilitatorError) return { op: error.op, kind: error.kind, httpStatus: error.httpStatus };
  if (error instanceof GatewayError) return { code: error.code };
  return { kind: error instanceof Error ? error.name : 'unknown' };
}

/** 0x857b06519e91e3a54538791bdbb0e22373e36b66 → 0x857b..6b66 */
export const shortAddress = (address: string): string => `${address.slice(0, 6)}..${address.slice(-4)}`;
