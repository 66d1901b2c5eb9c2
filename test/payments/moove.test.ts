// The Moove provider over real HTTP against the local fake of the Moove API (test/helpers/moove-fake.ts).
// Backoff jitter is injected (random = 0 → no wait) except where the backoff itself is the behaviour,
// and pacing is opened wide except where pacing is the behaviour, so the suite stays fast.
import { inspect } from 'node:util';
import { Writable } from 'node:stream';
import t from 'tap';
import { createLogger } from '../../src/observability/logger.js';
import { createMetrics, type Metrics } from '../../src/observability/metrics.js';
import { equalAmounts } from '../../src/money/decimal.js';
import { describeCharge, MooveProvider, type MooveProviderOptions } from '../../src/payments/moove.js';
import { ProviderError, type OpenChargeInput, type ProviderErrorKind } from '../../src/payments/provider.js';
import { startMooveFake, type MooveFake, type MooveFakeOptions } from '../helpers/moove-fake.js';

// Helpers only register teardowns, so they take just that part of a test.
type Tap = Pick<typeof t, 'teardown'>;

const API_KEY = 'mk_live_9f8e7d6c5b4a_SECRET_DO_NOT_LEAK';
const WIDE_OPEN = { ratePerSecond: 1_000, burst: 1_000, floorPerSecond: 1 };

interface Harness {
  fake: MooveFake;
  provider: MooveProvider;
  logs: () => Array<Record<string, unknown>>;
  rawLogs: () => string;
  metrics: Metrics;
  travel: (ms: number) => void;
}

async function harness(t: Tap, provider: Partial<MooveProviderOptions> = {}, fakeOptions: MooveFakeOptions = {}): Promise<Harness> {
  const fake = await startMooveFake({ apiKeys: [API_KEY], ...fakeOptions });
  t.teardown(() => fake.close());
  let raw = '';
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      raw += chunk.toString();
      done();
    },
  });
  let offset = 0;
  const metrics = createMetrics(async () => 0);
  const instance = new MooveProvider({
    apiKey: API_KEY,
    baseUrl: fake.url,
    logger: createLogger('debug', sink),
    metrics,
    clock: () => Date.now() + offset,
    random: () => 0,
    pacing: WIDE_OPEN,
    ...provider,
  });
  t.teardown(() => instance.close());
  return {
    fake,
    provider: instance,
    metrics,
    rawLogs: () => raw,
    logs: () => raw.split('\n').filter(Boolean).map((line) => JSON.parse(line) as Record<string, unknown>),
    travel: (ms) => {
      offset += ms;
    },
  };
}

const charge = (overrides: Partial<OpenChargeInput> = {}): OpenChargeInput => ({
  nonce: 'Qm9vdGhOb25jZTEyMzQ1Ng',
  sku: 'research',
  amount: '5.00',
  currency: 'USDC',
  label: 'Research tools',
  credits: 250,
  tool: 'fetch_readable',
  expiresAt: Date.now() + 60 * 60_000,
  ...overrides,
});

/** The retry waits the provider chose, in ms, from its `provider_retry` log lines (written before each wait). */
const retryWaits = (lines: Array<Record<string, unknown>>): unknown[] => lines.filter((l) => l.evt === 'provider_retry').map((l) => l.delayMs);

/**
 * Which came first: `promise` settling or a real timer of `ms` (set now). Timers fire in due order, so a
 * promise driven by an earlier timer wins however late a loaded machine runs both.
 */
async function firstOf<T>(promise: Promise<T>, ms: number): Promise<[T | undefined, 'settled' | 'timer']> {
  let timer: NodeJS.Timeout | undefined;
  const witness = new Promise<'timer'>((resolve) => (timer = setTimeout(() => resolve('timer'), ms)));
  const settled = promise.then((value) => ({ value }));
  const winner = await Promise.race([settled, witness]);
  clearTimeout(timer);
  return winner === 'timer' ? [undefined, 'timer'] : [winner.value, 'settled'];
}

async function rejection(promise: Promise<unknown>): Promise<ProviderError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof ProviderError) return error;
    throw error;
  }
  throw new Error('expected a ProviderError, the call succeeded');
}

