// What the paywall hands out and takes back (SPEC §6.2): the priced call it is asked about, its
// answer (`Authorisation`), what happened upstream (`CallOutcome`, read by proxy/priced-call.ts and
// batch-call.ts) and how the call ended (`Conclusion`). The paywall owns these types; the proxy uses them.
import type { ToolCall } from '../mcp/classify.js';
import type { ResultShape } from '../mcp/challenge.js';
import type { JsonObject, JsonRpcResponse } from '../mcp/jsonrpc.js';
import type { PriceTag } from '../mcp/tools-list.js';
import type { PaidOutcome } from '../observability/metrics.js';
import type { X402Claim } from '../payments/x402/rail.js';
import type { AllowanceHold, QuotaHold } from './quotas.js';

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
  /** Who owns a task this call creates (paywall/tasks.ts taskOwner); '' when nobody can be told apart. */
  taskOwner?: string;
  /** The HTTP request's id, carried on this call's log lines. */
  reqId?: string;
  /** SPEC §24: the call's idempotency key (paywall/idempotency-key.ts), if it carries one. */
  idempotencyKey?: string | null;
}

/** The facts of the one log line every priced call gets (SPEC §10). */
export interface CallFacts {
  /** Which rail the call went by: x402 when it carried a payment the x402 rail took (SPEC §19). */
  rail: 'credits' | 'x402';
  tokenPresented: boolean;
  tokenFingerprint: string | null;
  tokenRecognised: boolean;
}

export type Authorisation =
  | { kind: 'answer'; result: JsonObject; outcome: PaidOutcome; facts: CallFacts }
  /** `quotas`: the budget draws held beside the reservation (SPEC §23), concluded with it; absent when no budget counts the call. */
  | { kind: 'reserved'; handleHash: string; reservationId: string; forwardParams: JsonObject; facts: CallFacts; quotas?: QuotaHold | null }
  /** A free call of an allowance (SPEC §23): no handle, no credits; its draws are concluded by the charge policy. */
  | { kind: 'allowance'; hold: AllowanceHold; forwardParams: JsonObject; facts: CallFacts }
  /** Paid by the x402 payment it carried (verified, its nonce claimed): no handle, no credits. */
  | { kind: 'x402'; claim: X402Claim; forwardParams: JsonObject; facts: CallFacts };

/** A call that was forwarded: it holds a reservation, or an x402 claim. */
export type HeldCall = Exclude<Authorisation, { kind: 'answer' }>;

/**
 * What happened upstream to a forwarded priced call (proxy/priced-call.ts reads it off the proxy's
 * response hook). `accepted`: the upstream answered HTTP 2xx (charge: attempt keeps the credit then).
 */
export type CallOutcome =
  /** HTTP 2xx and the one response that answers this call exactly. */
  | { kind: 'answered'; message: JsonRpcResponse }
  /** An upstream 4xx: relayed to the client unchanged. The tool never ran. */
  | { kind: 'http_refusal'; status: number }
  /** 5xx, unreachable, reset, unreadable, unmatched, too large, or the reply ended without the result. */
  | { kind: 'failed'; accepted: boolean }
  /** upstream.callDeadline passed. */
  | { kind: 'deadline'; accepted: boolean };

/** How a priced call ended: the message to send (null: the upstream's 4xx went as it came) and where its credit went ('unknown': the store failed). */
export interface Conclusion {
  /** 'held': answered with a task; the reservation stays open until the task's outcome (SPEC §24). */
  state: 'committed' | 'released' | 'unknown' | 'held';
  message: JsonRpcResponse | null;
}
