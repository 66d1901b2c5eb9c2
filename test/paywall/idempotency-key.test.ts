// Where an idempotency key is read from and what is refused (SPEC §24): the header, the _meta key,
// x402's payment-identifier; 1–255 printable ASCII; a refusal never echoes the key.
import t, { type Test } from 'tap';
import { GatewayError } from '../../src/errors.js';
import { IDEMPOTENCY_META_KEY, idempotencyKeyOf, stripIdempotencyKey } from '../../src/paywall/idempotency-key.js';

const meta = (value: unknown) => ({ name: 't', arguments: {}, _meta: { [IDEMPOTENCY_META_KEY]: value } });
const payment = (id: unknown) => ({ name: 't', _meta: { 'x402/payment': { x402Version: 2, extensions: { 'payment-identifier': { info: { id } } } } } });

function refused(t: Test, run: () => unknown, secret?: string): void {
  try {
    run();
    t.fail('expected a refusal');
  } catch (error) {
    t.ok(error instanceof GatewayError && error.code === 'TB_ERR_IDEMPOTENCY_KEY_INVALID', (error as Error).message);
    if (secret) t.notOk((error as Error).message.includes(secret), 'the key is not echoed');
  }
}

t.test('the header, the _meta key, or the x402 payment-identifier; none → null', async (t) => {
  t.equal(idempotencyKeyOf('order-42', {}), 'order-42');
  t.equal(idempotencyKeyOf(undefined, meta('order-43')), 'order-43');
  t.equal(idempotencyKeyOf('same', meta('same')), 'same', 'both, equal');
  t.equal(idempotencyKeyOf(undefined, payment('pay_7d5d747be160e280504c099d984bcfe0')), 'pay_7d5d747be160e280504c099d984bcfe0');
  t.equal(idempotencyKeyOf('explicit', payment('pay_x')), 'explicit', 'an explicit key wins over the payment identifier');
  t.equal(idempotencyKeyOf(undefined, { name: 't' }), null);
  t.equal(idempotencyKeyOf(undefined, undefined), null);
  t.equal(idempotencyKeyOf(undefined, payment(undefined)), null, 'a payment without an identifier');
  t.equal(idempotencyKeyOf('~'.repeat(255), {}), '~'.repeat(255), '255 characters');
  t.equal(idempotencyKeyOf('a b', {}), 'a b', 'a space is printable');
});

t.test('invalid keys are refused TB_ERR_IDEMPOTENCY_KEY_INVALID, without echoing them', async (t) => {
  refused(t, () => idempotencyKeyOf('', {}));
  refused(t, () => idempotencyKeyOf('k'.repeat(256), {}));
  refused(t, () => idempotencyKeyOf('secret-caf\u00e9', {}), 'secret-caf');
  refused(t, () => idempotencyKeyOf('tab\there', {}));
  refused(t, () => idempotencyKeyOf(undefined, meta(42)));
  refused(t, () => idempotencyKeyOf(undefined, meta(null)));
  refused(t, () => idempotencyKeyOf(undefined, meta('')));
  refused(t, () => idempotencyKeyOf('alpha-key', meta('beta-key')), 'alpha-key');
  refused(t, () => idempotencyKeyOf(undefined, payment('bad\nid')));
  t.equal(new GatewayError('TB_ERR_IDEMPOTENCY_KEY_INVALID', 'x').status, 400);
});

t.test('stripIdempotencyKey removes only the key, and an emptied _meta', async (t) => {
  t.same(stripIdempotencyKey(meta('k')), { name: 't', arguments: {} });
  t.same(stripIdempotencyKey({ name: 't', _meta: { [IDEMPOTENCY_META_KEY]: 'k', progressToken: 1 } }), { name: 't', _meta: { progressToken: 1 } });
  const untouched = { name: 't', _meta: { progressToken: 1 } };
  t.equal(stripIdempotencyKey(untouched), untouched);
});
