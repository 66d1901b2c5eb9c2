// SPEC §19 end to end: the x402 rail wired into the request path, through a real gateway, with real MCP
// client sessions (SDK v1 and v2 clients), a real upstream that records what reached it, a fake
// facilitator over real HTTP that checks the EIP-712 signature, and payloads signed by the x402 client
// libraries with a throwaway key. Counts are exact: how often the tool ran, how often the facilitator
// settled.
import t, { type Test } from 'tap';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Client as ClientV2, StreamableHTTPClientTransport as TransportV2 } from '@modelcontextprotocol/client';
import type { PaymentPayload } from '@x402/core/types';
import { startDualEraUpstream, type DualEraUpstream } from '../helpers/dual-era-upstream.js';
import { startTestGateway, testConfig, fundedHandle, researchBalance, type TestGateway } from '../helpers/gateway.js';
import { startPaidUpstream, type PaidUpstream } from '../helpers/paid-upstream.js';
import { startFakeFacilitator, type FakeFacilitator } from '../helpers/x402-facilitator.js';
import { paymentMeta, paymentRequiredOf, payloadSecrets, withX402 } from '../helpers/x402-gateway.js';
import { clonePayload, newPayer } from '../helpers/x402-payer.js';

type Json = Record<string, any>;

const CHALLENGE = 'xyz.tollbooth/challenge';
const REFUSAL = 'xyz.tollbooth/refusal';
const RECEIPT = 'xyz.tollbooth/receipt';
const NOTE = 'xyz.tollbooth/x402';
const RESPONSE = 'x402/payment-response';

let upstream: PaidUpstream;
let dual: DualEraUpstream;
t.before(async () => {
  [upstream, dual] = await Promise.all([startPaidUpstream('stateless-json'), startDualEraUpstream()]);
});
t.teardown(async () => {
  await upstream.close();
  await dual.close();
});

interface Rig {
  gateway: TestGateway;
  fake: FakeFacilitator;
  client: Client;
}

async function rig(t: Test, options: { upstreamUrl?: string; limits?: Json } = {}): Promise<Rig> {
  const fake = await startFakeFacilitator();
  t.teardown(() => fake.close());
  const base = testConfig(options.upstreamUrl ?? upstream.url);
  const gateway = await startTestGateway(t, withX402({ ...base, ...(options.limits ? { limits: options.limits } : {}) }, fake.url));
  const client = new Client({ name: 'x402-e2e', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(gateway.url)));
  t.teardown(() => client.close());
  return { gateway, fake, client };
}

/** The unpaid call, then a payment signed for the PaymentRequired it carried. */
async function challengeAndPay(client: Client | ClientV2, name: string, args: Json): Promise<{ challenge: Json; payload: PaymentPayload }> {
  const challenge = (await client.callTool({ name, arguments: args })) as Json;
  const payload = await newPayer().pay(paymentRequiredOf(challenge));
  return { challenge, payload };
}

const callPaid = async (client: Client | ClientV2, name: string, args: Json, payload: PaymentPayload): Promise<Json> => (client.callTool({ name, arguments: args, _meta: paymentMeta(payload) }));

const callLines = (gateway: TestGateway) => gateway.logs().filter((line) => line.evt === 'call');

