// The x402 rail against the fake facilitator over real HTTP, with payloads signed by the x402 client
// libraries (SPEC §19): challenge additions, authorise (checks, verify, nonce claim), conclude
// (settle only when the charge policy would commit; withhold on a failed settlement).
import { PaymentRequiredV2Schema, PaymentPayloadV2Schema } from '@x402/core/schemas';
import t, { type Test } from 'tap';
import { MemoryStore } from '../../../src/store/memory.js';
import { X402_NOTE_META_KEY, type X402Authorisation } from '../../../src/payments/x402/rail.js';
import { startFakeFacilitator, type FakeFacilitator } from '../../helpers/x402-facilitator.js';
import { clonePayload, newPayer } from '../../helpers/x402-payer.js';
import { call, makeRail, metricValue, paidParams, paymentRequiredOf, plainChallenge, PRICE, randomAddress, TERMS } from './fixtures.js';

type Tap = Test;

async function setup(t: Tap, options: Parameters<typeof makeRail>[2] = {}) {
  const fake = await startFakeFacilitator();
  t.teardown(() => fake.close());
  const store = new MemoryStore();
  const fixture = makeRail(store, fake.url, options);
  t.teardown(() => fixture.facilitator.close());
  const challenge = fixture.rail.challengeAdditions(call(), plainChallenge());
  return { ...fixture, fake, store, challenge, paymentRequired: paymentRequiredOf(challenge) };
}

const verified = (t: Tap, answer: X402Authorisation) => {
  if (answer.kind !== 'verified') throw new Error(`expected verified, got ${JSON.stringify(answer)}`);
  return answer;
};
const refusal = (answer: X402Authorisation) => {
  if (answer.kind !== 'refuse') throw new Error('expected a refusal');
  return answer.result as { isError: boolean; content: { text: string }[]; _meta: Record<string, any>; structuredContent?: Record<string, any> };
};

// ── challenge additions ─────────────────────────────────────────────────────────────────────────────

t.test('a challenge keeps its human text first and unchanged, and carries PaymentRequired three ways', async (t) => {
  const { challenge } = await setup(t);
  const plain = plainChallenge();
  const content = challenge.content as { type: string; text: string }[];
  t.same(content[0], (plain.content as unknown[])[0], 'the §6.3 text is the first item, untouched');
  t.equal(content.length, 2);
  const fromText = JSON.parse(content[1]?.text ?? '');
  t.ok(PaymentRequiredV2Schema.safeParse(fromText).success, 'the second item is a valid x402 v2 PaymentRequired');
  t.same(fromText, {
    x402Version: 2,
    error: 'Payment required to call fetch_readable',
    resource: { url: 'http://127.0.0.1:8080/mcp#tool=fetch_readable', description: 'fetch_readable: 0.02 USDC per call (Research tools)', mimeType: 'application/json' },
    accepts: [{ scheme: 'exact', network: 'eip155:84532', amount: '20000', asset: TERMS.asset, payTo: TERMS.payTo, maxTimeoutSeconds: 120, extra: { name: 'USDC', version: '2' } }],
  });
  const meta = challenge._meta as Record<string, unknown>;
  t.same(meta['x402/payment-required'], fromText);
  t.same(meta['xyz.tollbooth/challenge'], (plain._meta as Record<string, unknown>)['xyz.tollbooth/challenge'], 'the Tollbooth challenge data is still there');
  t.same(challenge.structuredContent, { ...(plain.structuredContent as object), ...fromText }, 'structuredContent = the challenge data with the PaymentRequired fields merged in');
  t.equal(challenge.isError, true);
});

t.test('without structuredContent (tool has an outputSchema) none is added; modern results keep resultType', async (t) => {
  const { rail } = await setup(t);
  const modern = call({ shape: { era: 'modern', structuredContentAllowed: false } });
  const result = rail.challengeAdditions(modern, plainChallenge(modern));
  t.notOk('structuredContent' in result);
  t.equal(result.resultType, 'complete');
  t.ok((result._meta as Record<string, unknown>)['x402/payment-required']);
});

t.test('a SKU priced in another currency gets no x402 additions: the challenge is the same object', async (t) => {
  const { rail } = await setup(t);
  const euro = call({ price: { ...PRICE, currency: 'EUR' } });
  const plain = plainChallenge(euro);
  t.equal(rail.challengeAdditions(euro, plain), plain);
  t.equal(rail.offers(euro.price), false);
});

