// The decision for a priced tools/call (SPEC §6.2), in the order the SPEC gives it. `authorise` runs
// steps 2–6 and either answers (challenge / refusal) or holds a reservation; `conclude` runs step 7
// once the upstream has answered. server.ts's priced-call handler reads them top to bottom.
import { setTimeout as sleep } from 'node:timers/promises';
import { GatewayError } from '../errors.js';
import type { ToolCall } from '../mcp/classify.js';
import type { JsonObject, JsonRpcResponse } from '../mcp/jsonrpc.js';
import { isObject } from '../mcp/jsonrpc.js';
import type { PriceTag } from '../mcp/tools-list.js';
import { fingerprint } from '../observability/fingerprint.js';
import type { Logger } from '../observability/logger.js';
import type { Metrics, PaidOutcome } from '../observability/metrics.js';
import type { PaymentProvider } from '../payments/provider.js';
import type { Observation, Settler } from '../payments/settle.js';
import type { ChargeRecord, SpendDecision, Store } from '../store/store.js';
import type { ExchangeOutcome } from '../proxy/exchange.js';
import { challengeResult, refusalResult, RECEIPT_META_KEY, type ChallengeReason, type RefusalReason, type ResultShape } from './challenge.js';
import { challengeThrottleKey } from './client-key.js';
import { hashHandle, isWellFormedHandle, mintHandle, mintNonce } from './handles.js';

export interface PaywallSettings {
  argumentName: string;
  hashSecret: string;
  handleTtlMs: number;
  chargeTtlMs: number;
  callDeadlineMs: number;
  perHandle: { ratePerSecond: number; burst: number };
  challengesPerClient: { ratePerSecond: number; burst: number };
  /** §6.2 step 2: new checkout links per second over every replica (the provider's rate budget). */
  newChargesPerSecond: number;
}

export interface PaywallDeps {
  settings: PaywallSettings;
  store: Store;
  provider: PaymentProvider;
  settler: Settler;
  metrics: Metrics;
  logger: Logger;
  now: () => number;
}

/** One priced call as the paywall sees it. */
export interface PricedCall {
  call: ToolCall;
  price: PriceTag;
  principal: string | null;
  /** Principal if any, else the client address: the key of the challenge throttle. */
  clientKey: string;
  /**
   * How the gateway's own results look for this call. Asked only when the gateway answers itself
   * (it may list the upstream's tools to learn whether this tool declares an outputSchema), so an
   * authorised call never waits for it. Never rejects.
   */
  resultShape: () => Promise<ResultShape>;
  startedAt: number;
  /** The HTTP request's id, carried on this call's log lines. */
  reqId?: string;
}

/** The facts of the one log line every priced call gets (SPEC §10). */
interface CallFacts {
  tokenPresented: boolean;
  tokenFingerprint: string | null;
  tokenRecognised: boolean;
}

export type Authorisation =
  | { kind: 'answer'; result: JsonObject; outcome: PaidOutcome; facts: CallFacts }
  | { kind: 'reserved'; handleHash: string; reservationId: string; forwardParams: JsonObject; facts: CallFacts };

const OPENING_WAIT_MS = 5_000;
const OPENING_POLL_MS = 50;
/** The store bucket of the global cap on new charges (client keys start with "p:" or "ip:", so never this). */
const NEW_CHARGES_BUCKET = 'global:new-charges';

/** The global cap refused a new link: the caller answers rate_limited. */
interface BudgetRefusal {
  kind: 'budget_exhausted';
  retryAfterMs: number;
}

export class Paywall {
  readonly #deps: PaywallDeps;

  constructor(deps: PaywallDeps) {
    this.#deps = deps;
  }