t.test('SDK v1 client: unpaid call offers both rails; paid by x402 the tool runs once and the facilitator settles once', async (t) => {
  const { gateway, fake, client } = await rig(t);
  await client.listTools();
  const args = { url: 'https://example.com/x402' };
  const { challenge, payload } = await challengeAndPay(client, 'fetch_readable', args);

  t.equal(challenge.isError, true);
  t.match(challenge.content[0].text, /^PAYMENT_REQUIRED\nPayment required: 5\.00 USDC for Research tools — 3 credits\.\n\nNEXT STEP — show the user this link/, 'the human checkout text comes first, unchanged');
  t.equal(challenge.content[0].text.includes('x402'), false, 'the first item says nothing of x402');
  const paymentRequired = paymentRequiredOf(challenge);
  t.same(JSON.parse(challenge.content[1].text), paymentRequired, 'PaymentRequired as JSON in the second text item');
  t.match(paymentRequired.accepts, [{ scheme: 'exact', network: 'eip155:84532', amount: '10000', payTo: '0x209693Bc6afc0C5328bA36FaF03C514EF312287C' }], 'x402Price 0.01 USDC per credit, 1 credit');
  t.equal(paymentRequired.resource.url, `${gateway.url}#tool=fetch_readable`);
  t.equal(challenge.structuredContent.x402Version, 2, 'merged into structuredContent (the tool declares no outputSchema)');
  t.equal(challenge.structuredContent.checkoutUrl, challenge._meta[CHALLENGE].checkoutUrl, 'beside the checkout challenge data');
  t.equal(upstream.callsOf('fetch_readable').filter((c) => c.arguments.url === args.url).length, 0, 'the unpaid call never reached the upstream');

  const bodiesBefore = upstream.bodies.length;
  const paid = await callPaid(client, 'fetch_readable', args, payload);
  t.not(paid.isError, true);
  t.equal(paid.content[0].text, `ok:${JSON.stringify(args)}`, 'the tool result');
  t.match(paid._meta[RESPONSE], { success: true, network: 'eip155:84532', transaction: /^0x[0-9a-f]{64}$/ }, 'with the SettleResponse');
  t.equal(paid._meta[RECEIPT], undefined, 'no Tollbooth receipt: no handle is involved');
  const ran = upstream.callsOf('fetch_readable').filter((c) => c.arguments.url === args.url);
  t.equal(ran.length, 1, 'the tool ran once');
  t.same(ran[0]?.arguments, args, 'with the arguments as sent');
  t.equal(fake.calls.settle, 1, 'settled once');
  t.equal(fake.settled.size, 1);
  const forwarded = upstream.bodies.slice(bodiesBefore).join('\n');
  t.notOk(forwarded.includes('x402/payment'), 'the upstream never saw the payment key');
  for (const secret of payloadSecrets(payload)) t.notOk(forwarded.includes(secret), 'nor its signature or nonce');

  const lines = callLines(gateway);
  t.match(lines.at(-1), { tool: 'fetch_readable', outcome: 'authorised', rail: 'x402', settled: true, network: 'eip155:84532', amount: '10000', cost: 0, payer: /^0x[0-9a-f]{4}\.\.[0-9a-f]{4}$/ }, 'the call line says the x402 rail paid');
  t.match(lines.at(-2), { outcome: 'challenged', rail: 'credits' });
});

t.test('the same payload replayed sequentially and concurrently runs the tool exactly once', async (t) => {
  const { gateway, fake, client } = await rig(t);
  const args = { url: 'https://example.com/replay' };
  const { payload } = await challengeAndPay(client, 'fetch_readable', args);
  const first = await callPaid(client, 'fetch_readable', args, payload);
  t.ok(first._meta[RESPONSE]?.success, 'the first use pays');

  const again = await callPaid(client, 'fetch_readable', args, payload);
  t.equal(again.isError, true);
  t.match(again._meta[REFUSAL], { reason: 'payment_invalid', invalidReason: 'invalid_exact_evm_nonce_already_used' }, 'a sequential replay is refused');
  t.ok(again._meta['x402/payment-required'], 'with PaymentRequired, to pay again');

  // A fresh payment, sent 8 times at once over 8 sessions.
  const { payload: fresh } = await challengeAndPay(client, 'fetch_readable', { url: 'https://example.com/burst' });
  const gatewayUrl = new URL(gateway.url);
  const clients = await Promise.all(
    Array.from({ length: 8 }, async () => {
      const other = new Client({ name: 'x402-burst', version: '1.0.0' });
      await other.connect(new StreamableHTTPClientTransport(gatewayUrl));
      t.teardown(() => other.close());
      return other;
    }),
  );
  const results = await Promise.all(clients.map((other) => callPaid(other, 'fetch_readable', { url: 'https://example.com/burst' }, fresh)));
  const delivered = results.filter((r) => r._meta?.[RESPONSE]?.success);
  const refused = results.filter((r) => r._meta?.[REFUSAL]?.reason === 'payment_invalid');
  t.equal(delivered.length, 1, 'exactly one concurrent use is delivered');
  t.equal(refused.length, 7, 'the other seven are refused');
  t.equal(upstream.callsOf('fetch_readable').filter((c) => c.arguments.url === 'https://example.com/replay').length, 1, 'the replayed tool ran once');
  t.equal(upstream.callsOf('fetch_readable').filter((c) => c.arguments.url === 'https://example.com/burst').length, 1, 'the burst tool ran once');
  t.equal(fake.calls.settle, 2, 'two payments, two settlements');
});

