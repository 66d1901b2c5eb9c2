// Where a priced call's idempotency key comes from (SPEC §24) and what a valid one is: the
// `Idempotency-Key` HTTP header, or `params._meta["xyz.tollbooth/idempotencyKey"]`, or, for an x402
// payment, its `payment-identifier` extension id. Each is 1–255 printable ASCII characters; anything
// else is refused (TB_ERR_IDEMPOTENCY_KEY_INVALID) rather than silently ignored, because a client that
// sends a key counts on it: a retry that ignored it could be charged twice. The key itself is never
// echoed (it may be derived from something private).
import { GatewayError } from '../errors.js';
import { isObject, type JsonObject } from '../mcp/jsonrpc.js';
import { PAYMENT_META_KEY } from '../payments/x402/payload.js';

export const IDEMPOTENCY_HEADER = 'idempotency-key';
export const IDEMPOTENCY_META_KEY = 'xyz.tollbooth/idempotencyKey';
/** The x402 extension whose `info.id` is an idempotency key (@x402/extensions' PAYMENT_IDENTIFIER). */
export const PAYMENT_IDENTIFIER = 'payment-identifier';

const KEY = /^[\x20-\x7E]{1,255}$/;
const RULE = '1 to 255 printable ASCII characters';

/**
 * The call's idempotency key, or null when it carries none. `header` is the HTTP header's value (pass
 * undefined for an entry of a batch: one header cannot key several calls). A header and a `_meta` key
 * that differ are refused; an x402 payment's identifier counts only when neither is given.
 */
export function idempotencyKeyOf(header: string | string[] | undefined, params: unknown): string | null {
  const meta = isObject(params) && isObject(params._meta) ? params._meta : null;
  const fromHeader = header === undefined ? null : checked(Array.isArray(header) ? header.join(', ') : header, 'the Idempotency-Key header');
  const fromMeta = meta && Object.hasOwn(meta, IDEMPOTENCY_META_KEY) ? checked(meta[IDEMPOTENCY_META_KEY], `_meta["${IDEMPOTENCY_META_KEY}"]`) : null;
  if (fromHeader !== null && fromMeta !== null && fromHeader !== fromMeta) {
    throw new GatewayError('TB_ERR_IDEMPOTENCY_KEY_INVALID', `Invalid idempotency key: the Idempotency-Key header and _meta["${IDEMPOTENCY_META_KEY}"] differ; send one key`);
  }
  return fromHeader ?? fromMeta ?? paymentIdentifierOf(meta);
}

/** `params` without `_meta["xyz.tollbooth/idempotencyKey"]` (a `_meta` left empty is dropped): the upstream never sees it. */
export function stripIdempotencyKey(params: JsonObject): JsonObject {
  if (!isObject(params._meta) || !Object.hasOwn(params._meta, IDEMPOTENCY_META_KEY)) return params;
  const { [IDEMPOTENCY_META_KEY]: _key, ...meta } = params._meta;
  const { _meta: _old, ...rest } = params;
  return Object.keys(meta).length === 0 ? rest : { ...rest, _meta: meta };
}

/** x402's payment-identifier: `_meta["x402/payment"].extensions["payment-identifier"].info.id`. */
function paymentIdentifierOf(meta: JsonObject | null): string | null {
  const payment = meta?.[PAYMENT_META_KEY];
  if (!isObject(payment) || !isObject(payment.extensions)) return null;
  const extension = payment.extensions[PAYMENT_IDENTIFIER];
  if (!isObject(extension) || !isObject(extension.info) || extension.info.id === undefined) return null;
  return checked(extension.info.id, `the x402 ${PAYMENT_IDENTIFIER} id`);
}

function checked(value: unknown, where: string): string {
  if (typeof value === 'string' && KEY.test(value)) return value;
  const what = typeof value !== 'string' ? `not a string (${value === null ? 'null' : typeof value})` : value.length === 0 ? 'empty' : value.length > 255 ? `${value.length} characters long` : 'holding a character outside printable ASCII';
  throw new GatewayError('TB_ERR_IDEMPOTENCY_KEY_INVALID', `Invalid idempotency key: ${where} must be ${RULE}; it is ${what}`);
}