  /** §6.2 steps 2–6. Never throws: store and provider failures become `payments_unavailable` (fail closed). */
  async authorise(priced: PricedCall): Promise<Authorisation> {
    const token = priced.call.args[this.#deps.settings.argumentName];
    const facts: CallFacts = {
      tokenPresented: token !== undefined,
      tokenFingerprint: typeof token === 'string' ? fingerprint(token) : null,
      tokenRecognised: false,
    };
    try {
      // Step 2: no token (or not a string) → a new handle and a challenge.
      if (typeof token !== 'string') return await this.#challengeNewHandle(priced, 'payment_required', facts);
      // Step 3: unknown handle. A malformed one is unknown without a store round trip.
      if (!isWellFormedHandle(token)) return await this.#challengeNewHandle(priced, 'unknown_handle', facts);
      const handleHash = hashHandle(token, this.#deps.settings.hashSecret);
      const reservationId = mintNonce();
      let decision = await this.#reserve(priced, handleHash, reservationId);
      if (decision.kind === 'unknown_handle') return await this.#challengeNewHandle(priced, 'unknown_handle', facts);
      facts.tokenRecognised = true;
      // Step 4: bound to another principal: refuse, disclose nothing, mint nothing.
      if (decision.kind === 'bound_to_other_principal') return this.#refuse(priced, 'bound_to_other_principal', 'refused_bound', facts);
      // Step 5: the per-handle bucket, before any credit moves.
      if (decision.kind === 'rate_limited') {
        return this.#refuse(priced, 'rate_limited', 'refused_rate_limited', facts, { retryAfterSeconds: Math.max(1, Math.ceil(decision.retryAfterMs / 1000)) });
      }
      // Step 6: short of credits → has the pending charge settled? Then reserve again. A payment that
      // lands after its charge was abandoned is still money received (§7.5): without webhooks this retry
      // is the only poll that can see it. Each read is at most one per 2 s per charge.
      if (decision.kind === 'insufficient' && decision.pending?.status === 'pending') decision = await this.#settleThenReserve(priced, handleHash, reservationId, decision, decision.pending);
      if (decision.kind === 'insufficient' && decision.lastCharge?.status === 'abandoned') decision = await this.#settleThenReserve(priced, handleHash, reservationId, decision, decision.lastCharge);
      if (decision.kind === 'reserved') {
        const { [this.#deps.settings.argumentName]: _token, ...args } = priced.call.args;
        return { kind: 'reserved', handleHash, reservationId, forwardParams: { ...(priced.call.request.params as JsonObject), arguments: args }, facts };
      }
      // The second reserve takes no token, so only a handle that vanished in between lands here.
      if (decision.kind !== 'insufficient') return await this.#challengeNewHandle(priced, 'unknown_handle', facts);
      return await this.#challengeExistingHandle(priced, token, handleHash, challengeReason(decision), decision.pending, facts);
    } catch (error) {
      this.#countFailure(priced, error);
      return this.#refuse(priced, 'payments_unavailable', 'refused_unavailable', facts);
    }
  }

  /** §6.2 step 7 and §6.5: commit or release by the tool's charge policy; the final message to send. */
  async conclude(priced: PricedCall, held: Extract<Authorisation, { kind: 'reserved' }>, outcome: ExchangeOutcome): Promise<JsonRpcResponse | null> {
    const { store, metrics } = this.#deps;
    const id = priced.call.request.id ?? null;
    const { sku, cost, charge } = priced.price;
    const succeeded = outcome.kind === 'answered' && isObject(outcome.message.result) && outcome.message.result.isError !== true;
    const accepted = outcome.kind === 'answered' || outcome.kind === 'http_refusal' || outcome.accepted;
    const keep = charge === 'attempt' ? accepted : succeeded;

    let remaining: number | null = null;
    try {
      remaining = keep ? await store.commit(held.handleHash, held.reservationId, priced.call.name) : await store.release(held.handleHash, held.reservationId);
      metrics.credits.inc({ sku, kind: keep ? 'spent' : 'refunded' }, cost);
    } catch (error) {
      // The reconciler releases the reservation after its deadline: the payer is never charged for this.
      this.#countFailure(priced, error, keep ? 'commit' : 'release');
    }

    const logOutcome: PaidOutcome = outcome.kind === 'aborted' && outcome.reason === 'deadline' ? 'deadline_exceeded' : outcome.kind === 'failed' ? 'upstream_error' : 'authorised';
    this.#logCall(priced, logOutcome, held.facts, keep ? cost : 0);

    switch (outcome.kind) {
      case 'answered': {
        if (!succeeded || remaining === null || !keep) return outcome.message;
        const result = outcome.message.result as JsonObject;
        const meta = isObject(result._meta) ? result._meta : {};
        return { ...outcome.message, result: { ...result, _meta: { ...meta, [RECEIPT_META_KEY]: { sku, cost, remaining } } } };
      }
      case 'http_refusal':
        return null; // relayed as it came
      case 'aborted':
        if (outcome.reason === 'client_gone') return null;
        return { jsonrpc: '2.0', id, result: refusalResult('deadline_exceeded', await priced.resultShape(), keep ? { text: 'The tool did not finish in time and was stopped. You may retry.' } : {}) };
      case 'failed':
        return { jsonrpc: '2.0', id, result: refusalResult('upstream_unavailable', await priced.resultShape()) };
    }
  }

  /** Logs and counts an answer the gateway gave itself (challenge or refusal). */
  recordAnswer(priced: PricedCall, answer: Extract<Authorisation, { kind: 'answer' }>): void {
    this.#logCall(priced, answer.outcome, answer.facts, 0);
  }

  /**
   * Asks the provider about one charge; a settled charge means reserving again, an underpaid one is
   * final for its link (§7.4), a dead or past-TTL one is abandoned (§7.2/§7.6): the challenge then
   * opens a new link. A charge that cannot be read is not a reason to refuse once it is past its TTL
   * or abandoned: its link is not shown again anyway, and the reconciler keeps polling it.
   */
  async #settleThenReserve(
    priced: PricedCall,
    handleHash: string,
    reservationId: string,
    decision: Extract<SpendDecision, { kind: 'insufficient' }>,
    charge: ChargeRecord,
  ): Promise<SpendDecision> {
    const withoutPending = (status: ChargeRecord['status']): Extract<SpendDecision, { kind: 'insufficient' }> => ({
      ...decision,
      pending: decision.pending?.nonce === charge.nonce ? null : decision.pending,
      lastCharge: { ...charge, status },
    });
    let observation: Observation;
    try {
      observation = await this.#deps.settler.observe(charge, { awaitOtherRead: true });
    } catch (error) {
      if (charge.status === 'pending' && charge.expiresAt > this.#deps.now()) throw error; // its link would be shown: refuse instead
      this.#deps.logger.info(
        { evt: 'charge_unreadable', reqId: priced.reqId, code: failureCode(error) },
        'the payment provider could not be read for a charge past its TTL; a new link is shown and the reconciler keeps polling the old one',
      );
      return charge.status === 'pending' ? withoutPending('abandoned') : decision;
    }
    if (observation === 'granted' || observation === 'already_settled') return this.#reserve(priced, handleHash, reservationId, false);
    if (observation === 'underpaid') return withoutPending('underpaid');
    if (observation === 'abandoned') return withoutPending('abandoned');
    return decision;
  }

  /** @param takeToken false for the second reserve of a call that just settled a charge (one call, one token) */
  async #reserve(priced: PricedCall, handleHash: string, reservationId: string, takeToken = true): Promise<SpendDecision> {
    const { settings, store, now } = this.#deps;
    return store.reserve({
      handleHash,
      principal: priced.principal,
      sku: priced.price.sku,
      cost: priced.price.cost,
      reservationId,
      reservationDeadline: now() + settings.callDeadlineMs + 5_000,
      ttlMs: settings.handleTtlMs,
      bucket: takeToken ? settings.perHandle : null,
    });
  }

  /**
   * Step 2: the client's bucket (principal, IPv4 address or IPv6 /64), then the global cap on new
   * charges (a new handle always opens one), and only then a handle is minted: a refused flood leaves
   * nothing behind in the store.
   */
  async #challengeNewHandle(priced: PricedCall, reason: ChallengeReason, facts: CallFacts): Promise<Authorisation> {
    const { settings, store } = this.#deps;
    const throttle = await store.takeChallengeToken(challengeThrottleKey(priced.clientKey), settings.challengesPerClient);
    if (!throttle.allowed) return this.#refuseRateLimited(priced, facts, throttle.retryAfterMs);
    const budget = await this.#takeNewChargeBudget();
    if (budget) return this.#refuseRateLimited(priced, facts, budget.retryAfterMs);
    const handle = mintHandle();
    const handleHash = hashHandle(handle, settings.hashSecret);
    await store.createHandle({ handleHash, fingerprint: fingerprint(handle), principal: priced.principal, ttlMs: settings.handleTtlMs });
    return this.#challengeExistingHandle(priced, handle, handleHash, reason, null, facts, true);
  }

  /** One token of the global cap on new charges, or the refusal to answer with. */
  async #takeNewChargeBudget(): Promise<BudgetRefusal | null> {
    const rate = this.#deps.settings.newChargesPerSecond;
    const taken = await this.#deps.store.takeChallengeToken(NEW_CHARGES_BUCKET, { ratePerSecond: rate, burst: Math.max(1, Math.ceil(rate)) });
    return taken.allowed ? null : { kind: 'budget_exhausted', retryAfterMs: taken.retryAfterMs };
  }

