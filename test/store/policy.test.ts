// store/policy.ts: the rules both stores apply, checked once here (the conformance suite checks that
// each store applies them), and the Lua scripts carrying the same numbers.
import t from 'tap';
import { GatewayError } from '../../src/errors.js';
import { SCRIPTS } from '../../src/store/lua/index.js';
import {
  HANDLE_GRACE_MS,
  HANDLE_TTL_FLOOR_MS,
  NEVER_REFILLS_RETRY_MS,
  OPENING_GRACE_MS,
  PAYMENT_NONCE_MIN_TTL_MS,
  PENDING_REUSE_MARGIN_MS,
  RETENTION_MS,
  chargeRecordEnd,
  chargeShareable,
  checkGrant,
  checkHandleTtl,
  devLinkEnd,
  newBucket,
  newChargeRecord,
  newPaymentNonceRecord,
  takeToken,
} from '../../src/store/policy.js';

const NOW = 1_780_000_000_000;

const codeOf = (fn: () => void): string | null => {
  try {
    fn();
    return null;
  } catch (error) {
    return error instanceof GatewayError ? error.code : 'not a GatewayError';
  }
};

t.test('the TTL floor and the grant check refuse with their codes', async (t) => {
  t.equal(codeOf(() => checkHandleTtl(HANDLE_TTL_FLOOR_MS)), null, 'the floor itself is allowed');
  t.equal(codeOf(() => checkHandleTtl(HANDLE_TTL_FLOOR_MS - 1)), 'TB_ERR_STORE_TTL_FLOOR');
  t.equal(codeOf(() => checkHandleTtl(Number.NaN)), 'TB_ERR_STORE_TTL_FLOOR', 'NaN is not a TTL');
  t.equal(codeOf(() => checkGrant(1)), null);
  for (const credits of [0, -1, 1.5, Number.NaN, 2 ** 53]) t.equal(codeOf(() => checkGrant(credits)), 'TB_ERR_INVALID_PARAMS', String(credits));
});

t.test('a new charge is opening, linkless, and due for its first poll after the delay', async (t) => {
  const snapshot = { label: '10 searches', amount: '5.00', currency: 'USD', credits: 10, tool: 'search' };
  const charge = newChargeRecord({ handleHash: 'h', sku: 'search', nonce: 'n1', snapshot, now: NOW, ttlMs: 600_000, firstPollDelayMs: 3_000 });
  t.same(charge, {
    nonce: 'n1',
    handleHash: 'h',
    sku: 'search',
    ...snapshot,
    status: 'opening',
    providerRef: null,
    checkoutUrl: null,
    openedAt: NOW,
    expiresAt: NOW + 600_000,
    lastPolledAt: 0,
    nextPollAt: NOW + 3_000,
    pollCount: 0,
    grantedCredits: 0,
    receivedAmount: null,
  });
});

t.test('which charge beginCharge shares', async (t) => {
  t.ok(chargeShareable({ status: 'opening', openedAt: NOW - OPENING_GRACE_MS + 1, expiresAt: NOW + 600_000 }, NOW), 'a young opening charge');
  t.notOk(chargeShareable({ status: 'opening', openedAt: NOW - OPENING_GRACE_MS, expiresAt: NOW + 600_000 }, NOW), 'an opening charge whose opener took too long');
  t.ok(chargeShareable({ status: 'pending', openedAt: NOW - 60_000, expiresAt: NOW + PENDING_REUSE_MARGIN_MS + 1 }, NOW), 'a pending link with time left');
  t.notOk(chargeShareable({ status: 'pending', openedAt: NOW - 60_000, expiresAt: NOW + PENDING_REUSE_MARGIN_MS }, NOW), 'a pending link about to end');
  t.notOk(chargeShareable({ status: 'settled', openedAt: NOW, expiresAt: NOW + 600_000 }, NOW), 'a settled charge');
});

t.test('how long records live', async (t) => {
  t.equal(chargeRecordEnd({ status: 'opening', expiresAt: NOW, expiredAt: undefined }), NOW, 'an opening charge: its link would have expired');
  t.equal(chargeRecordEnd({ status: 'pending', expiresAt: NOW, expiredAt: undefined }), NOW + RETENTION_MS);
  t.equal(chargeRecordEnd({ status: 'expired', expiresAt: NOW, expiredAt: NOW + 5 }), NOW + 5 + RETENTION_MS, 'marked expired later: from then');
  t.equal(devLinkEnd({ expiresAt: NOW }), NOW + RETENTION_MS, 'a dev link lives as long as its charge');
});

t.test('a claimed authorization: lower-case key, kept at least the minimum', async (t) => {
  const claim = { network: 'EIP155:84532', asset: '0xABC', payer: '0xDEF', nonce: '0xAA', expiresAt: NOW + 5_000, claimedAt: NOW, sku: 's', tool: 'search', amount: '10000' };
  const record = newPaymentNonceRecord(claim, NOW);
  t.same(record, { network: 'eip155:84532', asset: '0xabc', payer: '0xdef', nonce: '0xaa', expiresAt: NOW + PAYMENT_NONCE_MIN_TTL_MS, claimedAt: NOW, sku: 's', tool: 'search', amount: '10000', state: 'claimed', transaction: null, finishedAt: null });
  t.equal(newPaymentNonceRecord({ ...claim, expiresAt: NOW + 3_600_000 }, NOW).expiresAt, NOW + 3_600_000, 'a later window is kept');
});

t.test('the token bucket: burst, continuous refill, the wait, a bucket that never refills', async (t) => {
  const params = { ratePerSecond: 2, burst: 3 };
  const bucket = newBucket(params.burst, NOW);
  t.same([takeToken(bucket, params, NOW), takeToken(bucket, params, NOW), takeToken(bucket, params, NOW)], [0, 0, 0], 'the burst');
  t.equal(takeToken(bucket, params, NOW), 500, 'empty: one token is 500 ms away at 2/s');
  t.equal(takeToken(bucket, params, NOW + 250), 250, 'half a token refilled: 250 ms to go');
  t.equal(takeToken(bucket, params, NOW + 500), 0, 'refilled');
  t.equal(bucket.fullAt, NOW + 500 + 1_500, 'full again once 3 tokens came back');
  const never = newBucket(1, NOW);
  t.equal(takeToken(never, { ratePerSecond: 0, burst: 1 }, NOW), 0);
  t.equal(takeToken(never, { ratePerSecond: 0, burst: 1 }, NOW + 10_000), NEVER_REFILLS_RETRY_MS);
  t.equal(never.fullAt, Number.POSITIVE_INFINITY);
});

t.test('the Lua scripts carry the policy numbers', async (t) => {
  for (const [name, source] of Object.entries(SCRIPTS)) {
    t.ok(source.includes(`local RETENTION_MS = ${RETENTION_MS}\n`), `${name}: RETENTION_MS`);
    t.ok(source.includes(`local HANDLE_GRACE_MS = ${HANDLE_GRACE_MS}\n`), `${name}: HANDLE_GRACE_MS`);
    t.ok(source.includes(`return ${NEVER_REFILLS_RETRY_MS}, left`), `${name}: the never-refilling bucket's wait`);
    t.notMatch(source, /\$\{/, `${name}: no template left unfilled`);
  }
});
