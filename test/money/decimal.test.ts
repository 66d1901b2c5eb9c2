// Decimal amounts compared by value with BigInt: providers echo "5.00" back as "5".
import t from 'tap';
import fc from 'fast-check';
import { compareDecimal, equalAmounts, formatDecimal, isDecimalString, parseDecimal } from '../../src/money/decimal.js';

t.test('parseDecimal keeps every digit as integer units and a scale', async (t) => {
  t.same(parseDecimal('5.00'), { units: 500n, scale: 2 });
  t.same(parseDecimal('5'), { units: 5n, scale: 0 });
  t.same(parseDecimal('0.000001'), { units: 1n, scale: 6 });
  t.same(parseDecimal('-1.5'), { units: -15n, scale: 1 });
  t.same(parseDecimal('123456789012345678901234567890.123456'), { units: 123456789012345678901234567890123456n, scale: 6 });
});

t.test('parseDecimal refuses anything but plain decimal notation', async (t) => {
  for (const bad of ['', ' 5', '5 ', '5.', '.5', '+5', '1e3', '5,00', '0x10', 'NaN', 'Infinity', '5.0.0', '٥', '9'.repeat(100)]) {
    t.throws(() => parseDecimal(bad), RangeError, JSON.stringify(bad));
    t.notOk(isDecimalString(bad), JSON.stringify(bad));
  }
  t.notOk(isDecimalString(5), 'a number is not a decimal string');
});

t.test('amounts that differ only in trailing zeros are equal', async (t) => {
  t.ok(equalAmounts('5', '5.00'));
  t.ok(equalAmounts('5.10', '5.1'));
  t.ok(equalAmounts('0', '0.000'));
  t.ok(equalAmounts('-0', '0'));
  t.notOk(equalAmounts('5', '5.000001'));
});

t.test('compareDecimal orders by value across scales', async (t) => {
  t.equal(compareDecimal('4.975', '5'), -1);
  t.equal(compareDecimal('5.001', '5'), 1);
  t.equal(compareDecimal('10', '9.99999'), 1);
  t.equal(compareDecimal('-1', '0.5'), -1);
  t.equal(compareDecimal(parseDecimal('5.00'), '5'), 0, 'accepts parsed values');
});

t.test('no float rounding: 0.1 + 0.2 style values compare exactly', async (t) => {
  t.equal(compareDecimal('0.30000000000000004', '0.3'), 1);
  t.equal(compareDecimal('9007199254740993', '9007199254740992'), 1, 'beyond 2^53');
});

t.test('formatDecimal gives the shortest form, the way Moove normalises amounts', async (t) => {
  t.equal(formatDecimal('5.00'), '5');
  t.equal(formatDecimal('4.50'), '4.5');
  t.equal(formatDecimal('0.010'), '0.01');
  t.equal(formatDecimal('-0.0'), '0');
  t.equal(formatDecimal('100'), '100');
  t.equal(formatDecimal({ units: -5n, scale: 3 }), '-0.005');
});

t.test('property: formatting keeps the value and compareDecimal agrees with integer order', async (t) => {
  const amount = fc.tuple(fc.bigInt({ min: -(10n ** 20n), max: 10n ** 20n }), fc.integer({ min: 0, max: 8 }), fc.integer({ min: 0, max: 4 }));
  const render = ([units, scale, pad]: [bigint, number, number]): string => {
    const negative = units < 0n;
    const digits = (negative ? -units : units).toString().padStart(scale + 1, '0');
    const text = scale === 0 ? digits : `${digits.slice(0, -scale)}.${digits.slice(-scale)}`;
    return `${negative ? '-' : ''}${text}${pad > 0 ? `${scale === 0 ? '.' : ''}${'0'.repeat(pad)}` : ''}`;
  };
  fc.assert(
    fc.property(amount, amount, (a, b) => {
      const x = render(a);
      const y = render(b);
      if (!equalAmounts(formatDecimal(x), x)) return false;
      const scaled = (v: [bigint, number, number]): bigint => v[0] * 10n ** BigInt(8 - v[1]);
      const expected = scaled(a) < scaled(b) ? -1 : scaled(a) > scaled(b) ? 1 : 0;
      return compareDecimal(x, y) === expected;
    }),
  );
  t.pass('the property held for every generated pair');
});
