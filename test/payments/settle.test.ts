// The Settler against the memory store (SPEC §7.4, §7.5): the settlement boundaries on the price
// snapshot, and exactly one grant however many observers (agent retries, reconcilers, webhooks)
// race on one completed charge. The race reads real links from the Moove fake over HTTP; a naive
// check-then-grant store is the negative control that proves the race test can fail.
import { Writable } from 'node:stream';
import t from 'tap';
import { createLogger } from '../../src/observability/logger.js';
import { createMetrics, type Metrics } from '../../src/observability/metrics.js';
import { MooveProvider } from '../../src/payments/moove.js';
import { ProviderError, type ChargeReading, type PaymentProvider } from '../../src/payments/provider.js';
import { Reconciler } from '../../src/payments/reconciler.js';
import { Settler } from '../../src/payments/settle.js';
import { mintNonce } from '../../src/paywall/handles.js';
import { MemoryStore } from '../../src/store/memory.js';
import type { ChargeRecord, ClaimResult, SettlementClaim, Store } from '../../src/store/store.js';
import { startMooveFake, type MooveFake } from '../helpers/moove-fake.js';
import { sleep, systemClock, type Clock } from '../../src/clock.js';
import { TestClock, waitFor, wallClock } from '../helpers/clock.js';

type Tap = Pick<typeof t, 'teardown'>;

const POLICY = { tolerance: 0.005, minimumFraction: 0.1 };
const PACK = { label: 'Research tools', amount: '5.00', currency: 'USDC', credits: 250, tool: 'fetch_readable' };
const HOUR = 3_600_000;

/** A provider that is never asked: the boundary tests hand readings to apply() directly. */
const unusedProvider: PaymentProvider = {
  name: 'moove',
  openCharge: async () => {
    throw new Error('not used');
  },
  readCharge: async () => {
    throw new Error('not used');
  },
};

interface Harness {
  store: Store;
  settler: Settler;
  metrics: Metrics;
  logs: () => Array<Record<string, unknown>>;
}

function harness(store: Store = new MemoryStore(), provider: PaymentProvider = unusedProvider, clock: Clock = systemClock): Harness {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(...chunk.toString('utf8').split('\n').filter(Boolean));
      done();
    },
  });
  const metrics = createMetrics(async () => 0);
  const settler = new Settler({ store, provider, policy: POLICY, metrics, logger: createLogger('info', sink), clock });
  return { store, settler, metrics, logs: () => lines.map((line) => JSON.parse(line) as Record<string, unknown>) };
}

/** A live handle with one pending charge carrying `snapshot` and the given provider link. */
async function pendingCharge(store: Store, providerRef = `link-${mintNonce()}`, snapshot = PACK): Promise<ChargeRecord> {
  const handleHash = `hash-${mintNonce()}`;
  await store.createHandle({ handleHash, fingerprint: 'tb_s_test..abcd', principal: null, ttlMs: HOUR });
  const begun = await store.beginCharge({ handleHash, sku: 'research', nonce: mintNonce(), snapshot, now: Date.now(), ttlMs: HOUR, firstPollDelayMs: 3_000 });
  const attached = await store.attachLink(handleHash, begun.charge.nonce, { providerRef, checkoutUrl: `https://moove.xyz/@shop/pay/${providerRef}` });
  if (!attached) throw new Error('the charge did not take its link');
  return attached;
}

const completed = (receivedAmount: string | null): ChargeReading => ({ status: 'completed', receivedAmount });

async function balanceOf(store: Store, charge: ChargeRecord): Promise<number> {
  return (await store.getHandle(charge.handleHash))?.balances.research ?? 0;
}

async function counterValue(metrics: Metrics, name: 'settlements' | 'credits', labels: Record<string, string>): Promise<number> {
  const { values } = await metrics[name].get();
  return values.filter((v) => Object.entries(labels).every(([k, want]) => (v.labels as Record<string, unknown>)[k] === want)).reduce((sum, v) => sum + v.value, 0);
}

// ---------------------------------------------------------------------------------------------
// Boundaries of the rule (§7.4), through apply(): credits granted and the charge's final status.