t.test('openCharge creates a link and returns its id and checkout URL', async (t) => {
  const { fake, provider } = await harness(t);
  const input = charge();
  const opened = await provider.openCharge(input);
  const link = fake.links.get(opened.providerRef);
  t.ok(link, 'the link exists at Moove');
  t.equal(opened.checkoutUrl, `https://moove.xyz/@shop/pay/${opened.providerRef}`);
  t.same(fake.calls, [{ method: 'POST', path: '/v1/payment-link', hadKey: true }]);
  t.same(fake.requests[0]?.body, {
    toAmount: '5.00',
    description: `tb_${input.nonce} · Research tools — 250 credits (fetch_readable)`,
    maxUsage: 1,
    expirationDate: new Date(input.expiresAt).toISOString(),
  });
});

t.test('a long label is cut at the tail: the description stays within 500 chars and keeps tb_<nonce>', async (t) => {
  const { fake, provider } = await harness(t);
  const input = charge({ label: 'L'.repeat(2_000) });
  await provider.openCharge(input);
  const description = (fake.requests[0]?.body as { description: string }).description;
  t.ok(description.length <= 500, `length ${description.length}`);
  t.ok(description.startsWith(`tb_${input.nonce} `));
  t.ok(description.endsWith('…'));
});

t.test('describeCharge never splits a surrogate pair and flattens control characters', async (t) => {
  const nonce = 'abc';
  const prefix = `tb_${nonce} · `;
  const label = 'x'.repeat(498 - prefix.length) + '😀'.repeat(10); // an emoji straddles the cut at 499
  const description = describeCharge({ nonce, label, credits: 1, tool: 't' });
  t.equal(description.length, 499, 'cut one unit early rather than split the pair');
  t.notMatch(description, /[\uD800-\uDBFF](?![\uDC00-\uDFFF])/, 'no lone high surrogate');
  t.equal(describeCharge({ nonce, label: 'a\nb\u0000c', credits: 1, tool: 't' }), 'tb_abc · a b c — 1 credits (t)');
  t.throws(() => describeCharge({ nonce: 'not a nonce!', label: 'x', credits: 1, tool: 't' }), TypeError);
});

t.test('readCharge reads the link without the key and maps an active link', async (t) => {
  const { provider, fake } = await harness(t);
  const { providerRef } = await provider.openCharge(charge());
  const reading = await provider.readCharge(providerRef);
  t.same(reading, { status: 'active', receivedAmount: null, toAmount: '5' });
  t.same(fake.calls[1], { method: 'GET', path: `/v1/payment-link/${providerRef}`, hadKey: false });
});

t.test('amounts come back normalised ("5.00" → "5") and still compare equal by value', async (t) => {
  const { provider, fake } = await harness(t);
  const { providerRef } = await provider.openCharge(charge({ amount: '5.00' }));
  await fake.pay(providerRef, '5.000');
  const reading = await provider.readCharge(providerRef);
  t.equal(reading.status, 'completed');
  t.equal(reading.toAmount, '5', 'Moove normalises');
  t.equal(reading.receivedAmount, '5');
  t.ok(equalAmounts(reading.toAmount ?? '', '5.00'));
  t.ok(equalAmounts(reading.receivedAmount ?? '', '5.00'));
});

t.test('an underpaid link reads completed with the amount received', async (t) => {
  const { provider, fake } = await harness(t);
  const { providerRef } = await provider.openCharge(charge());
  await fake.pay(providerRef, '4.50');
  t.same(await provider.readCharge(providerRef), { status: 'completed', receivedAmount: '4.5', toAmount: '5' });
});

t.test('an inactive link reads expired', async (t) => {
  const { provider, fake } = await harness(t);
  const { providerRef } = await provider.openCharge(charge());
  fake.expire(providerRef);
  t.equal((await provider.readCharge(providerRef)).status, 'expired');
});