// ── the paid retry ──────────────────────────────────────────────────────────────────────────────────

t.test('an x402 client pays the challenge: verified, forwarded without the payment, settled, delivered', async (t) => {
  const { rail, fake, store, paymentRequired, metrics } = await setup(t);
  const payer = newPayer();
  const payload = await payer.pay(paymentRequired);
  t.ok(PaymentPayloadV2Schema.safeParse(payload).success, 'the library made a real v2 payload');
  const answer = verified(t, await rail.authorise(call(), paidParams(payload, { progressToken: 7 })));
  t.same(answer.forwardParams, { name: 'fetch_readable', arguments: { url: 'https://example.com/' }, _meta: { progressToken: 7 } }, 'the payment is stripped, the rest is untouched');
  t.equal(answer.claim.payer, payer.address.toLowerCase());
  t.same(answer.claim.logFields(), { rail: 'x402', payer: `${payer.address.toLowerCase().slice(0, 6)}..${payer.address.toLowerCase().slice(-4)}`, network: 'eip155:84532', amount: '20000' });
  t.equal(fake.calls.settle, 0, 'nothing is settled before the tool ran');

  const conclusion = await rail.conclude(answer.claim, { wouldCommit: true });
  if (conclusion.kind !== 'deliver') throw new Error(`expected deliver, got ${conclusion.kind}`);
  const settlement = conclusion.meta['x402/payment-response'];
  t.match(settlement, { success: true, network: 'eip155:84532', payer: payer.address });
  t.match(settlement.transaction, /^0x[0-9a-f]{64}$/);
  t.same(fake.calls, { verify: 1, settle: 1, supported: 0 });
  t.match(await store.getPaymentNonce(answer.claim.key), { state: 'settled', transaction: settlement.transaction, sku: 'research', tool: 'fetch_readable', amount: '20000' });
  t.equal(await metricValue(metrics, 'verified'), 1);
  t.equal(await metricValue(metrics, 'settled'), 1);
  await t.rejects(rail.conclude(answer.claim, { wouldCommit: true }), { code: 'TB_ERR_INTERNAL' }, 'a claim is concluded once');
  t.equal(fake.calls.settle, 1);
});

t.test('a replayed payload is refused by the nonce claim, before and after settlement', async (t) => {
  const { rail, fake, paymentRequired, metrics } = await setup(t);
  const payload = await newPayer().pay(paymentRequired);
  const first = verified(t, await rail.authorise(call(), paidParams(payload)));
  const replay = refusal(await rail.authorise(call(), paidParams(payload)));
  t.equal(fake.calls.verify, 2, 'the facilitator still finds the unsettled payload valid: only the claim stops it');
  t.same(replay._meta['xyz.tollbooth/refusal'], { reason: 'payment_invalid', invalidReason: 'invalid_exact_evm_nonce_already_used' });
  t.match(replay.content[0]?.text, /already used/);
  t.ok(replay._meta['x402/payment-required'], 'the refusal says what a new payment must meet');
  t.equal(replay.structuredContent?.x402Version, 2);
  await rail.conclude(first.claim, { wouldCommit: true });
  const late = refusal(await rail.authorise(call(), paidParams(payload)));
  t.equal(late._meta['xyz.tollbooth/refusal'].reason, 'payment_invalid');
  t.equal(fake.calls.settle, 1);
  t.equal(await metricValue(metrics, 'replayed'), 1);
  t.equal(await metricValue(metrics, 'invalid'), 1, 'after settlement the facilitator itself refuses the used nonce');
});

t.test('the same authorization in other letter cases is the same claim', async (t) => {
  const { rail, paymentRequired } = await setup(t);
  const payload = await newPayer().pay(paymentRequired);
  verified(t, await rail.authorise(call(), paidParams(payload)));
  const shouted = clonePayload(payload);
  shouted.payload.authorization.nonce = `0x${(shouted.payload.authorization.nonce as string).slice(2).toUpperCase()}`;
  shouted.payload.authorization.from = (shouted.payload.authorization.from as string).toLowerCase();
  const replay = refusal(await rail.authorise(call(), paidParams(shouted)));
  t.equal(replay._meta['xyz.tollbooth/refusal'].invalidReason, 'invalid_exact_evm_nonce_already_used', 'the signature still verifies, the claim catches it');
});

