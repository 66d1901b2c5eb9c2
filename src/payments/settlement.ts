// The settlement rule (SPEC §7.4), on the price snapshot stored with the charge, in exact decimal
// arithmetic: amounts are decimal strings, the policy fractions are turned into fixed-point once.
import { parseDecimal } from '../money/decimal.js';

export interface SettlementPolicy {
  tolerance: number; // received ≥ (1 − tolerance) × amount → full pack
  minimumFraction: number; // received < minimumFraction × amount → nothing
}

export interface SettlementDecision {
  outcome: 'settled' | 'underpaid';
  credits: number;
  result: 'granted' | 'partial' | 'underpaid';
}

const SCALE = 12; // fixed-point digits for the policy fractions (config allows far fewer)

export function decideSettlement(snapshot: { amount: string; credits: number }, receivedAmount: string | null, policy: SettlementPolicy): SettlementDecision {
  if (receivedAmount === null) return { outcome: 'settled', credits: snapshot.credits, result: 'granted' };
  const [received, amount] = sameScale(parseDecimal(receivedAmount), parseDecimal(snapshot.amount));
  const one = 10n ** BigInt(SCALE);
  const tolerance = fixedPoint(policy.tolerance);
  const minimum = fixedPoint(policy.minimumFraction);
  if (received * one >= (one - tolerance) * amount) return { outcome: 'settled', credits: snapshot.credits, result: 'granted' };
  if (received * one < minimum * amount) return { outcome: 'underpaid', credits: 0, result: 'underpaid' };
  const proRata = (BigInt(snapshot.credits) * received) / amount;
  return { outcome: 'settled', credits: Math.max(1, Number(proRata)), result: 'partial' };
}

function fixedPoint(fraction: number): bigint {
  const [whole = '0', decimals = ''] = fraction.toFixed(SCALE).split('.');
  return BigInt(whole + decimals.padEnd(SCALE, '0'));
}

function sameScale(a: { units: bigint; scale: number }, b: { units: bigint; scale: number }): [bigint, bigint] {
  const scale = Math.max(a.scale, b.scale);
  return [a.units * 10n ** BigInt(scale - a.scale), b.units * 10n ** BigInt(scale - b.scale)];
}