t.test('a link stays active until Moove sweeps it after its expiration date (configurable lag)', async (t) => {
  let fakeOffset = 0;
  const { provider } = await harness(t, {}, { clock: () => Date.now() + fakeOffset, inactiveLagMs: 60_000 });
  const { providerRef } = await provider.openCharge(charge({ expiresAt: Date.now() + 15 * 60_000 }));
  fakeOffset = 15 * 60_000 + 30_000;
  t.equal((await provider.readCharge(providerRef)).status, 'active', 'past expiry, inside the lag');
  fakeOffset = 15 * 60_000 + 61_000;
  t.equal((await provider.readCharge(providerRef)).status, 'expired');
});

t.test('a read answered 401 is asked again once with the key', async (t) => {
  const { provider, fake, logs } = await harness(t);
  const { providerRef } = await provider.openCharge(charge());
  fake.requirePublicAuth = true;
  t.equal((await provider.readCharge(providerRef)).status, 'active');
  t.same(
    fake.calls.slice(1).map((call) => [call.method, call.hadKey]),
    [
      ['GET', false],
      ['GET', true],
    ],
  );
  t.equal(logs().filter((line) => line.level === 'warn').length, 0, 'an expected 401 tells the operator nothing');
});

t.test('a keyed read refused 401 too fails as auth after exactly two requests', async (t) => {
  const { provider, fake } = await harness(t, { apiKey: 'mk_wrong_key' });
  fake.requirePublicAuth = true;
  const error = await rejection(provider.readCharge('00000000-0000-0000-0000-000000000000'));
  t.equal(error.kind, 'auth');
  t.equal(error.providerCode, 'INVALID_API_KEY');
  t.equal(fake.requests.length, 2);
});

// Each Moove error code → kind, retryable, and how many requests were made.
const ERROR_CASES: Array<{
  name: string;
  kind: ProviderErrorKind;
  code: string | null;
  requests: number;
  op?: 'read';
  setup: (fake: MooveFake) => void;
  options?: Partial<MooveProviderOptions>;
  fakeOptions?: MooveFakeOptions;
  input?: Partial<OpenChargeInput>;
}> = [
  { name: '401 UNAUTHENTICATED', kind: 'auth', code: 'UNAUTHENTICATED', requests: 1, setup: (f) => f.failNext(1, { status: 401, code: 'UNAUTHENTICATED' }) },
  { name: '401 INVALID_API_KEY', kind: 'auth', code: 'INVALID_API_KEY', requests: 1, setup: () => {}, options: { apiKey: 'mk_not_a_key_anyone_knows' } },
  { name: '401 EXPIRED_API_KEY', kind: 'auth', code: 'EXPIRED_API_KEY', requests: 1, setup: () => {}, options: { apiKey: 'mk_old' }, fakeOptions: { expiredKeys: ['mk_old'] } },
  { name: '403 INSUFFICIENT_API_SCOPE', kind: 'scope', code: 'INSUFFICIENT_API_SCOPE', requests: 1, setup: () => {}, options: { apiKey: 'mk_read' }, fakeOptions: { unscopedKeys: ['mk_read'] } },
  { name: '404 CANNOT_FIND_PAYMENT_LINK', kind: 'not_found', code: 'CANNOT_FIND_PAYMENT_LINK', requests: 1, op: 'read', setup: () => {} },
  { name: '409 PAYMENT_LINK_ACCOUNT_NOT_READY', kind: 'account_not_ready', code: 'PAYMENT_LINK_ACCOUNT_NOT_READY', requests: 1, setup: (f) => { f.accountNotReady = true; } },
  { name: '422 INVALID_PAYMENT_LINK_AMOUNT', kind: 'bad_amount', code: 'INVALID_PAYMENT_LINK_AMOUNT', requests: 1, setup: () => {}, input: { amount: '5.0000001' } },
  { name: '429 RATE_LIMIT_EXCEEDED (4 times)', kind: 'rate_limited', code: 'RATE_LIMIT_EXCEEDED', requests: 4, setup: (f) => f.failNext(10, { status: 429 }) },
  { name: '500 (4 times)', kind: 'server', code: 'INTERNAL_SERVER_ERROR', requests: 4, setup: (f) => f.failNext(10, { status: 500 }) },
  { name: '503 (4 times)', kind: 'server', code: 'SERVICE_UNAVAILABLE', requests: 4, setup: (f) => f.failNext(10, { status: 503, code: 'SERVICE_UNAVAILABLE' }) },
  { name: 'dropped connection (4 times)', kind: 'network', code: null, requests: 4, setup: (f) => f.failNext(10, 'drop') },
  { name: '5xx read (4 times)', kind: 'server', code: 'INTERNAL_SERVER_ERROR', requests: 4, op: 'read', setup: (f) => f.failNext(10, { status: 502 }) },
  { name: '200 with a body that is not JSON', kind: 'bad_response', code: null, requests: 1, setup: (f) => f.failNext(1, { status: 200, rawBody: '<html>oops' }) },
  { name: '200 without id/url', kind: 'bad_response', code: null, requests: 1, setup: (f) => f.failNext(1, { status: 200, rawBody: '{"ok":true}' }) },
];