t.test('an isError result is not settled, and says so', async (t) => {
  const { fake, client } = await rig(t);
  const before = upstream.callsOf('failing').length;
  const { payload } = await challengeAndPay(client, 'failing', {});
  const result = await callPaid(client, 'failing', {}, payload);
  t.equal(result.isError, true);
  t.equal(result.content[0].text, 'upstream failure', "the tool's own error result");
  t.same(result._meta[NOTE], { settled: false, reason: 'tool_error' }, 'marked not settled');
  t.equal(result._meta[RESPONSE], undefined);
  t.equal(fake.calls.settle, 0, 'the facilitator was never asked to settle');
  t.equal(upstream.callsOf('failing').length, before + 1, 'the tool ran once');
});

t.test('a settlement the facilitator refuses, or whose outcome is unknown, withholds the result', async (t) => {
  const { fake, client, gateway } = await rig(t);
  for (const [failure, errorReason] of [
    [{ mode: 'refuse', reason: 'insufficient_funds' }, 'insufficient_funds'],
    [{ mode: 'reset' }, 'settlement_outcome_unknown'],
  ] as const) {
    const args = { url: `https://example.com/withheld-${failure.mode}` };
    const { payload } = await challengeAndPay(client, 'fetch_readable', args);
    fake.failSettle(failure, 1);
    const result = await callPaid(client, 'fetch_readable', args, payload);
    t.equal(result.isError, true, `${failure.mode}: a refusal`);
    t.match(result._meta[REFUSAL], { reason: 'payment_failed', errorReason }, `${failure.mode}: payment_failed`);
    t.notOk(JSON.stringify(result).includes('ok:'), `${failure.mode}: nothing of the tool's result`);
    t.equal(upstream.callsOf('fetch_readable').filter((c) => c.arguments.url === args.url).length, 1, `${failure.mode}: the tool did run`);
  }
  t.match(callLines(gateway).filter((l) => l.rail === 'x402').map((l) => l.settled), [false, false]);
});

t.test('a tampered amount or payee, or a forged signature, is refused before anything is forwarded', async (t) => {
  const { fake, client } = await rig(t);
  const args = { url: 'https://example.com/tampered' };
  const { payload } = await challengeAndPay(client, 'fetch_readable', args);
  const bodiesBefore = upstream.bodies.length;
  const amount = clonePayload(payload);
  amount.payload.authorization.value = '1';
  amount.accepted.amount = '1';
  const payee = clonePayload(payload);
  payee.payload.authorization.to = '0x000000000000000000000000000000000000dEaD';
  const forged = clonePayload(payload);
  forged.payload.signature = `0x${'11'.repeat(65)}`;
  const cases: [string, PaymentPayload, string][] = [
    ['amount', amount, 'invalid_payment_requirements'],
    ['payee', payee, 'invalid_exact_evm_recipient_mismatch'],
    ['signature', forged, 'invalid_exact_evm_signature'],
  ];
  for (const [what, tampered, invalidReason] of cases) {
    const result = await callPaid(client, 'fetch_readable', args, tampered);
    t.match(result._meta[REFUSAL], { reason: 'payment_invalid', invalidReason }, `a tampered ${what} is refused`);
  }
  t.equal(upstream.bodies.length, bodiesBefore, 'the upstream received nothing at all');
  t.equal(fake.calls.settle, 0);
  const good = await callPaid(client, 'fetch_readable', args, payload);
  t.ok(good._meta[RESPONSE]?.success, 'the untampered payment still pays (no refusal burnt its nonce)');
});