const boundaries: Array<{ name: string; received: string | null; credits: number; status: 'settled' | 'underpaid'; result: string }> = [
  { name: 'exactly 99.5% of the price is a full pack', received: '4.975', credits: 250, status: 'settled', result: 'granted' },
  { name: 'just under 99.5% is pro rata', received: '4.974999', credits: 248, status: 'settled', result: 'partial' },
  { name: 'half the price is half the pack (floor)', received: '2.51', credits: 125, status: 'settled', result: 'partial' },
  { name: 'exactly 10% is still pro rata', received: '0.5', credits: 25, status: 'settled', result: 'partial' },
  { name: 'under 10% grants nothing and leaves the charge underpaid', received: '0.499999', credits: 0, status: 'underpaid', result: 'underpaid' },
  { name: 'zero received grants nothing', received: '0', credits: 0, status: 'underpaid', result: 'underpaid' },
  { name: 'overpayment grants exactly the pack', received: '50.00', credits: 250, status: 'settled', result: 'granted' },
  { name: 'a missing receivedAmount grants the full pack', received: null, credits: 250, status: 'settled', result: 'granted' },
];

for (const b of boundaries) {
  t.test(`settlement: ${b.name}`, async (t) => {
    const { store, settler, metrics } = harness();
    const charge = await pendingCharge(store);
    const observation = await settler.apply(charge, completed(b.received));
    t.equal(observation, b.status === 'underpaid' ? 'underpaid' : 'granted');
    t.equal(await balanceOf(store, charge), b.credits, 'credits on the handle');
    const after = await store.getCharge(charge.handleHash, charge.nonce);
    t.equal(after?.status, b.status, 'charge status');
    t.equal(after?.grantedCredits, b.credits, 'grantedCredits recorded on the charge');
    t.equal(after?.receivedAmount, b.received, 'receivedAmount recorded as reported');
    t.equal(await counterValue(metrics, 'settlements', { result: b.result }), 1, `tollbooth_settlements_total{result="${b.result}"}`);
  });
}

t.test('settlement: pro rata on a small pack grants at least 1 credit', async (t) => {
  const { store, settler } = harness();
  const charge = await pendingCharge(store, undefined, { ...PACK, credits: 3 });
  // floor(3 × 0.5 / 5) = 0 → the minimum of 1 applies.
  t.equal(await settler.apply(charge, completed('0.5')), 'granted');
  t.equal(await balanceOf(store, charge), 1);
});

t.test('settlement: uses the price snapshot on the charge, compared by value ("5" vs "5.00")', async (t) => {
  const { store, settler } = harness();
  const cheap = await pendingCharge(store, undefined, { ...PACK, amount: '5.00', credits: 250 });
  const dear = await pendingCharge(store, undefined, { ...PACK, amount: '10.00', credits: 250 });
  await settler.apply(cheap, completed('5'));
  await settler.apply(dear, completed('5'));
  t.equal(await balanceOf(store, cheap), 250, 'Moove normalises 5.00 to 5: still a full payment');
  t.equal(await balanceOf(store, dear), 125, 'the same 5 against a 10.00 snapshot is half');
});

t.test('settlement: an active or expired reading grants nothing and changes nothing', async (t) => {
  const { store, settler } = harness();
  const charge = await pendingCharge(store);
  t.equal(await settler.apply(charge, { status: 'active', receivedAmount: null }), 'still_pending');
  t.equal(await settler.apply(charge, { status: 'expired', receivedAmount: null }), 'expired');
  t.equal(await balanceOf(store, charge), 0);
});

t.test('settlement: an underpaid charge is final: a later full reading grants nothing more', async (t) => {
  const { store, settler } = harness();
  const charge = await pendingCharge(store);
  t.equal(await settler.apply(charge, completed('0.10')), 'underpaid');
  t.equal(await settler.apply(charge, completed('5.00')), 'underpaid', 'the second reading is not a second settlement');
  t.equal(await balanceOf(store, charge), 0);
  t.equal((await store.listCharges('underpaid')).length, 1, 'listed for the operator');
});