for (const c of ERROR_CASES) {
  t.test(`${c.name} → kind ${c.kind}, ${c.requests === 1 ? 'not retried' : 'retried up to 4 tries'}`, async (t) => {
    const { provider, fake } = await harness(t, c.options ?? {}, c.fakeOptions ?? {});
    c.setup(fake);
    const error = await rejection(c.op === 'read' ? provider.readCharge('00000000-0000-0000-0000-000000000000') : provider.openCharge(charge(c.input)));
    t.equal(error.kind, c.kind);
    t.equal(error.retryable, ['rate_limited', 'server', 'network'].includes(c.kind));
    t.equal(error.providerCode, c.code);
    t.equal(error.code, 'TB_ERR_PROVIDER');
    t.equal(fake.requests.length, c.requests, 'requests made');
  });
}

t.test('a non-positive or malformed amount is refused before any request', async (t) => {
  const { provider, fake } = await harness(t);
  for (const amount of ['0', '0.00', '-5', '5,00', '']) {
    t.equal((await rejection(provider.openCharge(charge({ amount })))).kind, 'bad_amount', JSON.stringify(amount));
  }
  t.equal(fake.requests.length, 0);
});

t.test('429, 5xx and dropped connections are retried until one succeeds', async (t) => {
  const { provider, fake } = await harness(t);
  fake.failNext(1, { status: 429 });
  fake.failNext(1, 'drop');
  fake.failNext(1, { status: 502 });
  const opened = await provider.openCharge(charge());
  t.ok(fake.links.has(opened.providerRef));
  t.same(
    fake.requests.map((r) => r.answer),
    [429, 'drop', 502, 201],
  );
});

t.test('retry waits follow full-jitter exponential backoff (base 200 ms, doubling)', async (t) => {
  const { provider, fake } = await harness(t, { random: () => 0.999 });
  fake.failNext(10, { status: 503 });
  await rejection(provider.openCharge(charge()));
  const gaps = fake.requests.slice(1).map((r, i) => r.at - (fake.requests[i]?.at ?? 0));
  t.equal(gaps.length, 3);
  [200, 400, 800].forEach((floor, i) => t.ok((gaps[i] ?? 0) >= floor * 0.999 - 15, `gap ${i + 1} is ${gaps[i]} ms, wanted ≈ ${floor}`));
});

t.test('backoff is capped', async (t) => {
  const { provider, fake, logs } = await harness(t, { random: () => 0.999, retry: { baseDelayMs: 1_000, maxDelayMs: 100 } });
  fake.failNext(10, { status: 503 });
  await rejection(provider.openCharge(charge()));
  // The waits the provider chose, as it logged them before sleeping: uncapped they would be 1, 2 and 4 s.
  t.same(retryWaits(logs()), [100, 100, 100], 'three waits of at most 100 ms');
  t.equal(fake.requests.length, 4);
});

