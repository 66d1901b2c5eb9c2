// The x402 rail through a real gateway (SPEC §19 tests): `payments.x402` terms for Base Sepolia USDC
// (a token @x402/evm knows, so the library's client signs for it), and what an x402 client reads
// from a result and sends back.
import { PaymentRequiredV2Schema } from '@x402/core/schemas';
import type { PaymentPayload, PaymentRequired } from '@x402/core/types';
import type { ConfigInput } from '../../src/config/schema.js';

type Json = Record<string, any>;

export const X402_TERMS = {
  network: 'eip155:84532',
  asset: '0x036CbD53842c5426634e7929541eC2318f3dCF7e',
  assetDecimals: 6,
  currency: 'USDC',
  payTo: '0x209693Bc6afc0C5328bA36FaF03C514EF312287C',
  maxTimeoutSeconds: 120,
};

/**
 * `base` with the x402 rail on against `facilitatorUrl`. The research SKU (USDC, so it is offered) gets
 * `x402Price: "0.01"` per credit: the x402 client refuses to sign more than $1 per payment by default,
 * and testConfig's pack (5.00 USDC / 3 credits) would make one call 1.67 USDC.
 */
export function withX402(base: ConfigInput, facilitatorUrl: string): ConfigInput {
  const skus = Object.fromEntries(Object.entries(base.skus ?? {}).map(([name, sku]) => [name, name === 'research' ? { ...sku, x402Price: '0.01' } : sku]));
  return { ...base, skus, payments: { ...base.payments, x402: { facilitatorUrl, ...X402_TERMS } } };
}

/** PaymentRequired as an x402 client finds it: `_meta["x402/payment-required"]`, checked against the x402 v2 schema. */
export function paymentRequiredOf(result: Json): PaymentRequired {
  const found = result._meta?.['x402/payment-required'];
  const parsed = PaymentRequiredV2Schema.safeParse(found);
  if (!parsed.success) throw new Error(`no valid PaymentRequired in the result: ${JSON.stringify(result).slice(0, 400)}`);
  return found as PaymentRequired;
}

/** The `_meta` of a paid retry. */
export const paymentMeta = (payload: PaymentPayload): Json => ({ 'x402/payment': payload });

/** Strings of a payload that must never leave the gateway towards logs, metrics or the upstream. */
export function payloadSecrets(payload: PaymentPayload): string[] {
  const inner = payload.payload as { signature: string; authorization: { nonce: string } };
  return [inner.signature, inner.signature.slice(2, 40), inner.authorization.nonce, inner.authorization.nonce.slice(2, 40)];
}