t.test('settlement: a payment that completes after the charge was abandoned is still granted', async (t) => {
  const { store, settler } = harness();
  const charge = await pendingCharge(store);
  t.ok(await store.abandonCharge(charge.handleHash, charge.nonce, charge.expiresAt + 60_000), 'abandoned');
  t.equal(await settler.apply({ ...charge, status: 'abandoned' }, completed('5.00')), 'granted');
  t.equal(await balanceOf(store, charge), 250);
  t.equal((await store.getCharge(charge.handleHash, charge.nonce))?.status, 'settled');
});

t.test('settlement: duplicate and out-of-order readings after settlement change nothing', async (t) => {
  const { store, settler } = harness();
  const charge = await pendingCharge(store);
  t.equal(await settler.apply(charge, completed('5.00')), 'granted');
  t.equal(await settler.apply(charge, completed('5.00')), 'already_settled', 'a duplicate');
  t.equal(await settler.apply(charge, { status: 'active', receivedAmount: null }), 'still_pending', 'a stale "active" reading arriving late');
  t.equal(await balanceOf(store, charge), 250);
  t.equal((await store.getCharge(charge.handleHash, charge.nonce))?.status, 'settled', 'still settled');
});

// ---------------------------------------------------------------------------------------------
// Exactly once (§7.5): 50 observers on one completed charge, over real HTTP to the Moove fake.

async function mooveFake(t: Tap): Promise<{ fake: MooveFake; provider: MooveProvider }> {
  const fake = await startMooveFake({ apiKeys: ['test-key'] });
  t.teardown(() => fake.close());
  const provider = new MooveProvider({ apiKey: 'test-key', baseUrl: fake.url, logger: createLogger('silent'), random: () => 0, pacing: { ratePerSecond: 1_000, burst: 1_000 } });
  t.teardown(() => provider.close());
  return { fake, provider };
}

/**
 * Holds every reading until `count` of them are in hand (or a second passed), then answers them all
 * at once: the observers then reach the store together, however slowly the machine ran the reads.
 */
function answeringTogether(inner: PaymentProvider, count: number): PaymentProvider {
  let arrived = 0;
  let release: () => void = () => undefined;
  const gate = new Promise<void>((resolve) => {
    release = resolve;
  });
  return {
    name: inner.name,
    openCharge: (input, signal) => inner.openCharge(input, signal),
    readCharge: async (ref, signal) => {
      const reading = await inner.readCharge(ref, signal);
      if (++arrived >= count) release();
      await Promise.race([gate, new Promise((resolve) => setTimeout(resolve, 1_000))]);
      return reading;
    },
  };
}

/** 20 webhook triggers, 20 agent retries and 10 reconcilers (one store lease) start together. */
async function race(h: Harness, charge: ChargeRecord, provider: PaymentProvider): Promise<void> {
  const reconcilers = Array.from({ length: 10 }, () => new Reconciler({ store: h.store, provider, settler: h.settler, metrics: h.metrics, logger: createLogger('silent'), intervalMs: 60_000, clock: wallClock(() => Date.now() + 3_000) }));
  const observers: Array<Promise<unknown>> = [];
  for (let i = 0; i < 20; i++) observers.push(h.settler.observeByRef(charge.providerRef as string));
  for (let i = 0; i < 20; i++) observers.push(h.settler.observe(charge));
  for (const reconciler of reconcilers) observers.push(reconciler.tick());
  await Promise.all(observers);
}

t.test('exactly once: 50 concurrent observers of one completed charge make one grant of the pack', async (t) => {
  const { fake, provider } = await mooveFake(t);
  const h = harness(new MemoryStore(), answeringTogether(provider, 20));
  const link = await provider.openCharge({ nonce: mintNonce(), sku: 'research', ...PACK, expiresAt: Date.now() + HOUR });
  const charge = await pendingCharge(h.store, link.providerRef);
  await fake.pay(link.providerRef, '5.00');

  await race(h, charge, provider);

  const reads = fake.calls.filter((call) => call.method === 'GET').length;
  t.ok(reads >= 20, `the observers really raced to the provider (${reads} reads)`);
  t.equal(await balanceOf(h.store, charge), 250, 'credits == pack size');
  t.equal((await h.store.getCharge(charge.handleHash, charge.nonce))?.grantedCredits, 250);
  t.equal(await counterValue(h.metrics, 'settlements', {}), 1, 'one settlement counted');
  t.equal(await counterValue(h.metrics, 'credits', { kind: 'granted' }), 250, 'credits granted counted once');
  t.equal(h.logs().filter((line) => line.evt === 'settlement').length, 1, 'one settlement log line');
});