t.test('pacing: a 429 halves the keyed rate and spaces the next keyed call accordingly', async (t) => {
  const { provider, fake } = await harness(t, { pacing: {} }); // defaults: 2 req/s
  t.equal(provider.keyedRatePerSecond, 2);
  fake.failNext(1, { status: 429 });
  await provider.openCharge(charge());
  t.ok(provider.keyedRatePerSecond < 2 && provider.keyedRatePerSecond >= 1, `rate ${provider.keyedRatePerSecond}`);
  const [first, second] = fake.requests;
  t.ok((second?.at ?? 0) - (first?.at ?? 0) >= 950, `the retry waited ${(second?.at ?? 0) - (first?.at ?? 0)} ms for a slot at 1 req/s`);
});

t.test('pacing: repeated 429s halve down to the floor, then answers recover it additively', async (t) => {
  const { provider, fake } = await harness(t, { pacing: { ratePerSecond: 40, floorPerSecond: 5, burst: 1, recoveryPerAnswer: 5 } });
  fake.failNext(4, { status: 429 });
  await rejection(provider.openCharge(charge()));
  t.equal(provider.keyedRatePerSecond, 5, '40 → 20 → 10 → 5, and not below the floor');
  const gaps = fake.requests.slice(1).map((r, i) => r.at - (fake.requests[i]?.at ?? 0));
  [50, 100, 200].forEach((floor, i) => t.ok((gaps[i] ?? 0) >= floor - 15, `gap ${i + 1} is ${gaps[i]} ms, wanted ≥ ${floor}`));
  await provider.openCharge(charge());
  t.equal(provider.keyedRatePerSecond, 10, 'one answer adds one step');
  for (let i = 0; i < 8; i += 1) await provider.openCharge(charge());
  t.equal(provider.keyedRatePerSecond, 40, 'and it never exceeds the configured rate');
});

t.test('pacing: keyed calls run near 2/s by default; public reads are not paced', async (t) => {
  const { provider, fake } = await harness(t, { pacing: {} });
  const [first, second] = await Promise.all([provider.openCharge(charge()), provider.openCharge(charge())]);
  // The burst of 2 is spent: the next two keyed calls wait 0.5 s and 1 s for a slot. Eight public reads
  // started after them must still reach Moove first, in the order of the recorded requests (an order a
  // loaded machine cannot flip: the reads are sent at once, the keyed calls only when their timers fire).
  const started = Date.now();
  const keyed = Promise.all([provider.openCharge(charge()), provider.openCharge(charge())]);
  const reads = [first, second].flatMap((opened) => [provider.readCharge(opened.providerRef), provider.readCharge(opened.providerRef), provider.readCharge(opened.providerRef), provider.readCharge(opened.providerRef)]);
  await Promise.all([keyed, ...reads]);
  const keyedMs = Date.now() - started;
  t.ok(keyedMs >= 900, `the 3rd and 4th keyed calls waited for slots at 2/s (${keyedMs} ms; a wait only grows on a loaded machine)`);
  t.same(
    fake.requests.map((r) => (r.hadKey ? 'keyed' : 'read')),
    ['keyed', 'keyed', ...Array<string>(8).fill('read'), 'keyed', 'keyed'],
    'the reads went straight out, ahead of the paced keyed calls',
  );
});

t.test('openCharge gives up at the create deadline, even while Moove hangs', async (t) => {
  const { provider, fake } = await harness(t, { createDeadlineMs: 800, requestTimeoutMs: 5_000 });
  fake.failNext(10, 'hang');
  const started = Date.now();
  // A client that ignored the deadline would wait out the 5 s request timeout: the give-up must come
  // before a timer set for that timeout fires (timers fire in due order, however loaded the machine).
  const [outcome, first] = await firstOf(rejection(provider.openCharge(charge())), 5_000);
  t.equal(first, 'settled', 'gave up before the request timeout');
  t.ok(Date.now() - started >= 750, 'not before the deadline');
  const error = outcome as ProviderError;
  t.equal(error.kind, 'network');
  t.equal(fake.requests.length, 1);
});

