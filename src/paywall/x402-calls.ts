// The x402 rail on the priced-call path (SPEC §19): what the paywall does for a call whose SKU the rail
// offers. decide.ts keeps the order of §6.2 and the charge policy of §6.5 (one rule for both rails);
// this module holds the x402 side of each step:
//   challenge  — every challenge for such a SKU also carries PaymentRequired;
//   authorise  — a retry with `_meta["x402/payment"]` and no handle: the client's retry bucket, then
//                the rail (checks, facilitator verify, nonce claim); nothing is forwarded before that;
//   conclude   — on the upstream's answer: settle when the charge policy would commit, deliver with
//                `x402/payment-response`, withhold when settlement fails, say so when nothing is taken;
//   resumed    — a result that turns up on another stream (GET, replay, another replica) is never
//                concluded there: only the replica holding the payment can settle it. It is delivered
//                only if its call was settled (docs/decisions.md, "x402 on the request path").
import type { SettleResponse } from '@x402/core/types';
import { GatewayError } from '../errors.js';
import { isObject, type JsonObject, type JsonRpcResponse } from '../mcp/jsonrpc.js';
import type { Logger } from '../observability/logger.js';
import type { Metrics, PaidOutcome } from '../observability/metrics.js';
import { PAYMENT_RESPONSE_META_KEY } from '../payments/x402/challenge.js';
import type { NotSettledReason, X402Conclusion, X402Rail } from '../payments/x402/rail.js';
import type { X402Call } from '../payments/x402/requirements.js';
import type { PricedRequestKey, PricedRequestRecord, Store } from '../store/store.js';
import { refusalResult, type ResultShape } from '../mcp/challenge.js';
import { challengeThrottleKey } from './client-key.js';
import type { Authorisation, CallFacts, CallOutcome, Conclusion, PricedCall } from './outcome.js';

export interface X402CallSettings {
  /** The public URL of the MCP endpoint (PaymentRequired's resource.url names it and the tool). */
  endpointUrl: string;
  /** skus.<sku>.x402Price, where a SKU sets one. */
  x402Prices: Record<string, string | undefined>;
  /** Paid retries per client (principal, IPv4 address or IPv6 /64) before the facilitator is asked: limits.perHandle. */
  perClient: { ratePerSecond: number; burst: number };
  argumentName: string;
  /** The endpoint (SPEC §18): `default`, or its `servers` key; the ledger names its tools `<server>/<tool>`. */
  server?: string;
}

export interface X402CallsDeps {
  rail: X402Rail;
  store: Pick<Store, 'takeChallengeToken' | 'concludePricedRequest'>;
  settings: X402CallSettings;
  metrics: Metrics;
  logger: Logger;
}

export type X402Held = Extract<Authorisation, { kind: 'x402' }>;

/** How an x402 call ended, for the paywall's log line. */
export interface X402Concluded extends Conclusion {
  settled: boolean;
  logOutcome: PaidOutcome;
}

const DEADLINE_PAID = 'The tool did not finish in time and was stopped; the upstream had accepted the call, so the x402 payment was taken. You may retry with a new payment.';
const FAILED_PAID = 'The tool server accepted the call but its answer could not be read; the x402 payment was taken. Retry later with a new payment.';

export class X402Calls {
  readonly #deps: X402CallsDeps;

  constructor(deps: X402CallsDeps) {
    this.#deps = deps;
  }

  /** True when this call is the x402 rail's: it carries a payment and no handle, and its SKU is priced in the rail's currency. */
  takes(priced: PricedCall, token: unknown, payment: unknown): boolean {
    return payment !== undefined && typeof token !== 'string' && this.#deps.rail.offers(priced.price);
  }

  /** A challenge (any reason) with PaymentRequired added when the SKU is offered x402; unchanged otherwise. */
  challengeAdditions(priced: PricedCall, shape: ResultShape, result: JsonObject): JsonObject {
    return this.#deps.rail.challengeAdditions(this.#callOf(priced, shape), result);
  }