t.test('SDK v1 client: a tool with an outputSchema is challenged without structuredContent and its paid result validates', async (t) => {
  const { client } = await rig(t);
  await client.listTools(); // the client now validates structuredContent against the outputSchema
  const { challenge, payload } = await challengeAndPay(client, 'with_schema', { city: 'Oslo' });
  t.equal(challenge.structuredContent, undefined, 'no structuredContent against an outputSchema');
  t.equal(paymentRequiredOf(challenge).x402Version, 2, 'PaymentRequired in _meta');
  t.ok(JSON.parse(challenge.content[1].text).accepts, 'and in the second text item');
  const paid = await callPaid(client, 'with_schema', { city: 'Oslo' }, payload);
  t.same(paid.structuredContent, { temp: 21 }, "the upstream's structuredContent, untouched");
  t.ok(paid._meta[RESPONSE]?.success);
});

for (const era of [
  { name: 'legacy 2025-11-25', mode: 'legacy' as const, wire: 'legacy' },
  { name: 'modern 2026-07-28', mode: { pin: '2026-07-28' } as const, wire: 'modern' },
]) {
  t.test(`SDK v2 client ${era.name}: pays by x402, outputSchema tool included`, async (t) => {
    const fake = await startFakeFacilitator();
    t.teardown(() => fake.close());
    const gateway = await startTestGateway(t, withX402(testConfig(dual.url), fake.url));
    const client = new ClientV2({ name: 'x402-v2', version: '1.0.0' }, { versionNegotiation: { mode: era.mode } });
    await client.connect(new TransportV2(new URL(gateway.url)));
    t.teardown(() => client.close());
    await client.listTools();

    const args = { url: `https://example.com/v2-${era.wire}` };
    const { challenge, payload } = await challengeAndPay(client, 'fetch_readable', args);
    t.match(challenge.content[0].text, /^PAYMENT_REQUIRED\n/);
    const paid = await callPaid(client, 'fetch_readable', args, payload);
    t.equal(paid.content[0].text, `ok:${JSON.stringify(args)}`);
    t.ok(paid._meta[RESPONSE]?.success, 'settled');
    const ran = dual.callsOf('fetch_readable').filter((c) => c.arguments.url === args.url);
    t.equal(ran.length, 1, 'the tool ran once');
    t.equal(ran[0]?.era, era.wire, `in the ${era.wire} era`);

    const schema = await challengeAndPay(client, 'with_schema', { city: 'Bergen' });
    t.equal(schema.challenge.structuredContent, undefined);
    const schemaPaid = await callPaid(client, 'with_schema', { city: 'Bergen' }, schema.payload);
    t.same(schemaPaid.structuredContent, { temp: 21 }, 'validated by the v2 client against the outputSchema');
    t.ok(schemaPaid._meta[RESPONSE]?.success);
    t.equal(fake.calls.settle, 2);
  });
}