  #refuseRateLimited(priced: PricedCall, facts: CallFacts, retryAfterMs: number): Promise<Authorisation> {
    return this.#refuse(priced, 'rate_limited', 'refused_rate_limited', facts, { retryAfterSeconds: Math.max(1, Math.ceil(retryAfterMs / 1000)) });
  }

  async #challengeExistingHandle(
    priced: PricedCall,
    handle: string,
    handleHash: string,
    reason: ChallengeReason,
    pending: ChargeRecord | null,
    facts: CallFacts,
    budgetTaken = false,
  ): Promise<Authorisation> {
    const charge = pending?.status === 'pending' && pending.checkoutUrl && pending.expiresAt > this.#deps.now() + 60_000 ? pending : await this.#chargeFor(priced, handleHash, budgetTaken);
    if ('kind' in charge) return this.#refuseRateLimited(priced, facts, charge.retryAfterMs);
    const result = challengeResult(
      { reason, tool: priced.call.name, price: priced.price, checkoutUrl: charge.checkoutUrl as string, expiresAt: charge.expiresAt, handle, argumentName: this.#deps.settings.argumentName },
      await priced.resultShape(),
    );
    return { kind: 'answer', result, outcome: 'challenged', facts };
  }

  /**
   * The handle's usable pending charge for this SKU, or a new one (one pending link per handle and
   * SKU, §6.5). Only a new one costs a token of the global cap (unless the caller took it already).
   */
  async #chargeFor(priced: PricedCall, handleHash: string, budgetTaken: boolean): Promise<ChargeRecord | BudgetRefusal> {
    const { settings, store, provider, metrics, now } = this.#deps;
    const { price } = priced;
    const begun = await store.beginCharge({
      handleHash,
      sku: price.sku,
      nonce: mintNonce(),
      snapshot: { label: price.label, amount: price.amount, currency: price.currency, credits: price.credits, tool: priced.call.name },
      now: now(),
      ttlMs: settings.chargeTtlMs,
      firstPollDelayMs: 3_000,
    });
    if (begun.kind === 'existing') return this.#awaitLink(begun.charge);
    const charge = begun.charge;
    try {
      const budget = budgetTaken ? null : await this.#takeNewChargeBudget();
      if (budget) {
        await store.abortCharge(handleHash, charge.nonce);
        return budget;
      }
      const link = await provider.openCharge({
        nonce: charge.nonce,
        sku: price.sku,
        amount: charge.amount,
        currency: charge.currency,
        label: charge.label,
        credits: charge.credits,
        tool: priced.call.name,
        expiresAt: charge.expiresAt,
      });
      const attached = await store.attachLink(handleHash, charge.nonce, link);
      if (!attached?.checkoutUrl) throw new GatewayError('TB_ERR_STORE_UNAVAILABLE', 'the new charge vanished before its link was stored');
      metrics.chargesOpened.inc({ sku: price.sku });
      return attached;
    } catch (error) {
      await store.abortCharge(handleHash, charge.nonce).catch(() => undefined);
      throw error;
    }
  }

  /** Another caller (any replica) is opening this handle's link: wait briefly and share it. */
  async #awaitLink(charge: ChargeRecord): Promise<ChargeRecord> {
    const deadline = this.#deps.now() + OPENING_WAIT_MS;
    let current: ChargeRecord | null = charge;
    while (current && !current.checkoutUrl && this.#deps.now() < deadline) {
      await sleep(OPENING_POLL_MS);
      current = await this.#deps.store.getCharge(charge.handleHash, charge.nonce);
    }
    if (!current?.checkoutUrl) throw new GatewayError('TB_ERR_PROVIDER', 'the checkout link being opened by another call did not appear in time');
    return current;
  }

  async #refuse(priced: PricedCall, reason: RefusalReason, outcome: PaidOutcome, facts: CallFacts, options: { retryAfterSeconds?: number } = {}): Promise<Authorisation> {
    return { kind: 'answer', result: refusalResult(reason, await priced.resultShape(), options), outcome, facts };
  }

  #countFailure(priced: PricedCall, error: unknown, op = 'authorise'): void {
    const code = failureCode(error);
    if (error instanceof GatewayError && error.code === 'TB_ERR_STORE_UNAVAILABLE') this.#deps.metrics.storeErrors.inc({ op });
    this.#deps.logger.warn({ evt: 'paywall_unavailable', reqId: priced.reqId, op, code }, 'a priced call was refused because the store or the payment provider failed');
  }

  #logCall(priced: PricedCall, outcome: PaidOutcome, facts: CallFacts, cost: number): void {
    const { metrics, logger, now } = this.#deps;
    metrics.paidCalls.inc({ tool: priced.call.name, sku: priced.price.sku, outcome });
    logger.info({ evt: 'call', reqId: priced.reqId, tool: priced.call.name, sku: priced.price.sku, ...facts, outcome, cost, durationMs: now() - priced.startedAt });
  }
}

/** A failure's stable code for logs: the gateway code, or provider_<kind>. */
function failureCode(error: unknown): string {
  if (error instanceof GatewayError) return error.code;
  return error instanceof Error && 'kind' in error ? `provider_${String((error as { kind: unknown }).kind)}` : 'unknown';
}

function challengeReason(decision: Extract<SpendDecision, { kind: 'insufficient' }>): ChallengeReason {
  if (decision.lastCharge?.status === 'underpaid') return 'underpaid';
  return decision.funded ? 'credits_exhausted' : 'payment_required';
}