/** Check, then (after one store round trip) grant: the race the atomic claim exists to prevent. */
class CheckThenGrantStore extends MemoryStore {
  override async claimSettlement(claim: SettlementClaim): Promise<ClaimResult> {
    const before = await this.getCharge(claim.handleHash, claim.nonce);
    if (before?.status !== 'pending' && before?.status !== 'abandoned') return { claimed: false, charge: before, balance: 0 };
    await new Promise((resolve) => setImmediate(resolve));
    const balance = claim.credits > 0 ? await this.grantCredits(claim.handleHash, before.sku, claim.credits) : 0;
    await super.claimSettlement({ ...claim, credits: 0 });
    return { claimed: true, charge: before, balance };
  }
}

t.test('negative control: the same race on a check-then-grant store grants more than once', async (t) => {
  const { fake, provider } = await mooveFake(t);
  const h = harness(new CheckThenGrantStore(), answeringTogether(provider, 20));
  const link = await provider.openCharge({ nonce: mintNonce(), sku: 'research', ...PACK, expiresAt: Date.now() + HOUR });
  const charge = await pendingCharge(h.store, link.providerRef);
  await fake.pay(link.providerRef, '5.00');

  await race(h, charge, provider);

  t.ok((await balanceOf(h.store, charge)) > 250, 'more than one pack granted: the race test can detect a broken store');
});

// ---------------------------------------------------------------------------------------------
// §6.5 last rule: a retry that finds another replica reading the provider waits for that read.

/** A provider whose reads answer `reading` after `delayMs` on `clock`, counting them. */
function slowProvider(reading: ChargeReading, delayMs: number, clock: Clock = systemClock): PaymentProvider & { reads: number } {
  const provider = {
    name: 'moove' as const,
    reads: 0,
    openCharge: unusedProvider.openCharge.bind(unusedProvider),
    readCharge: async () => {
      provider.reads++;
      await sleep(clock, delayMs);
      return reading;
    },
  };
  return provider;
}

// Both replicas' settlers, the providers' read times and the store run on one test clock: the waits are
// moved through, not slept, and "how long" is asserted in clock time.
t.test('waiting: a retry on another replica sees the grant of the read under way instead of skipping', async (t) => {
  const clock = new TestClock(Date.now());
  const store = new MemoryStore({ now: clock.now });
  const charge = await pendingCharge(store);
  const reader = slowProvider(completed('5.00'), 400, clock);
  const waiterProvider = slowProvider(completed('5.00'), 0, clock);
  const replicaA = harness(store, reader, clock).settler;
  const replicaB = harness(store, waiterProvider, clock).settler;
  const first = replicaA.observe(charge, { awaitOtherRead: true });
  await waitFor(() => reader.reads === 1, 'A holding the slot and reading');
  let seen: string | undefined;
  const waiting = replicaB.observe(charge, { awaitOtherRead: true }).then((observation) => (seen = observation));
  await clock.advance(399);
  t.equal(seen, undefined, 'B waits while A reads');
  await clock.advance(101); // A's read ends at 400 ms; B looks again on its next 50 ms tick
  await waiting;
  t.equal(seen, 'already_settled', 'B sees the outcome of A\'s read, long before the 2 s floor');
  t.equal(await first, 'granted');
  t.same([reader.reads, waiterProvider.reads], [1, 0], 'one provider read in all');
  t.equal(await balanceOf(store, charge), 250, 'granted once');
});

