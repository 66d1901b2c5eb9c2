// The facilitator client's discipline (SPEC §19: as Moove's): verify retried only where safe, settle
// never blindly retried, bounded deadlines and answers, typed errors without any outside text.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import t, { type Test } from 'tap';
import { createLogger } from '../../../src/observability/logger.js';
import { createMetrics } from '../../../src/observability/metrics.js';
import { FacilitatorClient, FacilitatorError } from '../../../src/payments/x402/facilitator.js';
import { startFakeFacilitator } from '../../helpers/x402-facilitator.js';
import { newPayer } from '../../helpers/x402-payer.js';
import { TERMS } from './fixtures.js';
import { paymentRequiredFor, requirementsFor } from '../../../src/payments/x402/requirements.js';
import { call } from './fixtures.js';

const logger = createLogger('silent');
const MARKER = 'ECHOED-BODY-MARKER';

/** A facilitator that answers each request with the next scripted reply (status, body), and counts. */
async function scripted(t: Test, replies: { status: number; body: string }[]) {
  const seen: string[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let text = '';
    req.on('data', (chunk: Buffer) => (text += chunk.toString()));
    req.on('end', () => {
      seen.push(`${req.method} ${req.url}`);
      const reply = replies.shift() ?? { status: 500, body: 'no more replies' };
      res.writeHead(reply.status, { 'content-type': 'application/json' });
      res.end(reply.body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

async function signed() {
  const requirements = requirementsFor(call(), TERMS);
  const payload = await newPayer().pay(paymentRequiredFor(call(), TERMS, 'x'));
  return { requirements, payload };
}

const client = (t: Test, url: string, extra: Partial<ConstructorParameters<typeof FacilitatorClient>[0]> = {}) => {
  const metrics = createMetrics(async () => 0);
  const c = new FacilitatorClient({ url, logger, metrics, baseDelayMs: 5, maxDelayMs: 10, ...extra });
  t.teardown(() => c.close());
  return { c, metrics };
};

t.test('verify and settle against the fake facilitator, with the library types', async (t) => {
  const fake = await startFakeFacilitator();
  t.teardown(() => fake.close());
  const { c } = client(t, fake.url);
  const { payload, requirements } = await signed();
  t.match(await c.verify(payload, requirements), { isValid: true });
  t.match(await c.settle(payload, requirements), { success: true, network: 'eip155:84532', transaction: /^0x[0-9a-f]{64}$/ });
  t.same(await c.verify(payload, requirements), { isValid: false, invalidReason: 'invalid_exact_evm_nonce_already_used', payer: (payload.payload as any).authorization.from });
  t.match(await c.supported(), { kinds: [{ scheme: 'exact' }] });
  const body = JSON.parse(fake.bodies[0] as string);
  t.same(Object.keys(body), ['x402Version', 'paymentPayload', 'paymentRequirements'], 'the x402 v2 VerifyRequest shape');
});

t.test('verify is retried on 503 and 429, not on a 400 that is not an x402 answer', async (t) => {
  const { payload, requirements } = await signed();
  const retried = await scripted(t, [{ status: 503, body: MARKER }, { status: 429, body: '{}' }, { status: 200, body: '{"isValid":true}' }]);
  t.same(await client(t, retried.url).c.verify(payload, requirements), { isValid: true });
  t.equal(retried.seen.length, 3);
  const refused = await scripted(t, [{ status: 400, body: `{"error":"${MARKER}"}` }]);
  const error = await client(t, refused.url).c.verify(payload, requirements).catch((e: unknown) => e);
  t.match(error, { code: 'TB_ERR_FACILITATOR', kind: 'refused', httpStatus: 400 });
  t.equal(refused.seen.length, 1);
  const invalid = await scripted(t, [{ status: 400, body: '{"isValid":false,"invalidReason":"invalid_exact_evm_signature"}' }]);
  t.same(await client(t, invalid.url).c.verify(payload, requirements), { isValid: false, invalidReason: 'invalid_exact_evm_signature' }, 'a 4xx x402 answer is an answer');
});

t.test('settle is never retried once the request may have reached the facilitator', async (t) => {
  const { payload, requirements } = await signed();
  for (const status of [500, 502, 503, 429]) {
    const server = await scripted(t, [{ status, body: MARKER }, { status: 200, body: '{"success":true,"transaction":"0x1","network":"eip155:84532"}' }]);
    const error = await client(t, server.url).c.settle(payload, requirements).catch((e: unknown) => e);
    t.ok(error instanceof FacilitatorError, `HTTP ${status}`);
    t.match(error, { op: 'settle', mayHaveReached: true });
    t.equal(server.seen.length, 1, `HTTP ${status}: one attempt`);
    t.notOk(String((error as Error).message).includes(MARKER), 'no facilitator text in the message');
  }
  const refusal = await scripted(t, [{ status: 400, body: '{"success":false,"errorReason":"invalid_exact_evm_nonce_already_used","transaction":"","network":"eip155:84532"}' }]);
  t.match(await client(t, refusal.url).c.settle(payload, requirements), { success: false, errorReason: 'invalid_exact_evm_nonce_already_used' }, 'a refusal is an answer');
});

t.test('settle to a facilitator nobody listens on is tried maxAttempts times, and says it never reached it', async (t) => {
  const fake = await startFakeFacilitator();
  const url = fake.url;
  await fake.close();
  const { payload, requirements } = await signed();
  const { c, metrics } = client(t, url);
  const error = await c.settle(payload, requirements).catch((e: unknown) => e);
  t.match(error, { code: 'TB_ERR_FACILITATOR', kind: 'network', mayHaveReached: false });
  const attempts = (await metrics.providerRequests.get()).values.find((v) => v.labels.op === 'x402_settle')?.value;
  t.equal(attempts, 3);
});

t.test('deadlines bound verify and settle against a facilitator that never answers', async (t) => {
  const fake = await startFakeFacilitator();
  t.teardown(() => fake.close());
  fake.failVerify({ mode: 'hang' });
  fake.failSettle({ mode: 'hang' });
  const { payload, requirements } = await signed();
  const { c } = client(t, fake.url, { verifyDeadlineMs: 600, requestTimeoutMs: 250, settleDeadlineMs: 500 });
  let started = Date.now();
  t.match(await c.verify(payload, requirements).catch((e: unknown) => e), { kind: 'timeout', op: 'verify' });
  // A facilitator that never answers would hold an unbounded call forever: any bound proves the deadline;
  // this one is generous for a loaded machine (quiet: ~0.6 s).
  t.ok(Date.now() - started < 6_000);
  started = Date.now();
  t.match(await c.settle(payload, requirements).catch((e: unknown) => e), { kind: 'timeout', op: 'settle', mayHaveReached: true });
  t.ok(Date.now() - started < 5_000);
  t.equal(fake.calls.settle, 1);
});

t.test('an answer over 64 KiB is a bad response, and a success without a transaction is not believed', async (t) => {
  const { payload, requirements } = await signed();
  const big = await scripted(t, [{ status: 200, body: `{"isValid":true,"pad":"${'x'.repeat(70_000)}"}` }]);
  t.match(await client(t, big.url).c.verify(payload, requirements).catch((e: unknown) => e), { kind: 'bad_response' });
  const hollow = await scripted(t, [{ status: 200, body: '{"success":true,"network":"eip155:84532"}' }]);
  t.match(await client(t, hollow.url).c.settle(payload, requirements).catch((e: unknown) => e), { kind: 'bad_response', mayHaveReached: true });
});

t.test('a cancelled verify stops at once', async (t) => {
  const fake = await startFakeFacilitator();
  t.teardown(() => fake.close());
  fake.failVerify({ mode: 'hang' });
  const { payload, requirements } = await signed();
  const controller = new AbortController();
  setTimeout(() => controller.abort(), 100);
  t.match(await client(t, fake.url).c.verify(payload, requirements, controller.signal).catch((e: unknown) => e), { kind: 'cancelled' });
});