t.test('50 concurrent retries with one payload: exactly one is verified', async (t) => {
  const { rail, paymentRequired } = await setup(t);
  const payload = await newPayer().pay(paymentRequired);
  const answers = await Promise.all(Array.from({ length: 50 }, () => rail.authorise(call(), paidParams(payload))));
  t.equal(answers.filter((a) => a.kind === 'verified').length, 1);
  t.equal(answers.filter((a) => a.kind === 'refuse' && a.reason === 'payment_invalid').length, 49);
});

t.test('a tampered amount or payee is refused before anything would be forwarded or settled', async (t) => {
  const { rail, fake, paymentRequired } = await setup(t);
  const payer = newPayer();
  const accepts = paymentRequired.accepts[0] as (typeof paymentRequired.accepts)[number];
  const reasonOf = async (payload: unknown) => refusal(await rail.authorise(call(), paidParams(payload)))._meta['xyz.tollbooth/refusal'].invalidReason;

  // Signed for less, then rewritten to claim the full price: only the signature can tell.
  const cheap = clonePayload(await payer.pay({ ...paymentRequired, accepts: [{ ...accepts, amount: '1' }] }));
  cheap.accepted.amount = '20000';
  cheap.payload.authorization.value = '20000';
  t.equal(await reasonOf(cheap), 'invalid_exact_evm_signature');

  // Signed to pay someone else, then rewritten to look like a payment to us.
  const elsewhere = clonePayload(await payer.pay({ ...paymentRequired, accepts: [{ ...accepts, payTo: randomAddress() }] }));
  elsewhere.accepted.payTo = TERMS.payTo;
  elsewhere.payload.authorization.to = TERMS.payTo;
  t.equal(await reasonOf(elsewhere), 'invalid_exact_evm_signature');

  // Honest payloads for the wrong amount or payee never reach the facilitator.
  const before = fake.calls.verify;
  t.equal(await reasonOf(await payer.pay({ ...paymentRequired, accepts: [{ ...accepts, amount: '19999' }] })), 'invalid_payment_requirements');
  t.equal(await reasonOf(await payer.pay({ ...paymentRequired, accepts: [{ ...accepts, payTo: randomAddress() }] })), 'invalid_payment_requirements');
  const valueOnly = clonePayload(await payer.pay(paymentRequired));
  valueOnly.payload.authorization.value = '1';
  t.equal(await reasonOf(valueOnly), 'invalid_exact_evm_payload_authorization_value_mismatch');
  const payeeOnly = clonePayload(await payer.pay(paymentRequired));
  payeeOnly.payload.authorization.to = randomAddress();
  t.equal(await reasonOf(payeeOnly), 'invalid_exact_evm_recipient_mismatch');
  t.equal(fake.calls.verify, before, 'refused locally');
  t.equal(fake.calls.settle, 0);
});

t.test('the facilitator’s invalidReason reaches the agent; an unsafe one is replaced', async (t) => {
  const { rail, fake, paymentRequired } = await setup(t);
  const payload = await newPayer().pay(paymentRequired);
  fake.failVerify({ mode: 'invalid', reason: 'invalid_exact_evm_insufficient_balance' }, 1);
  t.equal(refusal(await rail.authorise(call(), paidParams(payload)))._meta['xyz.tollbooth/refusal'].invalidReason, 'invalid_exact_evm_insufficient_balance');
  fake.failVerify({ mode: 'invalid', reason: 'see <script>alert(1)</script> at http://x' }, 1);
  t.equal(refusal(await rail.authorise(call(), paidParams(payload)))._meta['xyz.tollbooth/refusal'].invalidReason, 'unexpected_facilitator_reason');
  t.equal(verified(t, await rail.authorise(call(), paidParams(payload))).kind, 'verified', 'a refused payload was never claimed');
});

t.test('an authorization valid for longer than the requirements allow is refused', async (t) => {
  const { rail, paymentRequired } = await setup(t);
  const accepts = paymentRequired.accepts[0] as (typeof paymentRequired.accepts)[number];
  const long = await newPayer().pay({ ...paymentRequired, accepts: [{ ...accepts, maxTimeoutSeconds: 86_400 }] });
  const patched = clonePayload(long);
  patched.accepted.maxTimeoutSeconds = 120;
  t.equal(refusal(await rail.authorise(call(), paidParams(patched)))._meta['xyz.tollbooth/refusal'].invalidReason, 'authorization_window_too_long');
});