t.test('a legacy batch with two x402-paid entries: each verified, run, settled and answered on its own', async (t) => {
  const { gateway, fake, client } = await rig(t);
  const one = await challengeAndPay(client, 'fetch_readable', { url: 'https://example.com/b1' });
  const two = await challengeAndPay(client, 'costly', { q: 'b2' });
  const entry = (id: number, name: string, args: Json, payload: PaymentPayload) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args, _meta: paymentMeta(payload) } });
  const response = await fetch(gateway.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-03-26' },
    body: JSON.stringify([
      entry(1, 'fetch_readable', { url: 'https://example.com/b1' }, one.payload),
      entry(2, 'costly', { q: 'b2' }, two.payload),
      entry(3, 'fetch_readable', { url: 'https://example.com/b1' }, one.payload), // the first payment again
      { jsonrpc: '2.0', id: 4, method: 'tools/call', params: { name: 'echo', arguments: { text: 'free' }, _meta: paymentMeta(one.payload) } },
    ]),
  });
  const replies = (await response.json()) as Json[];
  t.same(replies.map((r) => r.id), [1, 2, 3, 4], 'one reply per entry, in order');
  t.ok(replies[0]?.result._meta[RESPONSE]?.success, 'entry 1 paid and settled');
  t.ok(replies[1]?.result._meta[RESPONSE]?.success, 'entry 2 paid and settled');
  t.not(replies[0]?.result._meta[RESPONSE].transaction, replies[1]?.result._meta[RESPONSE].transaction);
  t.match(replies[2]?.result._meta[REFUSAL], { reason: 'payment_invalid', invalidReason: 'invalid_exact_evm_nonce_already_used' }, 'the repeated payment in the same batch is refused');
  t.equal(replies[3]?.result.content[0].text, JSON.stringify({ text: 'free' }), 'the free entry ran');
  t.equal(fake.calls.settle, 2);
  t.equal(upstream.callsOf('fetch_readable').filter((c) => c.arguments.url === 'https://example.com/b1').length, 1);
  t.equal(upstream.callsOf('costly').filter((c) => c.arguments.q === 'b2').length, 1);
  t.notOk(upstream.sawText('x402/payment'), 'no payment reached the upstream, free entry included');
});

t.test('a payment beside a handle: the credits pay, the payment is stripped and never verified', async (t) => {
  const { gateway, fake, client } = await rig(t);
  const handle = await fundedHandle(gateway);
  const { payload } = await challengeAndPay(client, 'fetch_readable', { url: 'https://example.com/both' });
  const verifies = fake.calls.verify;
  const result = await callPaid(client, 'fetch_readable', { url: 'https://example.com/both', tollboothToken: handle }, payload);
  t.equal(result._meta[RECEIPT]?.cost, 1, 'a Tollbooth receipt: the credit rail paid');
  t.equal(result._meta[RESPONSE], undefined);
  t.equal(fake.calls.verify, verifies, 'the payment was never verified');
  t.equal(await researchBalance(gateway, handle), 2);
  t.notOk(upstream.sawText('x402/payment'), 'nor forwarded');
  t.match(callLines(gateway).at(-1), { rail: 'credits', outcome: 'authorised', cost: 1 });
});

t.test('a payment on a free tool is stripped before forwarding', async (t) => {
  const { client } = await rig(t);
  const { payload } = await challengeAndPay(client, 'fetch_readable', { url: 'https://example.com/free' });
  const result = (await client.callTool({ name: 'echo', arguments: { text: 'free-with-payment' }, _meta: { ...paymentMeta(payload), progressToken: 'keep-me' } })) as Json;
  t.equal(result.content[0].text, JSON.stringify({ text: 'free-with-payment' }));
  const body = upstream.bodies.find((b) => b.includes('free-with-payment')) as string;
  t.ok(body.includes('keep-me'), 'the rest of _meta is forwarded');
  t.notOk(body.includes('x402/payment'), 'the payment is not');
});

