// The dev payment provider (SPEC §7.3): a local checkout page instead of real money, for the default
// install and demos. Its links live in the store, so `readCharge` works on any replica.
import { randomBytes } from 'node:crypto';
import type { Store } from '../store/store.js';
import type { ChargeReading, OpenChargeInput, OpenedCharge, PaymentProvider } from './provider.js';
import { ProviderError } from './provider.js';

export const DEV_CHECKOUT_PREFIX = '/tollbooth/checkout/';

export class DevProvider implements PaymentProvider {
  readonly name = 'dev' as const;
  readonly #store: Store;
  readonly #origin: string;
  readonly #now: () => number;

  constructor(deps: { store: Store; publicUrl: string; now?: () => number }) {
    this.#store = deps.store;
    this.#origin = new URL(deps.publicUrl).origin;
    this.#now = deps.now ?? Date.now;
  }

  async openCharge(input: OpenChargeInput): Promise<OpenedCharge> {
    // The link id is its own random value: never the nonce, never derived from the handle.
    const id = randomBytes(12).toString('base64url');
    await this.#store.putDevLink({
      id,
      label: input.label,
      amount: input.amount,
      currency: input.currency,
      credits: input.credits,
      expiresAt: input.expiresAt,
      status: 'active',
      receivedAmount: null,
    });
    return { providerRef: id, checkoutUrl: `${this.#origin}${DEV_CHECKOUT_PREFIX}${id}` };
  }

  async readCharge(providerRef: string): Promise<ChargeReading> {
    const link = await this.#store.getDevLink(providerRef);
    if (!link) throw new ProviderError('not_found', 'the dev checkout link does not exist');
    if (link.status === 'active' && link.expiresAt <= this.#now()) return { status: 'expired', receivedAmount: null };
    return { status: link.status, receivedAmount: link.receivedAmount };
  }
}