t.test('a facilitator that cannot be reached refuses payments_unavailable and claims nothing', async (t) => {
  const { rail, fake, paymentRequired, store, metrics } = await setup(t, { verifyDeadlineMs: 2_000, baseDelayMs: 10 });
  const payload = await newPayer().pay(paymentRequired);
  fake.failVerify({ mode: 'http', status: 503 });
  const answer = await rail.authorise(call(), paidParams(payload));
  t.equal(answer.kind === 'refuse' && answer.reason, 'payments_unavailable');
  t.match(refusal(answer).content[0]?.text, /x402 payment was not taken/);
  t.equal(fake.calls.verify, 3, 'verify was retried (it has no effect)');
  t.equal(await metricValue(metrics, 'unavailable'), 1);
  fake.failVerify(null);
  const key = verified(t, await rail.authorise(call(), paidParams(payload))).claim.key;
  t.match(await store.getPaymentNonce(key), { state: 'claimed' });
});

t.test('a payment on a SKU that is not offered x402 is refused, not verified', async (t) => {
  const { rail, fake, paymentRequired } = await setup(t);
  const payload = await newPayer().pay(paymentRequired);
  const euro = call({ price: { ...PRICE, currency: 'EUR' } });
  const result = refusal(await rail.authorise(euro, paidParams(payload)));
  t.equal(result._meta['xyz.tollbooth/refusal'].invalidReason, 'unsupported_asset');
  t.notOk(result._meta['x402/payment-required'], 'nothing to offer');
  t.equal(fake.calls.verify, 0);
});

// ── conclude ────────────────────────────────────────────────────────────────────────────────────────

t.test('a result the charge policy would not commit is not settled, and says so', async (t) => {
  const { rail, fake, store, paymentRequired, metrics } = await setup(t);
  const payload = await newPayer().pay(paymentRequired);
  const { claim } = verified(t, await rail.authorise(call(), paidParams(payload)));
  const conclusion = await rail.conclude(claim, { wouldCommit: false, reason: 'tool_error' });
  t.same(conclusion, { kind: 'release-no-settle', meta: { [X402_NOTE_META_KEY]: { settled: false, reason: 'tool_error' } } });
  t.equal(fake.calls.settle, 0, 'the payer keeps the money');
  t.match(await store.getPaymentNonce(claim.key), { state: 'not_settled' });
  t.equal(refusal(await rail.authorise(call(), paidParams(payload)))._meta['xyz.tollbooth/refusal'].invalidReason, 'invalid_exact_evm_nonce_already_used', 'the authorization is spent for this gateway all the same');
  t.equal(await metricValue(metrics, 'not_settled'), 1);
});

t.test('a settlement the facilitator refuses withholds the result', async (t) => {
  const { rail, fake, store, paymentRequired, metrics } = await setup(t);
  const { claim } = verified(t, await rail.authorise(call(), paidParams(await newPayer().pay(paymentRequired))));
  fake.failSettle({ mode: 'refuse', reason: 'invalid_exact_evm_insufficient_balance' });
  const conclusion = await rail.conclude(claim, { wouldCommit: true });
  if (conclusion.kind !== 'withhold') throw new Error(`expected withhold, got ${conclusion.kind}`);
  const result = conclusion.result as { isError: boolean; content: { text: string }[]; _meta: Record<string, any> };
  t.equal(result.isError, true);
  t.same(result._meta['xyz.tollbooth/refusal'], { reason: 'payment_failed', errorReason: 'invalid_exact_evm_insufficient_balance' });
  t.match(result._meta['x402/payment-response'], { success: false, errorReason: 'invalid_exact_evm_insufficient_balance' });
  t.ok(result._meta['x402/payment-required'], 'an x402 client can pay again');
  t.match(result.content[0]?.text, /result is withheld/);
  t.equal(fake.calls.settle, 1);
  t.match(await store.getPaymentNonce(claim.key), { state: 'settle_failed' });
  t.equal(await metricValue(metrics, 'settle_failed'), 1);
});

for (const failure of [{ mode: 'http', status: 500 }, { mode: 'reset' }, { mode: 'hang' }] as const) {
  t.test(`a settle answered with ${failure.mode} is never retried: outcome unknown, result withheld, operator told`, async (t) => {
    const { rail, fake, paymentRequired, log } = await setup(t, { settleDeadlineMs: 1_500 });
    const { claim } = verified(t, await rail.authorise(call(), paidParams(await newPayer().pay(paymentRequired))));
    fake.failSettle(failure);
    const conclusion = await rail.conclude(claim, { wouldCommit: true });
    t.equal(conclusion.kind, 'withhold');
    t.match(conclusion.kind === 'withhold' && (conclusion.result.content as { text: string }[])[0]?.text, /could not be confirmed/);
    t.equal(fake.calls.settle, 1, 'settle is never blindly retried');
    const warning = log.entries().find((entry) => entry.evt === 'x402_settle_unknown');
    t.match(warning, { level: 'warn', nonce: claim.key.nonce, payer: claim.payer, amount: '20000' });
  });
}

