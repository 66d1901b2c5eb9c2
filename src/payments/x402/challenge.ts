// The x402 additions to the gateway's own results (SPEC §19, x402 MCP transport, tool-result
// binding). Pure functions over a result built by mcp/challenge.ts: the human text of §6.3
// stays the first content item, unchanged, because most clients today are LLM hosts; x402 clients
// find `PaymentRequired` in `structuredContent` (where §5.4 allows it: the builder only sets it
// then), in `_meta["x402/payment-required"]`, and as JSON in a second text item.
import type { PaymentRequired } from '@x402/core/types';
import { isObject, type JsonObject } from '../../mcp/jsonrpc.js';

export const PAYMENT_REQUIRED_META_KEY = 'x402/payment-required';
export const PAYMENT_RESPONSE_META_KEY = 'x402/payment-response';

/**
 * A copy of `result` that also carries `paymentRequired`. `structuredContent` (present only when the
 * tool may have one) gains the PaymentRequired fields at its top level, so an x402 client that checks
 * it for `x402Version` and `accepts` finds them; the gateway's own fields stay beside them.
 */
export function withPaymentRequired(result: JsonObject, paymentRequired: PaymentRequired): JsonObject {
  const content: unknown[] = Array.isArray(result.content) ? result.content : [];
  const meta = isObject(result._meta) ? result._meta : {};
  const next: JsonObject = {
    ...result,
    content: [...content, { type: 'text', text: JSON.stringify(paymentRequired) }],
    _meta: { ...meta, [PAYMENT_REQUIRED_META_KEY]: paymentRequired },
  };
  if (isObject(result.structuredContent)) next.structuredContent = { ...result.structuredContent, ...paymentRequired };
  return next;
}
