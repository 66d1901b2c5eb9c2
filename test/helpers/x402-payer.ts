// An agent with a wallet (SPEC §19 tests): a throwaway key signing through the x402 client libraries
// (@x402/core's x402Client with @x402/evm's exact EVM scheme, viem's privateKeyToAccount), so the
// payloads the gateway sees are exactly what real x402 clients produce.
import { x402Client } from '@x402/core/client';
import type { PaymentPayload, PaymentRequired } from '@x402/core/types';
import { registerExactEvmScheme } from '@x402/evm/exact/client';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';

export interface Payer {
  /** Checksummed address. */
  address: string;
  pay(paymentRequired: PaymentRequired): Promise<PaymentPayload>;
}

export function newPayer(): Payer {
  const account = privateKeyToAccount(generatePrivateKey());
  const client = new x402Client();
  registerExactEvmScheme(client, { signer: account });
  return { address: account.address, pay: (paymentRequired) => client.createPaymentPayload(paymentRequired) };
}

/** A deep copy, for tampering without touching the original. */
export const clonePayload = (payload: PaymentPayload): PaymentPayload & { payload: { authorization: Record<string, string>; signature: string } } =>
  structuredClone(payload) as PaymentPayload & { payload: { authorization: Record<string, string>; signature: string } };