t.test('x402 retries are throttled per client before the facilitator is asked', async (t) => {
  const { fake, client } = await rig(t, { limits: { perHandle: { ratePerSecond: 0.01, burst: 2 }, challengesPerClient: { ratePerSecond: 100, burst: 100 }, newChargesPerSecond: 10_000 } });
  const { payload } = await challengeAndPay(client, 'fetch_readable', { url: 'https://example.com/throttle' });
  const forged = clonePayload(payload);
  forged.payload.signature = `0x${'22'.repeat(65)}`;
  const answers: Json[] = [];
  for (let i = 0; i < 4; i++) answers.push(await callPaid(client, 'fetch_readable', { url: 'https://example.com/throttle' }, forged));
  t.same(answers.map((a) => a._meta[REFUSAL].reason), ['payment_invalid', 'payment_invalid', 'rate_limited', 'rate_limited']);
  t.ok(answers[2]?._meta[REFUSAL].retryAfterSeconds >= 1, 'with the wait');
  t.equal(fake.calls.verify, 2, 'the facilitator saw only the two within the bucket');
});

t.test('with the rail off a payment is ignored: a checkout challenge, nothing verified, nothing forwarded', async (t) => {
  const fake = await startFakeFacilitator();
  t.teardown(() => fake.close());
  const on = await startTestGateway(t, withX402(testConfig(upstream.url), fake.url));
  const off = await startTestGateway(t, testConfig(upstream.url));
  const client = new Client({ name: 'x402-off', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(on.url)));
  t.teardown(() => client.close());
  const { payload } = await challengeAndPay(client, 'fetch_readable', { url: 'https://example.com/off' });
  const offClient = new Client({ name: 'x402-off', version: '1.0.0' });
  await offClient.connect(new StreamableHTTPClientTransport(new URL(off.url)));
  t.teardown(() => offClient.close());
  const result = await callPaid(offClient, 'fetch_readable', { url: 'https://example.com/off' }, payload);
  t.equal(result._meta[CHALLENGE]?.reason, 'payment_required', 'the credit rail challenges');
  t.equal(result._meta['x402/payment-required'], undefined, 'and offers no x402');
  t.equal(result.content.length, 1);
  t.equal(fake.calls.verify, 0);
  t.equal(upstream.callsOf('fetch_readable').filter((c) => c.arguments.url === 'https://example.com/off').length, 0);
});

t.test('secrets scan: no payload, signature or authorization nonce in logs or /metrics', async (t) => {
  const { gateway, fake, client } = await rig(t);
  const payloads: PaymentPayload[] = [];
  for (const [name, args] of [['fetch_readable', { url: 'https://example.com/s1' }], ['failing', {}]] as const) {
    const { payload } = await challengeAndPay(client, name, args);
    payloads.push(payload);
    await callPaid(client, name, args, payload);
    await callPaid(client, name, args, payload); // replayed
  }
  const { payload: refused } = await challengeAndPay(client, 'fetch_readable', { url: 'https://example.com/s3' });
  payloads.push(refused);
  fake.failSettle({ mode: 'refuse', reason: 'insufficient_funds' }, 1);
  await callPaid(client, 'fetch_readable', { url: 'https://example.com/s3' }, refused);
  const metrics = (await gateway.gateway.app.inject({ method: 'GET', url: '/metrics' })).body;
  t.match(metrics, /tollbooth_x402_payments_total\{sku="research",result="settled"\} 1/);
  t.match(metrics, /tollbooth_paid_calls_total\{server="default",tool="fetch_readable",sku="research",outcome="authorised"\} 2/);
  const logs = gateway.logText();
  t.ok(logs.includes('"rail":"x402"'), 'the logs do speak of the x402 rail');
  for (const payload of payloads) {
    for (const secret of payloadSecrets(payload)) {
      t.notOk(logs.includes(secret), 'no signature or nonce in the logs');
      t.notOk(metrics.includes(secret), 'nor in /metrics');
    }
  }
  t.notOk(logs.includes('x402/payment"'), 'no payment object');
  t.notOk(/0x[0-9a-f]{130}/i.test(logs), 'nothing shaped like a signature');
});
