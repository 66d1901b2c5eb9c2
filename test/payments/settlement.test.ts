// The settlement rule (SPEC §7.4) at its boundaries, in exact decimal arithmetic: 99.5% and 10% of
// the price, the pro rata floor with a minimum of 1, overpayment and an unknown received amount.
import t from 'tap';
import { decideSettlement } from '../../src/payments/settlement.js';

const policy = { tolerance: 0.005, minimumFraction: 0.1 };
const pack = { amount: '5.00', credits: 250 };

t.test('exactly 99.5% of 5.00 (4.975) is a full grant', async (t) => {
  t.same(decideSettlement(pack, '4.975', policy), { outcome: 'settled', credits: 250, result: 'granted' });
});

t.test('just below 99.5% (4.974999) is pro rata', async (t) => {
  t.same(decideSettlement(pack, '4.974999', policy), { outcome: 'settled', credits: 248, result: 'partial' });
});

t.test('exactly 10% of 5.00 (0.5) is pro rata, not underpaid', async (t) => {
  t.same(decideSettlement(pack, '0.5', policy), { outcome: 'settled', credits: 25, result: 'partial' });
  t.same(decideSettlement(pack, '0.500000', policy), { outcome: 'settled', credits: 25, result: 'partial' });
});

t.test('just below 10% (0.499999) grants nothing and leaves the charge underpaid', async (t) => {
  t.same(decideSettlement(pack, '0.499999', policy), { outcome: 'underpaid', credits: 0, result: 'underpaid' });
  t.same(decideSettlement(pack, '0', policy), { outcome: 'underpaid', credits: 0, result: 'underpaid' });
});

t.test('pro rata floors the credits', async (t) => {
  // 3 × 2.50 / 5.00 = 1.5 → 1; 3 × 4.99 / 5.00 = 2.994 → 2
  t.equal(decideSettlement({ amount: '5.00', credits: 3 }, '2.50', policy).credits, 1);
  t.equal(decideSettlement({ amount: '5.00', credits: 3 }, '4.97', policy).credits, 2);
  t.equal(decideSettlement(pack, '1.234567', policy).credits, 61); // 250 × 1.234567 / 5 = 61.728…
});

t.test('pro rata never grants less than 1 credit', async (t) => {
  // 3 × 0.60 / 5.00 = 0.36 → floor 0 → minimum 1
  t.same(decideSettlement({ amount: '5.00', credits: 3 }, '0.60', policy), { outcome: 'settled', credits: 1, result: 'partial' });
});

t.test('overpayment grants exactly the pack', async (t) => {
  t.same(decideSettlement(pack, '50.00', policy), { outcome: 'settled', credits: 250, result: 'granted' });
  t.same(decideSettlement(pack, '5.000001', policy), { outcome: 'settled', credits: 250, result: 'granted' });
});

t.test('an unknown received amount is a full grant', async (t) => {
  t.same(decideSettlement(pack, null, policy), { outcome: 'settled', credits: 250, result: 'granted' });
});

t.test('amounts compare by value whatever their scale ("5" equals "5.00")', async (t) => {
  t.same(decideSettlement({ amount: '5', credits: 250 }, '4.975000', policy).result, 'granted');
  t.same(decideSettlement({ amount: '5.000000', credits: 250 }, '5', policy).result, 'granted');
});

t.test('micro amounts keep 6-decimal precision: 0.000001 prices and payments', async (t) => {
  const tiny = { amount: '0.000010', credits: 10 };
  t.same(decideSettlement(tiny, '0.000010', policy).result, 'granted');
  t.same(decideSettlement(tiny, '0.000001', policy), { outcome: 'settled', credits: 1, result: 'partial' }); // exactly 10%
  t.same(decideSettlement(tiny, '0.000000', policy).result, 'underpaid');
  t.same(decideSettlement(tiny, '0.000009', policy), { outcome: 'settled', credits: 9, result: 'partial' });
});

t.test('no float error: 0.1 + 0.2 style amounts decide exactly', async (t) => {
  // As floats 0.3 × (1 − 0.005) = 0.29850000000000004 > 0.2985: the exact boundary would be missed.
  t.same(decideSettlement({ amount: '0.3', credits: 100 }, '0.2985', policy).result, 'granted');
  t.same(decideSettlement({ amount: '0.3', credits: 100 }, '0.298499', policy).result, 'partial');
});

t.test('the policy is read, not assumed: tolerance 0 and minimumFraction 0', async (t) => {
  const strict = { tolerance: 0, minimumFraction: 0 };
  t.same(decideSettlement(pack, '4.999999', strict).result, 'partial');
  t.same(decideSettlement(pack, '5.00', strict).result, 'granted');
  t.same(decideSettlement(pack, '0.000001', strict), { outcome: 'settled', credits: 1, result: 'partial' });
});

t.test('large packs and amounts stay exact where floats would round up', async (t) => {
  const big = { amount: '999999999.999999', credits: 1_000_000 };
  t.equal(decideSettlement(big, '499999999.9999995', policy).credits, 500_000); // exactly half
  // 1e6 × 499999999.999999 / 999999999.999999 = 499999.9999999995…: floor 499999 (a float says 500000)
  t.equal(decideSettlement(big, '499999999.999999', policy).credits, 499_999);
});