  /**
   * The client's retry bucket, then the rail. Only a 'x402' answer may be forwarded (its params carry
   * neither the payment nor the token argument). Never throws: a failure refuses payments_unavailable.
   */
  async authorise(priced: PricedCall, facts: CallFacts): Promise<Authorisation> {
    const { rail, store, settings } = this.#deps;
    const shape = priced.resultShape(); // asked now, beside the bucket: every answer of the rail needs it
    const answer = (result: JsonObject, outcome: PaidOutcome): Authorisation => ({ kind: 'answer', result, outcome, facts });
    try {
      // Arbitrary signatures would otherwise reach the facilitator as fast as a client can send them.
      const bucket = await store.takeChallengeToken(retryBucket(priced.clientKey), settings.perClient);
      if (!bucket.allowed) {
        const seconds = Math.max(1, Math.ceil(bucket.retryAfterMs / 1000));
        const text = `Too many paid calls from this client: wait ${seconds} seconds, then retry the same call. The x402 payment was not used.`;
        return answer(refusalResult('rate_limited', await shape, { retryAfterSeconds: seconds, text }), 'refused_rate_limited');
      }
      const authorised = await rail.authorise(this.#callOf(priced, await shape), priced.call.request.params);
      // payment_invalid carries PaymentRequired again: the agent is asked to pay, as by a challenge.
      if (authorised.kind === 'refuse') return answer(authorised.result, authorised.reason === 'payments_unavailable' ? 'refused_unavailable' : 'challenged');
      const params = authorised.forwardParams;
      const args = isObject(params.arguments) ? params.arguments : null;
      if (!args || !Object.hasOwn(args, settings.argumentName)) return { kind: 'x402', claim: authorised.claim, forwardParams: params, facts };
      const { [settings.argumentName]: _token, ...rest } = args;
      return { kind: 'x402', claim: authorised.claim, forwardParams: { ...params, arguments: rest }, facts };
    } catch (error) {
      this.#storeFailure(priced.reqId, error, 'x402Authorise');
      return answer(refusalResult('payments_unavailable', await shape, { text: rail.refusalText('payments_unavailable') }), 'refused_unavailable');
    }
  }

  /**
   * §6.5 for an x402 call: `wouldCommit` is the tool's charge policy applied to what the upstream did
   * (decide.ts computes it once for both rails). Settles only then; the registry (a session's call)
   * learns the end before the answer goes out, so a resumed stream never sees a settled call in flight.
   */
  async conclude(priced: PricedCall, held: X402Held, outcome: CallOutcome, wouldCommit: boolean, registration: PricedRequestKey | null): Promise<X402Concluded> {
    const { rail } = this.#deps;
    const ended = wouldCommit ? await rail.conclude(held.claim, { wouldCommit: true }) : await rail.conclude(held.claim, { wouldCommit: false, reason: notSettledReason(outcome) });
    const settled = ended.kind === 'deliver';
    if (registration) await this.#concludeRegistry(registration, settled, priced.reqId);
    const logOutcome: PaidOutcome = outcome.kind === 'deadline' ? 'deadline_exceeded' : outcome.kind === 'answered' ? 'authorised' : 'upstream_error';
    return { state: settled ? 'committed' : 'released', settled, logOutcome, message: await this.#finalMessage(priced, outcome, ended) };
  }

  async #finalMessage(priced: PricedCall, outcome: CallOutcome, ended: X402Conclusion): Promise<JsonRpcResponse | null> {
    const id = priced.call.request.id ?? null;
    if (outcome.kind === 'http_refusal') return null; // the upstream's 4xx went as it came; nothing was settled
    if (ended.kind === 'withhold') return { jsonrpc: '2.0', id, result: ended.result }; // the upstream's result never goes out
    const settled = ended.kind === 'deliver';
    switch (outcome.kind) {
      case 'answered':
        // The only x402/payment-response on an x402-paid result is the gateway's: one the upstream put there is dropped.
        return withResultMeta(outcome.message, ended.meta, settled ? [] : [PAYMENT_RESPONSE_META_KEY]);
      case 'deadline': {
        const text = settled ? DEADLINE_PAID : this.#deps.rail.refusalText('deadline_exceeded');
        return { jsonrpc: '2.0', id, result: withMeta(refusalResult('deadline_exceeded', await priced.resultShape(), { text }), ended.meta) };
      }
      case 'failed': {
        const text = settled ? FAILED_PAID : this.#deps.rail.refusalText('upstream_unavailable');
        return { jsonrpc: '2.0', id, result: withMeta(refusalResult('upstream_unavailable', await priced.resultShape(), { text }), ended.meta) };
      }
    }
  }

  async #concludeRegistry(registration: PricedRequestKey, settled: boolean, reqId: string | undefined): Promise<void> {
    try {
      await this.#deps.store.concludePricedRequest(registration, settled ? 'committed' : 'released', null);
    } catch (error) {
      // The record stays in flight: a resumed stream drops the result (only a settled record delivers).
      this.#storeFailure(reqId, error, 'concludePricedRequest');
    }
  }

