// The payment provider interface (SPEC §7.1). Implementations: dev.ts (local checkout page) and
// moove.ts (the Moove API). Errors are typed with a `retryable` flag; no key ever appears in one.
import { GatewayError } from '../errors.js';

export interface OpenChargeInput {
  nonce: string;
  sku: string;
  amount: string; // decimal string
  currency: string;
  label: string;
  credits: number;
  tool: string;
  expiresAt: number; // epoch ms
}

export interface OpenedCharge {
  providerRef: string;
  checkoutUrl: string;
}

export interface ChargeReading {
  status: 'active' | 'completed' | 'expired';
  receivedAmount: string | null; // decimal string as reported, null when unknown
}

export interface PaymentProvider {
  readonly name: 'dev' | 'moove';
  openCharge(input: OpenChargeInput, signal?: AbortSignal): Promise<OpenedCharge>;
  readCharge(providerRef: string, signal?: AbortSignal): Promise<ChargeReading>;
  close?(): Promise<void>;
}

export type ProviderErrorKind = 'auth' | 'scope' | 'account_not_ready' | 'bad_amount' | 'not_found' | 'rate_limited' | 'server' | 'network' | 'bad_response';

const RETRYABLE: ReadonlySet<ProviderErrorKind> = new Set(['rate_limited', 'server', 'network']);

/** A provider call that failed: TB_ERR_PROVIDER (502) on the wire, its kind for the logs and retries. */
export class ProviderError extends GatewayError {
  override readonly code = 'TB_ERR_PROVIDER' as const;
  readonly kind: ProviderErrorKind;
  readonly retryable: boolean;
  readonly httpStatus: number | null;
  readonly providerCode: string | null;

  constructor(kind: ProviderErrorKind, message: string, details: { httpStatus?: number | null; providerCode?: string | null; cause?: unknown } = {}) {
    super('TB_ERR_PROVIDER', message, { cause: details.cause });
    this.name = 'ProviderError';
    this.kind = kind;
    this.retryable = RETRYABLE.has(kind);
    this.httpStatus = details.httpStatus ?? null;
    this.providerCode = details.providerCode ?? null;
  }
}