t.test('a settle that never reached the facilitator (connection refused) is retried and then withheld', async (t) => {
  const fake = await startFakeFacilitator();
  await fake.close(); // nothing listens on its port any more
  const store = new MemoryStore();
  const live = await startFakeFacilitator();
  t.teardown(() => live.close());
  const verifier = makeRail(store, live.url);
  t.teardown(() => verifier.facilitator.close());
  const { claim } = verified(t, await verifier.rail.authorise(call(), paidParams(await newPayer().pay(paymentRequiredOf(verifier.rail.challengeAdditions(call(), plainChallenge()))))));
  const dead = makeRail(store, fake.url, { baseDelayMs: 10 });
  t.teardown(() => dead.facilitator.close());
  // The claim moves to the rail whose facilitator is down (same store, same terms).
  const conclusion = await dead.rail.conclude(claim, { wouldCommit: true });
  t.equal(conclusion.kind, 'withhold');
  t.match(conclusion.kind === 'withhold' && (conclusion.result.content as { text: string }[])[0]?.text, /payment was not taken/);
  const attempts = (await dead.metrics.providerRequests.get()).values.filter((v) => v.labels.op === 'x402_settle' && v.labels.status === 'network').reduce((sum, v) => sum + v.value, 0);
  t.equal(attempts, 3, 'a connection that was never made is safe to try again');
  t.notOk(dead.log.entries().some((entry) => entry.evt === 'x402_settle_unknown'), 'not an unknown outcome');
});

// ── secrets ─────────────────────────────────────────────────────────────────────────────────────────

t.test('no payload or signature reaches a log line, a result, an error or a metric', async (t) => {
  const { rail, fake, paymentRequired, log, metrics } = await setup(t, { settleDeadlineMs: 1_000, verifyDeadlineMs: 1_000, baseDelayMs: 10 });
  const payer = newPayer();
  const seen: string[] = [];
  const signatures: string[] = [];
  const run = async (failVerify: Parameters<FakeFacilitator['failVerify']>[0], failSettle: Parameters<FakeFacilitator['failSettle']>[0], commit: boolean) => {
    const payload = await payer.pay(paymentRequired);
    signatures.push((payload.payload as { signature: string }).signature);
    fake.failVerify(failVerify);
    fake.failSettle(failSettle);
    const answer = await rail.authorise(call(), paidParams(payload));
    seen.push(JSON.stringify(answer.kind === 'refuse' ? answer.result : { forwardParams: answer.forwardParams, claim: answer.claim }));
    if (answer.kind === 'verified') {
      try {
        seen.push(JSON.stringify(await rail.conclude(answer.claim, commit ? { wouldCommit: true } : { wouldCommit: false, reason: 'tool_error' })));
      } catch (error) {
        seen.push(String(error), JSON.stringify(error));
      }
    }
  };
  await run(null, null, true);
  await run(null, null, false);
  await run({ mode: 'invalid', reason: 'invalid_exact_evm_signature' }, null, true);
  await run({ mode: 'http', status: 500, body: 'echo: anything' }, null, true);
  await run(null, { mode: 'refuse', reason: 'invalid_exact_evm_transaction_failed' }, true);
  await run(null, { mode: 'http', status: 502 }, true);
  await run(null, { mode: 'hang' }, true);
  const tampered = clonePayload(await payer.pay(paymentRequired));
  tampered.payload.authorization.value = '20000';
  signatures.push(tampered.payload.signature);
  fake.failVerify(null);
  seen.push(JSON.stringify(await rail.authorise(call(), paidParams(tampered))));
  const everything = [...log.lines, ...seen, await metrics.registry.metrics()].join('\n').toLowerCase();
  t.ok(log.lines.length >= 8, 'the runs were logged');
  for (const signature of signatures) t.notOk(everything.includes(signature.slice(2, 40).toLowerCase()), 'a signature is nowhere');
  t.notOk(everything.includes('"signature"'), 'no payload object is anywhere');
  t.notOk(everything.includes('x402/payment"'), 'no raw payment _meta');
});