  #callOf(priced: PricedCall, shape: ResultShape): X402Call {
    const { settings } = this.#deps;
    const tool = priced.call.name;
    const ledgerTool = settings.server === undefined || settings.server === 'default' ? tool : `${settings.server}/${tool}`;
    return { tool, ledgerTool, price: priced.price, x402Price: settings.x402Prices[priced.price.sku], endpointUrl: settings.endpointUrl, shape };
  }

  #storeFailure(reqId: string | undefined, error: unknown, op: string): void {
    const code = error instanceof GatewayError ? error.code : 'unknown';
    if (code === 'TB_ERR_STORE_UNAVAILABLE') this.#deps.metrics.storeErrors.inc({ op });
    this.#deps.logger.warn({ evt: 'paywall_unavailable', reqId, op, code }, 'an x402-paid call was refused, or its end not recorded, because the store failed');
  }
}

/**
 * A response to an x402-paid call seen on a stream that is not its own (a GET stream, a replay, another
 * replica): delivered only when the call was settled, with the settlement read from the authorization's
 * record; null (dropped) otherwise. In flight means its own exchange has not settled it yet, and only
 * that exchange holds the payment: nothing is concluded here.
 */
export async function resumedX402Result(store: Pick<Store, 'getPaymentNonce'>, record: PricedRequestRecord, message: JsonRpcResponse): Promise<JsonRpcResponse | null> {
  if (record.state !== 'committed' || !record.x402) return null;
  const payment = await store.getPaymentNonce(record.x402);
  if (payment?.state !== 'settled' || !payment.transaction) return null;
  const settlement: SettleResponse = { success: true, transaction: payment.transaction, network: payment.network as SettleResponse['network'], payer: payment.payer };
  return withResultMeta(message, { [PAYMENT_RESPONSE_META_KEY]: settlement });
}

/** The bucket of a client's paid retries: its own, beside (never shared with) its challenge bucket. */
const retryBucket = (clientKey: string): string => `x402:${challengeThrottleKey(clientKey)}`;

function notSettledReason(outcome: CallOutcome): NotSettledReason {
  if (outcome.kind === 'deadline') return 'deadline_exceeded';
  return outcome.kind === 'answered' ? 'tool_error' : 'upstream_error';
}

function withMeta(result: JsonObject, meta: JsonObject): JsonObject {
  return { ...result, _meta: { ...(isObject(result._meta) ? result._meta : {}), ...meta } };
}

/** The response with `meta` merged into its result's `_meta` (`drop` keys removed first); a JSON-RPC error goes as it is. */
function withResultMeta(message: JsonRpcResponse, meta: JsonObject, drop: string[] = []): JsonRpcResponse {
  if (!isObject(message.result)) return message;
  const result = message.result;
  if (drop.length === 0 || !isObject(result._meta)) return { ...message, result: withMeta(result, meta) };
  const kept = Object.fromEntries(Object.entries(result._meta).filter(([key]) => !drop.includes(key)));
  return { ...message, result: withMeta({ ...result, _meta: kept }, meta) };
}