t.test('openCharge does not start a backoff wait it cannot finish before the deadline', async (t) => {
  const { provider, fake, logs } = await harness(t, { createDeadlineMs: 500, random: () => 0.999 });
  fake.failNext(10, { status: 503 });
  const error = await rejection(provider.openCharge(charge()));
  // Sleeping the second wait would end at 200 + 400 = 600 ms: the provider logs each wait before it
  // sleeps, so one logged wait means it gave up instead of starting the second.
  t.same(retryWaits(logs()), [200], 'gave up early rather than sleep past the deadline');
  t.equal(error.kind, 'server', 'the last failure is what is reported');
  t.match(error.message, /gave up on Moove after 500 ms/);
  t.equal(fake.requests.length, 2, 'waits 200 then 400: the second wait would cross the deadline');
});

t.test('a single hung request times out after requestTimeoutMs and is retried', async (t) => {
  const { provider, fake } = await harness(t, { requestTimeoutMs: 300 });
  fake.failNext(1, 'hang');
  const opened = await provider.openCharge(charge());
  t.ok(fake.links.has(opened.providerRef));
  t.same(
    fake.requests.map((r) => r.answer),
    ['hang', 201],
  );
});

t.test('a caller abort stops the call', async (t) => {
  const { provider, fake } = await harness(t, { requestTimeoutMs: 5_000 });
  fake.failNext(1, 'hang');
  const controller = new AbortController();
  setTimeout(() => controller.abort(), 100);
  const [outcome, first] = await firstOf(rejection(provider.openCharge(charge(), controller.signal)), 5_000);
  t.equal(first, 'settled', 'stopped by the abort, not by the request timeout');
  const error = outcome as ProviderError;
  t.match(error.message, /cancelled/);
  t.equal(fake.requests.length, 1, 'not retried');
});

t.test('an unreachable Moove is a retryable network error', async (t) => {
  const fake = await startMooveFake();
  const url = fake.url;
  await fake.close();
  const provider = new MooveProvider({ apiKey: API_KEY, baseUrl: url, logger: createLogger('silent'), random: () => 0, pacing: WIDE_OPEN });
  t.teardown(() => provider.close());
  const error = await rejection(provider.openCharge(charge()));
  t.equal(error.kind, 'network');
  t.ok(error.retryable);
});

t.test('the API key never appears in an error, its cause, a log line or a metric', async (t) => {
  const wrongKey = 'mk_wrong_SECRET_ALSO_NEVER_LEAKS';
  const errors: unknown[] = [];
  const captured: string[] = [];
  const exposition: string[] = [];
  const scenarios: Array<[Partial<MooveProviderOptions>, (fake: MooveFake) => void, (p: MooveProvider) => Promise<unknown>]> = [
    [{}, (f) => f.failNext(10, { status: 429 }), (p) => p.openCharge(charge())],
    [{}, (f) => f.failNext(10, 'drop'), (p) => p.openCharge(charge())],
    [{ createDeadlineMs: 300 }, (f) => f.failNext(10, 'hang'), (p) => p.openCharge(charge())],
    [{}, (f) => f.failNext(1, { status: 200, rawBody: `{"echo":"${API_KEY}"` }), (p) => p.openCharge(charge())],
    [{}, (f) => f.failNext(1, { status: 401, code: 'INVALID_API_KEY' }), (p) => p.openCharge(charge())],
    [{}, (f) => { f.accountNotReady = true; }, (p) => p.openCharge(charge())],
    [{ apiKey: wrongKey }, () => {}, (p) => p.openCharge(charge())],
    [{ apiKey: wrongKey }, (f) => { f.requirePublicAuth = true; }, (p) => p.readCharge('some-link')],
    [{}, (f) => f.failNext(10, { status: 500 }), (p) => p.readCharge('some-link')],
  ];
  for (const [options, setup, act] of scenarios) {
    const h = await harness(t, options);
    setup(h.fake);
    errors.push(await rejection(act(h.provider)));
    captured.push(h.rawLogs(), inspect(h.provider, { depth: 10, showHidden: true }));
    exposition.push(await h.metrics.registry.metrics());
  }
  const refused = new MooveProvider({ apiKey: API_KEY, baseUrl: 'http://127.0.0.1:1', logger: createLogger('silent'), random: () => 0, pacing: WIDE_OPEN });
  t.teardown(() => refused.close());
  errors.push(await rejection(refused.openCharge(charge())));

  for (const error of errors) {
    const views = [JSON.stringify(error), JSON.stringify(error, Object.getOwnPropertyNames(error)), inspect(error, { depth: 20, showHidden: true }), String((error as Error).stack)];
    for (const view of views) {
      t.notOk(view.includes(API_KEY), `no key in ${view.slice(0, 120)}`);
      t.notOk(view.includes(wrongKey), 'not even a wrong key');
      t.notOk(view.includes('SECRET'), 'no part of it');
    }
  }
  const logText = captured.join('\n');
  t.ok(logText.length > 0, 'something was logged (negative control)');
  t.notOk(logText.includes('SECRET'), 'no key in logs or in an inspected provider');
  t.notOk(exposition.join('\n').includes('SECRET'), 'no key in metrics');
});

