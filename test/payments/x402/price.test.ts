// SPEC §19: one call costs cost × amount / credits (or cost × x402Price) in atomic units, rounded up.
import t from 'tap';
import { atomicPrice, formatAtomic } from '../../../src/payments/x402/price.js';

t.test('5.00 for 250 credits is 0.02 per credit: 20000 atomic USDC, times the cost', async (t) => {
  t.equal(atomicPrice({ cost: 1, amount: '5.00', credits: 250 }, 6), '20000');
  t.equal(atomicPrice({ cost: 3, amount: '5', credits: 250 }, 6), '60000');
  t.equal(formatAtomic('20000', 6), '0.02');
});

t.test('a price that does not divide evenly is rounded up, never down', async (t) => {
  t.equal(atomicPrice({ cost: 1, amount: '1.00', credits: 3 }, 6), '333334');
  t.equal(atomicPrice({ cost: 3, amount: '1.00', credits: 3 }, 6), '1000000', 'exact when it divides');
  t.equal(atomicPrice({ cost: 1, amount: '0.000001', credits: 1000 }, 6), '1', 'at least one atomic unit');
  t.equal(atomicPrice({ cost: 1, amount: '5.00', credits: 7 }, 0), '1');
});

t.test('x402Price per credit replaces amount / credits', async (t) => {
  t.equal(atomicPrice({ cost: 2, amount: '5.00', credits: 250, x402Price: '0.03' }, 6), '60000');
  t.equal(atomicPrice({ cost: 1, amount: '5.00', credits: 250, x402Price: '0.0000001' }, 6), '1');
  t.equal(atomicPrice({ cost: 1, amount: '5.00', credits: 250, x402Price: '0.123456789012345678' }, 18), '123456789012345678', '18-decimal tokens are exact');
});

t.test('no float ever: a price with many digits stays exact', async (t) => {
  t.equal(atomicPrice({ cost: 1, amount: '0.3', credits: 1 }, 18), '300000000000000000');
  t.equal(atomicPrice({ cost: 1_000_000, amount: '999999999.999999', credits: 1 }, 6), '999999999999999000000');
});

t.test('nonsense is refused', async (t) => {
  t.throws(() => atomicPrice({ cost: 0, amount: '5.00', credits: 250 }, 6));
  t.throws(() => atomicPrice({ cost: 1, amount: '5.00', credits: 0 }, 6));
  t.throws(() => atomicPrice({ cost: 1, amount: '0', credits: 1 }, 6));
  t.throws(() => atomicPrice({ cost: 1, amount: '1e3', credits: 1 }, 6));
});