t.test('waiting: the wait for another replica\'s read is bounded by the poll floor', async (t) => {
  const clock = new TestClock(Date.now());
  const store = new MemoryStore({ now: clock.now });
  const charge = await pendingCharge(store);
  const hung = slowProvider(completed('5.00'), 4_000, clock);
  const fresh = slowProvider({ status: 'active', receivedAmount: null }, 0, clock);
  const first = harness(store, hung, clock).settler.observe(charge);
  await waitFor(() => hung.reads === 1, 'A holding the slot and reading');
  let observation: string | undefined;
  const waiting = harness(store, fresh, clock).settler.observe(charge, { awaitOtherRead: true }).then((seen) => (observation = seen));
  await clock.advance(1_900);
  t.equal(observation, undefined, 'still waiting short of the 2 s floor');
  await clock.advance(200);
  await waiting;
  t.equal(observation, 'still_pending', 'at the floor, not at the end of the 4 s read: then read the link itself');
  t.equal(fresh.reads, 1);
  await clock.advance(2_000); // the hung read ends
  await first;
});

t.test('waiting: a retry after another replica\'s read ended unpaid answers at once, without waiting out the 2 s bound', async (t) => {
  const clock = new TestClock(Date.now());
  const store = new MemoryStore({ now: clock.now });
  const charge = await pendingCharge(store);
  const reader = slowProvider({ status: 'active', receivedAmount: null }, 100, clock);
  const waiterProvider = slowProvider({ status: 'active', receivedAmount: null }, 0, clock);
  const first = harness(store, reader, clock).settler.observe(charge, { awaitOtherRead: true });
  await waitFor(() => reader.reads === 1, 'A holding the slot and reading');
  await clock.advance(100);
  t.equal(await first, 'still_pending', 'A read the link: active, unpaid');
  t.match(await store.getCharge(charge.handleHash, charge.nonce), { lastReadAt: clock.now() - 100 }, 'the store records that the read of that slot ended');

  const startedAt = clock.monotonic();
  let seen: string | undefined;
  const retry = harness(store, waiterProvider, clock).settler.observe(charge, { awaitOtherRead: true }).then((observation) => (seen = observation));
  await waitFor(() => seen !== undefined, 'the retry on replica B answering with the clock standing still', { timeoutMs: 3_000 });
  await retry;
  t.equal(seen, 'still_pending', 'B answers with the outcome of A\'s finished read');
  t.equal(clock.monotonic() - startedAt, 0, 'no clock time passed: nothing waited for the poll floor');
  t.equal(waiterProvider.reads, 0, 'and B did not read the provider again inside the floor');
});

t.test('waiting: a read that failed does not count as done (the retry still waits, then reads itself)', async (t) => {
  const clock = new TestClock(Date.now());
  const store = new MemoryStore({ now: clock.now });
  const charge = await pendingCharge(store);
  const failing: PaymentProvider = {
    ...slowProvider(completed('5.00'), 0, clock),
    readCharge: () => Promise.reject(new ProviderError('server', 'the provider is down')),
  };
  await t.rejects(harness(store, failing, clock).settler.observe(charge));
  t.equal((await store.getCharge(charge.handleHash, charge.nonce))?.lastReadAt, undefined, 'no read recorded as done');
  const fresh = slowProvider({ status: 'active', receivedAmount: null }, 0, clock);
  let seen: string | undefined;
  const retry = harness(store, fresh, clock).settler.observe(charge, { awaitOtherRead: true }).then((observation) => (seen = observation));
  await clock.advance(1_000);
  t.equal(seen, undefined, 'still waiting inside the floor');
  await clock.advance(1_100);
  await retry;
  t.equal(seen, 'still_pending');
  t.equal(fresh.reads, 1, 'read the link itself once the floor passed');
});

t.test('waiting: in one process a second observer joins the read under way (no store polling, no second read)', async (t) => {
  const store = new MemoryStore();
  const charge = await pendingCharge(store);
  const provider = slowProvider(completed('5.00'), 200);
  const { settler } = harness(store, provider);
  const results = await Promise.all([settler.observe(charge, { awaitOtherRead: true }), settler.observe(charge, { awaitOtherRead: true }), settler.observe(charge)]);
  t.same(results.sort(), ['already_settled', 'already_settled', 'granted']);
  t.equal(provider.reads, 1);
  t.equal(await balanceOf(store, charge), 250);
});
