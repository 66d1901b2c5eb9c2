// The payment an agent sends with its retry (SPEC §19): `params._meta["x402/payment"]`, an x402 v2
// `PaymentPayload` of the "exact" EVM scheme (an EIP-3009 TransferWithAuthorization and its
// signature). This module reads it, checks it against this call's requirements before anything is
// sent anywhere, and derives the nonce key the store claims. It never logs and never puts the
// payload or the signature into an error: a signed authorization is a bearer instrument until settled.
import { PaymentPayloadV2Schema } from '@x402/core/schemas';
import type { PaymentPayload, PaymentRequirements } from '@x402/core/types';
import type { ExactEIP3009Payload } from '@x402/evm';
import { isObject, type JsonObject } from '../../mcp/jsonrpc.js';
import type { PaymentNonceKey } from '../../store/store.js';

export const PAYMENT_META_KEY = 'x402/payment';

/** What the gateway needs from a checked EIP-3009 authorization. Addresses and the nonce are lower-case. */
export interface CheckedAuthorization {
  payer: string;
  payTo: string;
  /** Atomic units, decimal integer string. */
  value: string;
  /** Unix seconds. */
  validAfter: number;
  validBefore: number;
  /** 0x + 64 lower-case hex digits. */
  nonce: string;
}

export type PayloadCheck =
  | { ok: true; payload: PaymentPayload; authorization: CheckedAuthorization }
  | { ok: false; reason: string };

const ADDRESS = /^0x[0-9a-fA-F]{40}$/;
const NONCE = /^0x[0-9a-fA-F]{64}$/;
const SIGNATURE = /^0x[0-9a-fA-F]{130,}$/; // 65-byte ECDSA; longer for smart-wallet (ERC-1271/6492) signatures
const UINT = /^(0|[1-9]\d{0,77})$/;
const MAX_SIGNATURE_CHARS = 8_192;

/** The payment the request carries, if any: `params._meta["x402/payment"]`. */
export function paymentIn(params: unknown): unknown {
  if (!isObject(params) || !isObject(params._meta) || !Object.hasOwn(params._meta, PAYMENT_META_KEY)) return undefined;
  return params._meta[PAYMENT_META_KEY];
}

/**
 * `params` without `_meta["x402/payment"]`: what the upstream may see. A `_meta` left empty is
 * dropped, so the upstream sees what a client that never sent a payment would have sent.
 */
export function stripPayment(params: JsonObject): JsonObject {
  if (!isObject(params._meta) || !Object.hasOwn(params._meta, PAYMENT_META_KEY)) return params;
  const { [PAYMENT_META_KEY]: _payment, ...meta } = params._meta;
  const { _meta: _old, ...rest } = params;
  return Object.keys(meta).length === 0 ? rest : { ...rest, _meta: meta };
}

/**
 * A request body (one message or a batch) without any `params._meta["x402/payment"]`: what the
 * upstream may see of any request, free tools and other methods included — a signed authorization
 * never reaches the upstream. The same value when nothing carries a payment (the common case).
 */
export function withoutPayments(body: unknown): unknown {
  if (Array.isArray(body)) return body.some(carriesPayment) ? body.map(withoutPayments) : body;
  if (!carriesPayment(body)) return body;
  const message = body as JsonObject;
  return { ...message, params: stripPayment(message.params as JsonObject) };
}

const carriesPayment = (message: unknown): boolean => isObject(message) && paymentIn(message.params) !== undefined;

/**
 * Checks a payload against this call's requirements, as far as that can be done without the
 * facilitator: version, scheme, network, the requirements the payer accepted, the authorization's
 * form, payee and value, and a validity window no longer than the requirements allow (plus
 * `skewSeconds` for clocks). Reasons are x402 error codes where one exists.
 */
export function checkPayload(raw: unknown, requirements: PaymentRequirements, nowSeconds: number, skewSeconds: number): PayloadCheck {
  if (!isObject(raw) || raw.x402Version !== 2) return { ok: false, reason: isObject(raw) && 'x402Version' in raw ? 'invalid_x402_version' : 'invalid_payload' };
  const parsed = PaymentPayloadV2Schema.safeParse(raw);
  if (!parsed.success) return { ok: false, reason: 'invalid_payload' };
  const payload = parsed.data as PaymentPayload;
  const accepted = payload.accepted;
  if (accepted.scheme !== requirements.scheme) return { ok: false, reason: 'unsupported_scheme' };
  if (accepted.network !== requirements.network) return { ok: false, reason: 'invalid_network' };
  if (!sameAddress(accepted.asset, requirements.asset) || !sameAddress(accepted.payTo, requirements.payTo) || accepted.amount !== requirements.amount) {
    return { ok: false, reason: 'invalid_payment_requirements' };
  }
  const authorization = readAuthorization(payload.payload);
  if (!authorization) return { ok: false, reason: 'invalid_payload' };
  if (authorization.payTo !== requirements.payTo.toLowerCase()) return { ok: false, reason: 'invalid_exact_evm_recipient_mismatch' };
  if (authorization.value !== requirements.amount) return { ok: false, reason: 'invalid_exact_evm_payload_authorization_value_mismatch' };
  if (authorization.validBefore > nowSeconds + requirements.maxTimeoutSeconds + skewSeconds) return { ok: false, reason: 'authorization_window_too_long' };
  return { ok: true, payload, authorization };
}

/** The store key of an authorization: the same authorization always maps to the same key, whatever its letter case. */
export const nonceKey = (requirements: PaymentRequirements, authorization: CheckedAuthorization): PaymentNonceKey => ({
  network: requirements.network,
  asset: requirements.asset.toLowerCase(),
  payer: authorization.payer,
  nonce: authorization.nonce,
});

function readAuthorization(payload: Record<string, unknown>): CheckedAuthorization | null {
  const { authorization, signature } = payload as Partial<ExactEIP3009Payload> & Record<string, unknown>;
  if (typeof signature !== 'string' || signature.length > MAX_SIGNATURE_CHARS || !SIGNATURE.test(signature)) return null;
  if (!isObject(authorization)) return null;
  const { from, to, value, validAfter, validBefore, nonce } = authorization;
  if (typeof from !== 'string' || !ADDRESS.test(from) || typeof to !== 'string' || !ADDRESS.test(to)) return null;
  if (typeof value !== 'string' || !UINT.test(value) || typeof validAfter !== 'string' || !UINT.test(validAfter) || typeof validBefore !== 'string' || !UINT.test(validBefore)) return null;
  if (typeof nonce !== 'string' || !NONCE.test(nonce)) return null;
  const after = Number(validAfter);
  const before = Number(validBefore);
  if (!Number.isSafeInteger(after) || !Number.isSafeInteger(before)) return null;
  return { payer: from.toLowerCase(), payTo: to.toLowerCase(), value, validAfter: after, validBefore: before, nonce: nonce.toLowerCase() };
}

const sameAddress = (a: string, b: string): boolean => a.toLowerCase() === b.toLowerCase();