t.test('account not ready is told to the operator once per code per 5 minutes, saying what to fix', async (t) => {
  const { provider, fake, logs, travel } = await harness(t);
  fake.accountNotReady = true;
  for (let i = 0; i < 5; i += 1) await rejection(provider.openCharge(charge()));
  const warns = () => logs().filter((line) => line.level === 'warn');
  t.equal(warns().length, 1, 'five failures, one line');
  t.match(warns()[0], { evt: 'provider_action_needed', provider: 'moove', code: 'PAYMENT_LINK_ACCOUNT_NOT_READY', httpStatus: 409 });
  t.match(String(warns()[0]?.msg), /create a Moove handle and set a default wallet/);

  travel(4 * 60_000);
  await rejection(provider.openCharge(charge()));
  t.equal(warns().length, 1, 'still inside the 5 minutes');
  travel(60_000 + 1);
  await rejection(provider.openCharge(charge()));
  t.equal(warns().length, 2, 'after 5 minutes, once more');
  t.match(warns()[1], { repeatsSinceLastNotice: 5 });
});

t.test('each operator-facing error code gets its own line', async (t) => {
  const { provider, fake, logs } = await harness(t);
  fake.accountNotReady = true;
  await rejection(provider.openCharge(charge()));
  fake.failNext(2, { status: 401, code: 'EXPIRED_API_KEY' });
  await rejection(provider.openCharge(charge()));
  await rejection(provider.openCharge(charge()));
  fake.failNext(1, { status: 403, code: 'INSUFFICIENT_API_SCOPE' });
  await rejection(provider.openCharge(charge()));
  fake.failNext(1, { status: 503 });
  fake.accountNotReady = false;
  fake.failNext(10, { status: 503 });
  await rejection(provider.openCharge(charge()));
  const warns = logs().filter((line) => line.level === 'warn');
  t.same(
    warns.map((line) => line.code),
    ['PAYMENT_LINK_ACCOUNT_NOT_READY', 'EXPIRED_API_KEY', 'INSUFFICIENT_API_SCOPE'],
    'a 5xx is not the operator’s to fix',
  );
  t.match(String(warns[1]?.msg), /expired/);
  t.match(String(warns[2]?.msg), /scope/);
});

t.test('provider requests are counted by operation and status', async (t) => {
  const { provider, fake, metrics } = await harness(t);
  fake.failNext(1, { status: 429 });
  fake.failNext(1, 'drop');
  const { providerRef } = await provider.openCharge(charge());
  await provider.readCharge(providerRef);
  const values = (await metrics.providerRequests.get()).values.map((v) => [v.labels.op, v.labels.status, v.value]);
  t.same(
    values.sort(),
    [
      ['create', '201', 1],
      ['create', '429', 1],
      ['create', 'network', 1],
      ['read', '200', 1],
    ].sort(),
  );
});

t.test('log lines never carry a link id or checkout URL', async (t) => {
  const { provider, fake, rawLogs } = await harness(t);
  fake.failNext(2, { status: 502 });
  const { providerRef } = await provider.openCharge(charge());
  fake.failNext(1, { status: 502 });
  await provider.readCharge(providerRef);
  t.ok(rawLogs().includes('provider_retry'), 'retries were logged (negative control)');
  t.notOk(rawLogs().includes(providerRef));
  t.notOk(rawLogs().includes('moove.xyz/@'));
});
