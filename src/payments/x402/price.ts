// The price of one x402-paid call (SPEC §19), in the asset's atomic units (USDC: 6 decimals, so
// "0.02" is 20000). Exact integer arithmetic on the decimal strings of the config (decimal.ts), and
// rounded up: the payee never receives less than the credit price the operator set.
import { formatDecimal, parseDecimal } from '../../money/decimal.js';

export interface CallPrice {
  /** Credits the tool costs (tools.<name>.cost). */
  cost: number;
  /** The SKU's pack: `amount` (decimal string) buys `credits`. */
  amount: string;
  credits: number;
  /** skus.<name>.x402Price: an explicit price per credit (decimal string) that replaces amount / credits. */
  x402Price?: string | undefined;
}

/**
 * `cost × amount / credits` (or `cost × x402Price`) × 10^decimals, rounded up to a whole atomic unit.
 * Returned as a decimal integer string, the form x402's `amount` field takes.
 */
export function atomicPrice(price: CallPrice, decimals: number): string {
  if (!Number.isSafeInteger(price.cost) || price.cost <= 0) throw new RangeError('cost must be a positive integer');
  if (!Number.isSafeInteger(decimals) || decimals < 0) throw new RangeError('decimals must be a non-negative integer');
  const perUnit = parseDecimal(price.x402Price ?? price.amount);
  if (perUnit.units <= 0n) throw new RangeError('a price must be greater than zero');
  const divisor = price.x402Price === undefined ? BigInt(assertCredits(price.credits)) : 1n;
  // value = cost × units / 10^scale / divisor, in atomic units × 10^decimals.
  const numerator = BigInt(price.cost) * perUnit.units * 10n ** BigInt(decimals);
  const denominator = divisor * 10n ** BigInt(perUnit.scale);
  return ceilDiv(numerator, denominator).toString();
}

/** An atomic amount as a decimal in token units: ("20000", 6) → "0.02". For people, never for arithmetic. */
export const formatAtomic = (atomic: string, decimals: number): string => formatDecimal({ units: BigInt(atomic), scale: decimals });

function assertCredits(credits: number): number {
  if (!Number.isSafeInteger(credits) || credits <= 0) throw new RangeError('credits must be a positive integer');
  return credits;
}

const ceilDiv = (a: bigint, b: bigint): bigint => (a + b - 1n) / b;
