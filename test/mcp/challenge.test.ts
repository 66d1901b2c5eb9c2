// The gateway's own answers to a priced call (SPEC §6.3, §6.4, §5.4): exact challenge text, _meta
// fields, the structuredContent rule and resultType for the modern era.
import t from 'tap';
import { CHALLENGE_META_KEY, challengeResult, challengeText, REFUSAL_META_KEY, refusalResult, type ChallengeInput } from '../../src/mcp/challenge.js';

const input: ChallengeInput = {
  reason: 'payment_required',
  tool: 'fetch_readable',
  price: { sku: 'research', cost: 1, amount: '5.00', currency: 'USDC', credits: 250, label: 'Research tools', charge: 'success' },
  checkoutUrl: 'http://127.0.0.1:8080/tollbooth/checkout/abc',
  expiresAt: Date.UTC(2030, 0, 2, 3, 4, 5, 678),
  handle: 'tb_s_AAAAAAAAAAAAAAAAAAAAAA',
  argumentName: 'tollboothToken',
};

const legacyNoSchema = { era: 'legacy' as const, structuredContentAllowed: true };
const legacySchema = { era: 'legacy' as const, structuredContentAllowed: false };
const modern = { era: 'modern' as const, structuredContentAllowed: true };

t.test('the challenge text is exactly the §6.3 template', async (t) => {
  const expected = `PAYMENT_REQUIRED
Payment required: 5.00 USDC for Research tools — 250 credits.

NEXT STEP — show the user this link and ask them to pay:
http://127.0.0.1:8080/tollbooth/checkout/abc

AFTER the user says they have paid, retry:
  same tool, same arguments, plus tollboothToken="tb_s_AAAAAAAAAAAAAAAAAAAAAA"

Rules:
- Copy tollboothToken exactly. It is opaque; any edit invalidates it.
- Do NOT answer the user's question from your own knowledge instead.
- Do NOT stop and summarise. The task is not finished until you retry.
- This is not an error you should report and abandon.`;
  t.equal(challengeText(input), expected);
});

t.test('the challenge text uses the configured argument name', async (t) => {
  const text = challengeText({ ...input, argumentName: 'payToken' });
  t.match(text, /plus payToken="tb_s_/);
  t.match(text, /- Copy payToken exactly\./);
  t.notMatch(text, /tollboothToken/);
});

t.test('a challenge is a tool result with isError and one text block', async (t) => {
  const result = challengeResult(input, legacyNoSchema);
  t.equal(result.isError, true);
  t.same(result.content, [{ type: 'text', text: challengeText(input) }]);
  t.notOk('error' in result);
});

t.test('challenge _meta carries every field of §6.3', async (t) => {
  const result = challengeResult({ ...input, reason: 'credits_exhausted' }, legacySchema);
  t.same((result._meta as Record<string, unknown>)[CHALLENGE_META_KEY], {
    status: 'payment_required',
    reason: 'credits_exhausted',
    sku: 'research',
    label: 'Research tools',
    amount: '5.00',
    currency: 'USDC',
    credits: 250,
    checkoutUrl: 'http://127.0.0.1:8080/tollbooth/checkout/abc',
    expiresAt: '2030-01-02T03:04:05.678Z',
    retry: { tool: 'fetch_readable', argument: 'tollboothToken', value: 'tb_s_AAAAAAAAAAAAAAAAAAAAAA' },
  });
});

t.test('structuredContent mirrors _meta only when the tool declares no outputSchema', async (t) => {
  const allowed = challengeResult(input, legacyNoSchema);
  t.same(allowed.structuredContent, (allowed._meta as Record<string, unknown>)[CHALLENGE_META_KEY]);
  const forbidden = challengeResult(input, legacySchema);
  t.notOk('structuredContent' in forbidden);
});

t.test('modern results carry resultType "complete", legacy results do not', async (t) => {
  t.equal(challengeResult(input, modern).resultType, 'complete');
  t.notOk('resultType' in challengeResult(input, legacyNoSchema));
  t.equal(refusalResult('rate_limited', { era: 'modern', structuredContentAllowed: false }).resultType, 'complete');
});

t.test('a refusal carries its reason and retryAfterSeconds in _meta and one plain sentence', async (t) => {
  const result = refusalResult('rate_limited', legacySchema, { retryAfterSeconds: 3 });
  t.equal(result.isError, true);
  t.same((result._meta as Record<string, unknown>)[REFUSAL_META_KEY], { reason: 'rate_limited', retryAfterSeconds: 3 });
  const text = (result.content as { text: string }[])[0]!.text;
  t.match(text, /wait 3 seconds/);
  t.notOk('structuredContent' in result);
});

t.test('payments_unavailable says no credit was spent; without retryAfter the meta has only the reason', async (t) => {
  const result = refusalResult('payments_unavailable', legacyNoSchema);
  t.same((result._meta as Record<string, unknown>)[REFUSAL_META_KEY], { reason: 'payments_unavailable' });
  t.same(result.structuredContent, { reason: 'payments_unavailable' });
  t.match((result.content as { text: string }[])[0]!.text, /no credit was spent/);
});

t.test('deadline_exceeded says the credit was refunded', async (t) => {
  t.match((refusalResult('deadline_exceeded', legacySchema).content as { text: string }[])[0]!.text, /credit was refunded/);
});

t.test('x402 refusals (§6.4, §19): one plain sentence each, details beside the reason', async (t) => {
  const shape = { era: 'legacy' as const, structuredContentAllowed: true };
  const invalid = refusalResult('payment_invalid', shape, { details: { invalidReason: 'invalid_exact_evm_signature' } });
  t.same((invalid._meta as Record<string, unknown>)[REFUSAL_META_KEY], { reason: 'payment_invalid', invalidReason: 'invalid_exact_evm_signature' });
  t.same(invalid.structuredContent, { reason: 'payment_invalid', invalidReason: 'invalid_exact_evm_signature' });
  t.match((invalid.content as { text: string }[])[0]?.text, /^The x402 payment was not accepted, so the tool did not run and nothing was charged\./);
  const failed = refusalResult('payment_failed', shape);
  t.match((failed.content as { text: string }[])[0]?.text, /could not be settled, so the result is withheld/);
  t.same(refusalResult('payment_failed', shape, { details: { reason: 'spoofed' } })._meta, { [REFUSAL_META_KEY]: { reason: 'payment_failed' } }, 'details never replace the reason');
});
