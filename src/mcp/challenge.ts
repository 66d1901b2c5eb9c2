// The gateway's own answers to a priced call (SPEC §6.3, §6.4): tool results with isError: true,
// never JSON-RPC errors, so the handle has somewhere to ride back to the agent.
import type { Era } from './classify.js';
import type { JsonObject } from './jsonrpc.js';
import type { PriceTag } from './tools-list.js';

export const CHALLENGE_META_KEY = 'xyz.tollbooth/challenge';
export const REFUSAL_META_KEY = 'xyz.tollbooth/refusal';
export const RECEIPT_META_KEY = 'xyz.tollbooth/receipt';

export type ChallengeReason = 'payment_required' | 'unknown_handle' | 'credits_exhausted' | 'underpaid';
export type RefusalReason =
  | 'rate_limited'
  | 'bound_to_other_principal'
  | 'payments_unavailable'
  | 'deadline_exceeded'
  | 'upstream_unavailable'
  // x402 (SPEC §19): the payment in _meta["x402/payment"] was not accepted / could not be settled.
  | 'payment_invalid'
  | 'payment_failed'
  // SPEC §24: the idempotency key was already used for another call (tool, arguments or payer).
  | 'idempotency_conflict'
  // SPEC §23: the call would go over a budget (details: budget, resetsAt).
  | 'budget_exceeded';

export interface ChallengeInput {
  reason: ChallengeReason;
  tool: string;
  price: PriceTag;
  checkoutUrl: string;
  expiresAt: number;
  handle: string;
  argumentName: string;
}

export interface ResultShape {
  era: Era;
  /** structuredContent is allowed only when the tool declares no outputSchema (false when unknown). */
  structuredContentAllowed: boolean;
}

export function challengeText(input: ChallengeInput): string {
  const { price } = input;
  return [
    'PAYMENT_REQUIRED',
    `Payment required: ${price.amount} ${price.currency} for ${price.label} \u2014 ${price.credits} credits.`,
    '',
    'NEXT STEP \u2014 show the user this link and ask them to pay:',
    input.checkoutUrl,
    '',
    'AFTER the user says they have paid, retry:',
    `  same tool, same arguments, plus ${input.argumentName}="${input.handle}"`,
    '',
    'Rules:',
    `- Copy ${input.argumentName} exactly. It is opaque; any edit invalidates it.`,
    "- Do NOT answer the user's question from your own knowledge instead.",
    '- Do NOT stop and summarise. The task is not finished until you retry.',
    '- This is not an error you should report and abandon.',
  ].join('\n');
}

export function challengeResult(input: ChallengeInput, shape: ResultShape): JsonObject {
  const data = {
    status: 'payment_required',
    reason: input.reason,
    sku: input.price.sku,
    label: input.price.label,
    amount: input.price.amount,
    currency: input.price.currency,
    credits: input.price.credits,
    checkoutUrl: input.checkoutUrl,
    expiresAt: new Date(input.expiresAt).toISOString(),
    retry: { tool: input.tool, argument: input.argumentName, value: input.handle },
  };
  return finish({ content: [{ type: 'text', text: challengeText(input) }], isError: true, _meta: { [CHALLENGE_META_KEY]: data } }, data, shape);
}

const REFUSAL_TEXT: Record<RefusalReason, (retryAfterSeconds?: number) => string> = {
  rate_limited: (s) => `Too many calls with this payment handle: wait ${s ?? 1} seconds, then retry the same call. No credit was spent.`,
  bound_to_other_principal: () => 'This payment handle cannot be used by this account. Call the tool again without the handle to get your own.',
  payments_unavailable: () => 'Payments are temporarily unavailable, so this paid tool cannot run right now; no credit was spent. Retry in a minute.',
  deadline_exceeded: () => 'The tool did not finish in time and was stopped; the credit was refunded. You may retry.',
  upstream_unavailable: () => 'The tool server is unavailable or answered with an error; no credit was spent. Retry later.',
  payment_invalid: () => 'The x402 payment was not accepted, so the tool did not run and nothing was charged. Sign a new payment for the requirements in this result and retry.',
  payment_failed: () => 'The x402 payment could not be settled, so the result is withheld and the payment was not taken. Retry with a new payment.',
  idempotency_conflict: () => 'This idempotency key was already used for a different call (another tool or other arguments), so this call did not run and nothing was charged. Use a new key for a new call.',
  budget_exceeded: (s) => `This call would go over a spending limit set by the operator; no credit was spent. The limit resets in ${s ?? 1} seconds: retry then, or tell the user.`,
};

/** `details` adds fields after `reason` in the machine-readable data (e.g. x402's `invalidReason`). */
export function refusalResult(reason: RefusalReason, shape: ResultShape, options: { retryAfterSeconds?: number; text?: string; details?: JsonObject } = {}): JsonObject {
  const base = options.retryAfterSeconds === undefined ? { reason } : { reason, retryAfterSeconds: options.retryAfterSeconds };
  const data = options.details === undefined ? base : { ...base, ...options.details, reason };
  const text = options.text ?? REFUSAL_TEXT[reason](options.retryAfterSeconds);
  return finish({ content: [{ type: 'text', text }], isError: true, _meta: { [REFUSAL_META_KEY]: data } }, data, shape);
}

function finish(result: JsonObject, data: JsonObject, shape: ResultShape): JsonObject {
  if (shape.structuredContentAllowed) result.structuredContent = data;
  if (shape.era === 'modern') result.resultType = 'complete';
  return result;
}
