// Reading the payment of a retry (SPEC §19): where it is, stripping it before forwarding, and the
// local checks that need no facilitator.
import t from 'tap';
import { checkPayload, nonceKey, paymentIn, stripPayment, withoutPayments } from '../../../src/payments/x402/payload.js';
import { requirementsFor } from '../../../src/payments/x402/requirements.js';
import { clonePayload, newPayer } from '../../helpers/x402-payer.js';
import { call, TERMS } from './fixtures.js';
import { paymentRequiredFor } from '../../../src/payments/x402/requirements.js';

const requirements = requirementsFor(call(), TERMS);
const now = () => Math.floor(Date.now() / 1000);

t.test('the payment is params._meta["x402/payment"], nowhere else', async (t) => {
  t.equal(paymentIn({ _meta: { 'x402/payment': { a: 1 } } }) !== undefined, true);
  t.equal(paymentIn({ arguments: { 'x402/payment': {} } }), undefined);
  t.equal(paymentIn({ _meta: 'x' }), undefined);
  t.equal(paymentIn(null), undefined);
});

t.test('stripping keeps everything else and drops a _meta left empty', async (t) => {
  t.same(stripPayment({ name: 'x', arguments: { a: 1 }, _meta: { 'x402/payment': {}, progressToken: 1 } }), { name: 'x', arguments: { a: 1 }, _meta: { progressToken: 1 } });
  t.same(stripPayment({ name: 'x', _meta: { 'x402/payment': {} } }), { name: 'x' });
  const untouched = { name: 'x', _meta: { progressToken: 1 } };
  t.equal(stripPayment(untouched), untouched);
});

t.test('a request body loses every payment, in each message of a batch, and is the same value when none carries one', async (t) => {
  const paid = { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'echo', arguments: {}, _meta: { 'x402/payment': { x: 1 }, progressToken: 2 } } };
  const free = { jsonrpc: '2.0', id: 2, method: 'ping' };
  t.same(withoutPayments(paid), { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'echo', arguments: {}, _meta: { progressToken: 2 } } });
  t.same(withoutPayments([free, paid]), [free, { ...paid, params: { name: 'echo', arguments: {}, _meta: { progressToken: 2 } } }]);
  t.equal(withoutPayments(free), free);
  const batch = [free, { jsonrpc: '2.0', method: 'notifications/initialized' }];
  t.equal(withoutPayments(batch), batch);
  t.equal((paid.params._meta as Record<string, unknown>)['x402/payment'] !== undefined, true, 'the original is not changed');
});

t.test('a library-signed payload passes; each broken field is named with an x402 reason', async (t) => {
  const payload = await newPayer().pay(paymentRequiredFor(call(), TERMS, 'x'));
  const good = checkPayload(payload, requirements, now(), 60);
  t.equal(good.ok, true);
  if (good.ok) {
    t.equal(good.authorization.payer, (payload.payload as any).authorization.from.toLowerCase());
    t.same(nonceKey(requirements, good.authorization), { network: 'eip155:84532', asset: TERMS.asset.toLowerCase(), payer: good.authorization.payer, nonce: good.authorization.nonce });
  }
  const reason = (mutate: (p: ReturnType<typeof clonePayload>) => void): string => {
    const copy = clonePayload(payload);
    mutate(copy);
    const checked = checkPayload(copy, requirements, now(), 60);
    return checked.ok ? 'ok' : checked.reason;
  };
  t.equal(reason((p) => ((p as any).x402Version = 1)), 'invalid_x402_version');
  t.equal(reason((p) => ((p as any).accepted = undefined)), 'invalid_payload');
  t.equal(reason((p) => (p.accepted.scheme = 'upto')), 'unsupported_scheme');
  t.equal(reason((p) => (p.accepted.network = 'eip155:8453')), 'invalid_network');
  t.equal(reason((p) => (p.accepted.asset = '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913')), 'invalid_payment_requirements');
  t.equal(reason((p) => (p.accepted.amount = '1')), 'invalid_payment_requirements');
  t.equal(reason((p) => (p.payload.signature = 'nope')), 'invalid_payload');
  t.equal(reason((p) => (p.payload.authorization.nonce = '0x1234')), 'invalid_payload');
  t.equal(reason((p) => (p.payload.authorization.value = '020000')), 'invalid_payload');
  t.equal(reason((p) => (p.payload.authorization.validBefore = '9'.repeat(30))), 'invalid_payload');
  t.equal(reason((p) => (p.payload.authorization.to = '0x0000000000000000000000000000000000000001')), 'invalid_exact_evm_recipient_mismatch');
  t.equal(reason((p) => (p.payload.authorization.value = '20001')), 'invalid_exact_evm_payload_authorization_value_mismatch');
  t.equal(reason((p) => (p.payload.authorization.validBefore = String(now() + 120 + 61))), 'authorization_window_too_long');
  t.equal(reason((p) => (p.accepted.payTo = TERMS.payTo.toLowerCase())), 'ok', 'addresses compare without letter case');
  t.equal(checkPayload('not an object', requirements, now(), 60).ok, false);
});
