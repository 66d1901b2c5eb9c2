// Decimal money amounts as strings ("5.00", "4.975"), compared and normalised with BigInt arithmetic.
// Providers echo amounts back in their own shape (Moove answers "5" for a link created with "5.00"),
// so amounts are compared by value, never as strings and never as floats.

/** `units × 10^-scale`: "5.00" → {units: 500n, scale: 2}. */
export interface Decimal {
  units: bigint;
  scale: number;
}

// Plain notation only: optional minus, digits, optional fraction. No exponent, no spaces, no "+", no ".5".
const DECIMAL_PATTERN = /^(-?)(\d+)(?:\.(\d+))?$/;
// Far beyond any money amount; bounds BigInt work on hostile input.
const MAX_DIGITS = 60;

export const isDecimalString = (value: unknown): value is string =>
  typeof value === 'string' && value.length <= MAX_DIGITS + 2 && DECIMAL_PATTERN.test(value);

/** Parses a plain decimal string; throws a RangeError naming what was wrong otherwise. */
export function parseDecimal(value: string): Decimal {
  const match = value.length <= MAX_DIGITS + 2 ? DECIMAL_PATTERN.exec(value) : null;
  if (!match) throw new RangeError('not a decimal amount: expected digits with an optional fraction, like "5" or "5.00"');
  const [, sign = '', whole = '0', fraction = ''] = match;
  const units = BigInt(whole + fraction);
  return { units: sign === '-' ? -units : units, scale: fraction.length };
}

const toDecimal = (value: string | Decimal): Decimal => (typeof value === 'string' ? parseDecimal(value) : value);

const rescale = (value: Decimal, scale: number): bigint => value.units * 10n ** BigInt(scale - value.scale);

/** -1, 0 or 1 as `a` is less than, equal to or greater than `b` by value ("5" equals "5.00"). */
export function compareDecimal(a: string | Decimal, b: string | Decimal): -1 | 0 | 1 {
  const x = toDecimal(a);
  const y = toDecimal(b);
  const scale = Math.max(x.scale, y.scale);
  const left = rescale(x, scale);
  const right = rescale(y, scale);
  return left < right ? -1 : left > right ? 1 : 0;
}

/** True when both amounts have the same value, whatever their trailing zeros. */
export const equalAmounts = (a: string | Decimal, b: string | Decimal): boolean => compareDecimal(a, b) === 0;

/** The shortest plain string for a value: {units: 500n, scale: 2} → "5", "4.50" → "4.5", "-0.0" → "0". */
export function formatDecimal(value: string | Decimal): string {
  let { units, scale } = toDecimal(value);
  while (scale > 0 && units % 10n === 0n) {
    units /= 10n;
    scale -= 1;
  }
  const negative = units < 0n;
  const digits = (negative ? -units : units).toString().padStart(scale + 1, '0');
  const whole = digits.slice(0, digits.length - scale);
  const fraction = scale > 0 ? `.${digits.slice(digits.length - scale)}` : '';
  return `${negative ? '-' : ''}${whole}${fraction}`;
}
