// The budget and allowance behaviours (SPEC §23) every Store must show, run by conformance.ts for
// each store (memory, Redis standalone, Redis Cluster): caps on calls and credits, all-or-nothing
// across counters, holds that count until concluded, idempotent re-runs, fixed windows, the stale
// sweep, and usage reads.
import { randomBytes } from 'node:crypto';
import type { Test } from 'tap';
import { quotaWindowStart, type HeldQuotas, type QuotaCounter, type QuotaDraw, type QuotaRequest, type SpendRequest, type Store } from '../../src/store/store.js';
import type { StoreFixture } from './conformance.js';

type Behaviour = (title: string, body: (f: StoreFixture, t: Test) => Promise<void>) => void;

const DAY = 86_400_000;
const MINUTE = 60_000;

const randomId = (prefix: string): string => `${prefix}${randomBytes(9).toString('base64url')}`;

/** A counter of a fresh subject (random, so tests never share counters). */
export function draw(now: number, overrides: Partial<QuotaDraw> = {}): QuotaDraw {
  const windowMs = overrides.windowMs ?? DAY;
  return {
    name: 'budget:daily',
    subject: randomId('p:'),
    windowMs,
    windowStart: quotaWindowStart(now, windowMs),
    calls: 1,
    credits: 0,
    maxCalls: null,
    maxCredits: null,
    ...overrides,
  };
}

export function quotaRequest(now: number, draws: QuotaDraw[], overrides: Partial<QuotaRequest> = {}): QuotaRequest {
  return { holdId: randomId('r_'), draws, deadline: now + MINUTE, ...overrides };
}

const counterOf = ({ name, subject, windowMs, windowStart }: QuotaCounter): QuotaCounter => ({ name, subject, windowMs, windowStart });

async function used(store: Store, counter: QuotaCounter): Promise<{ calls: number; credits: number }> {
  const [usage] = await store.quotaUsage([counterOf(counter)]);
  return { calls: usage?.calls ?? -1, credits: usage?.credits ?? -1 };
}

/** The stale sweep until it has released `expected` holds or 32 passes went by (Redis Cluster walks a slice of the slots per pass). */
export async function sweepQuotas(store: Store, now: number, expected: number): Promise<number> {
  let released = 0;
  for (let pass = 0; pass < 32 && released < expected; pass++) released += await store.releaseStaleQuotas(now, 100);
  return released;
}

export function quotaBehaviours(behaviour: Behaviour): void {
  behaviour('quotas: a call cap holds maxCalls calls and refuses the next with the counter, its window end and its use', async (f, t) => {
    const now = f.clock.now();
    const cap = draw(now, { maxCalls: 2 });
    t.same(await f.store.reserveQuotas(quotaRequest(now, [cap])), { kind: 'held' });
    t.same(await f.store.reserveQuotas(quotaRequest(now, [cap])), { kind: 'held' });
    t.same(await f.store.reserveQuotas(quotaRequest(now, [cap])), {
      kind: 'exceeded', name: cap.name, subject: cap.subject, resetsAt: cap.windowStart + cap.windowMs, usedCalls: 2, usedCredits: 0,
    });
    t.same(await used(f.store, cap), { calls: 2, credits: 0 });
  });

  behaviour('quotas: a credit cap counts credits, and a draw that would pass it is refused whole', async (f, t) => {
    const now = f.clock.now();
    const cap = draw(now, { calls: 1, credits: 3, maxCredits: 7 });
    t.same(await f.store.reserveQuotas(quotaRequest(now, [cap])), { kind: 'held' });
    t.same(await f.store.reserveQuotas(quotaRequest(now, [cap])), { kind: 'held' });
    const refused = await f.store.reserveQuotas(quotaRequest(now, [cap]));
    t.match(refused, { kind: 'exceeded', usedCalls: 2, usedCredits: 6 });
    // One credit is left: a one-credit call still fits.
    t.same(await f.store.reserveQuotas(quotaRequest(now, [{ ...cap, credits: 1 }])), { kind: 'held' });
    t.same(await used(f.store, cap), { calls: 3, credits: 7 });
  });

  behaviour('quotas: a request draws on all its counters or none, across subjects', async (f, t) => {
    const now = f.clock.now();
    // Subjects sorted so the refusing one is drawn last: the earlier ones must be given back.
    const [a, b, c] = [draw(now, { subject: 'p:a-' + randomId('') }), draw(now, { subject: 'h:b-' + randomId(''), name: 'budget:other' }), draw(now, { subject: 'p:z-' + randomId(''), maxCalls: 1 })];
    t.same(await f.store.reserveQuotas(quotaRequest(now, [c])), { kind: 'held' });
    const sameSubject = draw(now, { subject: a.subject, name: 'allowance:trial', maxCalls: 10 });
    const refused = await f.store.reserveQuotas(quotaRequest(now, [a, sameSubject, b, c]));
    t.match(refused, { kind: 'exceeded', name: c.name, subject: c.subject, usedCalls: 1 });
    t.same(await used(f.store, a), { calls: 0, credits: 0 });
    t.same(await used(f.store, sameSubject), { calls: 0, credits: 0 });
    t.same(await used(f.store, b), { calls: 0, credits: 0 });
    t.same(await used(f.store, c), { calls: 1, credits: 0 });
    // And with room everywhere, every counter is drawn on once.
    const d = { ...c, maxCalls: 5 };
    t.same(await f.store.reserveQuotas(quotaRequest(now, [a, sameSubject, b, d])), { kind: 'held' });
    t.same((await f.store.quotaUsage([a, sameSubject, b, d].map(counterOf))).map((u) => u.calls), [1, 1, 1, 2]);
  });

  behaviour('quotas: two draws on one counter in one request count together against its cap', async (f, t) => {
    const now = f.clock.now();
    const cap = draw(now, { maxCalls: 1 });
    t.match(await f.store.reserveQuotas(quotaRequest(now, [cap, cap])), { kind: 'exceeded', usedCalls: 0 });
    t.same(await used(f.store, cap), { calls: 0, credits: 0 });
  });

  behaviour('quotas: release gives the held draws back; commit keeps them', async (f, t) => {
    const now = f.clock.now();
    const cap = draw(now, { credits: 2, maxCalls: 1 });
    const first = quotaRequest(now, [cap]);
    t.same(await f.store.reserveQuotas(first), { kind: 'held' });
    t.match(await f.store.reserveQuotas(quotaRequest(now, [cap])), { kind: 'exceeded' }, 'a held draw counts toward the cap');
    await f.store.concludeQuotas(first.holdId, [cap], 'release');
    t.same(await used(f.store, cap), { calls: 0, credits: 0 });
    const second = quotaRequest(now, [cap]);
    t.same(await f.store.reserveQuotas(second), { kind: 'held' });
    await f.store.concludeQuotas(second.holdId, [cap], 'commit');
    t.same(await used(f.store, cap), { calls: 1, credits: 2 });
    t.match(await f.store.reserveQuotas(quotaRequest(now, [cap])), { kind: 'exceeded', usedCalls: 1, usedCredits: 2 });
  });

  behaviour('quotas: a concluded hold is left as it is by a second conclusion of either kind', async (f, t) => {
    const now = f.clock.now();
    const cap = draw(now);
    const committed = quotaRequest(now, [cap]);
    await f.store.reserveQuotas(committed);
    await f.store.concludeQuotas(committed.holdId, [cap], 'commit');
    await f.store.concludeQuotas(committed.holdId, [cap], 'release');
    t.same(await used(f.store, cap), { calls: 1, credits: 0 }, 'a release after the commit gives nothing back');
    const released = quotaRequest(now, [cap]);
    await f.store.reserveQuotas(released);
    await f.store.concludeQuotas(released.holdId, [cap], 'release');
    await f.store.concludeQuotas(released.holdId, [cap], 'release');
    await f.store.concludeQuotas(released.holdId, [cap], 'commit');
    t.same(await used(f.store, cap), { calls: 1, credits: 0 }, 'a second release never takes out another call\'s draw');
  });

  behaviour('quotas: a re-run with the same attempt answers as the first run and draws once', async (f, t) => {
    const now = f.clock.now();
    const cap = draw(now, { maxCalls: 1 });
    const request = quotaRequest(now, [cap], { attempt: 'a1' });
    t.same(await f.store.reserveQuotas(request), { kind: 'held' });
    t.same(await f.store.reserveQuotas(request), { kind: 'held' });
    t.same(await used(f.store, cap), { calls: 1, credits: 0 });
    // A refusal re-run with its attempt is refused again, even once the counter has room.
    const refused = quotaRequest(now, [cap], { attempt: 'a2' });
    const first = await f.store.reserveQuotas(refused);
    t.match(first, { kind: 'exceeded' });
    await f.store.concludeQuotas(request.holdId, [cap], 'release', 'c1');
    t.same(await f.store.reserveQuotas(refused), first);
    t.same(await used(f.store, cap), { calls: 0, credits: 0 });
    await f.store.concludeQuotas(request.holdId, [cap], 'release', 'c1');
    t.same(await used(f.store, cap), { calls: 0, credits: 0 });
  });

  behaviour('quotas: a hold id already holding is never drawn twice, whatever the attempt', async (f, t) => {
    const now = f.clock.now();
    const cap = draw(now, { maxCalls: 5 });
    const request = quotaRequest(now, [cap]);
    t.same(await f.store.reserveQuotas(request), { kind: 'held' });
    t.same(await f.store.reserveQuotas({ ...request, attempt: 'other' }), { kind: 'held' });
    t.same(await used(f.store, cap), { calls: 1, credits: 0 });
  });

  behaviour('quotas: a refusal never gives back a part an earlier reserve of the same hold drew', async (f, t) => {
    const now = f.clock.now();
    const a = draw(now, { subject: 'p:a-' + randomId('') });
    const full = draw(now, { subject: 'p:z-' + randomId(''), maxCalls: 0 });
    const request = quotaRequest(now, [a]);
    t.same(await f.store.reserveQuotas(request), { kind: 'held' });
    t.match(await f.store.reserveQuotas({ ...request, draws: [a, full] }), { kind: 'exceeded', subject: full.subject });
    t.same(await used(f.store, a), { calls: 1, credits: 0 });
    await f.store.concludeQuotas(request.holdId, [a], 'commit');
    t.same(await used(f.store, a), { calls: 1, credits: 0 });
  });

  behaviour('quotas: a new window starts a fresh counter', async (f, t) => {
    const windowMs = 10 * MINUTE;
    const now = f.clock.now();
    const cap = draw(now, { windowMs, maxCalls: 1 });
    t.same(await f.store.reserveQuotas(quotaRequest(now, [cap])), { kind: 'held' });
    t.match(await f.store.reserveQuotas(quotaRequest(now, [cap])), { kind: 'exceeded', resetsAt: cap.windowStart + windowMs });
    f.clock.advance(cap.windowStart + windowMs - now);
    const next = { ...cap, windowStart: quotaWindowStart(f.clock.now(), windowMs) };
    t.equal(next.windowStart, cap.windowStart + windowMs);
    t.same(await f.store.reserveQuotas(quotaRequest(f.clock.now(), [next])), { kind: 'held' });
    t.same(await used(f.store, next), { calls: 1, credits: 0 });
  });

  behaviour('quotas: the stale sweep gives back holds past their deadline, and only those', async (f, t) => {
    const now = f.clock.now();
    const [a, b] = [draw(now, { credits: 4 }), draw(now)];
    const stale = quotaRequest(now, [a, b], { deadline: now + MINUTE });
    const live = quotaRequest(now, [a], { deadline: now + 10 * MINUTE });
    await f.store.reserveQuotas(stale);
    await f.store.reserveQuotas(live);
    t.equal(await f.store.releaseStaleQuotas(now + MINUTE, 100), 0, 'a deadline not yet passed is left');
    f.clock.advance(2 * MINUTE);
    t.equal(await sweepQuotas(f.store, f.clock.now(), 2), 2, 'one hold part per subject');
    t.same(await used(f.store, a), { calls: 1, credits: 4 });
    t.same(await used(f.store, b), { calls: 0, credits: 0 });
    await f.store.concludeQuotas(stale.holdId, [a, b], 'commit');
    t.same(await used(f.store, a), { calls: 1, credits: 4 }, 'a commit after the sweep finds nothing to keep');
    t.equal(await f.store.releaseStaleQuotas(f.clock.now(), 100), 0);
  });

  behaviour('quotas: holdQuotas moves the deadline so the sweep leaves the hold; false once it is gone', async (f, t) => {
    const now = f.clock.now();
    const cap = draw(now);
    const request = quotaRequest(now, [cap], { deadline: now + MINUTE });
    await f.store.reserveQuotas(request);
    t.equal(await f.store.holdQuotas(request.holdId, [cap], now + 60 * MINUTE), true);
    f.clock.advance(5 * MINUTE);
    t.equal(await sweepQuotas(f.store, f.clock.now(), 1), 0);
    t.same(await used(f.store, cap), { calls: 1, credits: 0 });
    f.clock.advance(60 * MINUTE);
    t.equal(await sweepQuotas(f.store, f.clock.now(), 1), 1);
    t.same(await used(f.store, cap), { calls: 0, credits: 0 });
    t.equal(await f.store.holdQuotas(request.holdId, [cap], f.clock.now() + MINUTE), false);
  });

  behaviour('quotas: quotaUsage reads 0/0 for a counter never drawn on and echoes each counter', async (f, t) => {
    const now = f.clock.now();
    const drawn = draw(now, { credits: 5 });
    const never = counterOf(draw(now));
    await f.store.reserveQuotas(quotaRequest(now, [drawn]));
    t.same(await f.store.quotaUsage([never, counterOf(drawn)]), [
      { ...never, calls: 0, credits: 0 },
      { ...counterOf(drawn), calls: 1, credits: 5 },
    ]);
    t.same(await f.store.quotaUsage([]), []);
  });

  // ── a budget in the credit's own step (Store.quotasWithCredits: memory, Redis standalone) ────────────
  // Redis Cluster holds budgets beside the credit instead (their slots differ): redis-cluster.test.ts
  // checks that it says so and refuses budget parts in a credit call.

  behaviour('quotas with credits: a budget over its cap refuses first: no rate token, no credit, nothing drawn', async (f, t) => {
    if (!withCredits(f, t)) return;
    const now = f.clock.now();
    const handleHash = await f.handle({ credits: 5 });
    const open = draw(now, { subject: `h:${handleHash}`, credits: 1 });
    const full = draw(now, { maxCalls: 0 });
    const oneToken = { ratePerSecond: 0.001, burst: 1 };
    const refused = await f.store.reserve(f.spendRequest(handleHash, { bucket: oneToken, quotas: quotaRequest(now, [open, full]) }));
    t.same(refused, { kind: 'quota_exceeded', name: full.name, subject: full.subject, resetsAt: full.windowStart + full.windowMs, usedCalls: 0, usedCredits: 0 });
    t.same(await used(f.store, open), { calls: 0, credits: 0 }, 'the counter that had room drew nothing');
    t.same((await f.store.getHandle(handleHash))?.balances, { research: 5 }, 'no credit moved');
    t.match(await f.spend(handleHash, { bucket: oneToken }), { kind: 'reserved', remaining: 4 }, 'the one rate token was still there');
  });

  behaviour('quotas with credits: the budget is drawn only when the credit is reserved', async (f, t) => {
    if (!withCredits(f, t)) return;
    const now = f.clock.now();
    const principal = randomId('p');
    const cap = draw(now, { subject: `p:${principal}`, credits: 1, maxCalls: 10 });
    const poor = await f.handle({ credits: 0 });
    t.match(await f.spend(poor, { quotas: quotaRequest(now, [cap]) }), { kind: 'insufficient' });
    t.match(await f.spend(randomId('h_'), { quotas: quotaRequest(now, [cap]) }), { kind: 'unknown_handle' });
    const bound = await f.handle({ credits: 5, principal: 'someone-else' });
    t.match(await f.spend(bound, { principal, quotas: quotaRequest(now, [cap]) }), { kind: 'bound_to_other_principal' });
    const limited = await f.handle({ credits: 5 });
    await f.spend(limited, { bucket: { ratePerSecond: 0.001, burst: 1 } });
    t.match(await f.spend(limited, { bucket: { ratePerSecond: 0.001, burst: 1 }, quotas: quotaRequest(now, [cap]) }), { kind: 'rate_limited' });
    t.same(await used(f.store, cap), { calls: 0, credits: 0 }, 'no refused call drew on the budget');
    const rich = await f.handle({ credits: 5 });
    const request = quotaRequest(now, [cap, draw(now, { subject: `h:${rich}`, name: 'budget:per-handle' })]);
    t.match(await f.spend(rich, { quotas: request }), { kind: 'reserved', remaining: 4 });
    t.same(await used(f.store, cap), { calls: 1, credits: 1 });
    t.same(await f.store.reserveQuotas({ ...request, attempt: 'later' }), { kind: 'held' }, 'the hold is there under its id');
    t.same(await used(f.store, cap), { calls: 1, credits: 1 }, 'and is never drawn twice');
  });

  behaviour('quotas with credits: concurrent calls against maxCalls 7 with ample credits reserve exactly 7', async (f, t) => {
    if (!withCredits(f, t)) return;
    const { now, handleHash, cap } = await budgetedHandle(f, 100, { credits: 1, maxCalls: 7 });
    const decisions = await Promise.all(Array.from({ length: 40 }, () => f.spend(handleHash, { quotas: quotaRequest(now, [cap]) })));
    t.equal(decisions.filter((d) => d.kind === 'reserved').length, 7);
    t.equal(decisions.filter((d) => d.kind === 'quota_exceeded').length, 33);
    t.same((await f.store.getHandle(handleHash))?.balances, { research: 93 });
    t.same(await used(f.store, cap), { calls: 7, credits: 7 });
  });

  behaviour('quotas with credits: commit keeps the draws and ends the hold in its step; release gives them back', async (f, t) => {
    if (!withCredits(f, t)) return;
    const { now, handleHash, cap } = await budgetedHandle(f, 5, { credits: 2, maxCredits: 10 });
    const kept = f.spendRequest(handleHash, { quotas: quotaRequest(now, [cap]) });
    const gone = f.spendRequest(handleHash, { quotas: quotaRequest(now, [cap]) });
    await f.store.reserve(kept);
    await f.store.reserve(gone);
    t.same(await used(f.store, cap), { calls: 2, credits: 4 });
    t.equal(await f.store.commit(handleHash, kept.reservationId, 'fetch_readable', undefined, heldBy(kept)), 3);
    t.equal(await f.store.release(handleHash, gone.reservationId, undefined, heldBy(gone)), 4);
    t.same(await used(f.store, cap), { calls: 1, credits: 2 }, 'the committed call counts, the released one does not');
    f.clock.advance(10 * MINUTE);
    t.equal(await sweepQuotas(f.store, f.clock.now(), 1), 0, 'no hold is left for the stale sweep to give back');
    t.same(await used(f.store, cap), { calls: 1, credits: 2 });
  });

  behaviour('quotas with credits: a commit or release that finds no reservation leaves the hold as it is', async (f, t) => {
    if (!withCredits(f, t)) return;
    const { now, handleHash, cap } = await budgetedHandle(f, 5, { credits: 1 });
    const request = f.spendRequest(handleHash, { quotas: quotaRequest(now, [cap]) });
    await f.store.reserve(request);
    const hold = heldBy(request);
    t.not(await f.store.release(handleHash, request.reservationId), null, 'concluded elsewhere, without its hold');
    t.equal(await f.store.commit(handleHash, request.reservationId, '', undefined, hold), null);
    t.equal(await f.store.release(handleHash, request.reservationId, undefined, hold), null);
    t.same(await used(f.store, cap), { calls: 1, credits: 1 }, 'still held: its caller concludes it by how the credit went');
    await f.store.concludeQuotas(hold.holdId, hold.counters, 'release');
    t.same(await used(f.store, cap), { calls: 0, credits: 0 });
  });

  behaviour('quotas with credits: a re-run of the same attempt answers as the first run and moves once', async (f, t) => {
    if (!withCredits(f, t)) return;
    const { now, handleHash, cap } = await budgetedHandle(f, 5, { credits: 1, maxCalls: 1 });
    const request = f.spendRequest(handleHash, { attempt: 'a1', quotas: quotaRequest(now, [cap]) });
    const first = await f.store.reserve(request);
    t.same(await f.store.reserve(request), first);
    t.match(first, { kind: 'reserved', remaining: 4 });
    const hold = heldBy(request);
    t.equal(await f.store.commit(handleHash, request.reservationId, '', 'c1', hold), 4);
    t.equal(await f.store.commit(handleHash, request.reservationId, '', 'c1', hold), 4);
    t.same(await used(f.store, cap), { calls: 1, credits: 1 });
    t.same((await f.store.getHandle(handleHash))?.balances, { research: 4 });
    const refused = f.spendRequest(handleHash, { attempt: 'a2', quotas: quotaRequest(now, [cap]) });
    const over = await f.store.reserve(refused);
    t.match(over, { kind: 'quota_exceeded', usedCalls: 1 });
    t.same(await f.store.reserve(refused), over);
  });
}

/** A handle holding `credits` and a budget counter of its own (subject `h:<hash>`) with these caps and draw. */
async function budgetedHandle(f: StoreFixture, credits: number, cap: Partial<QuotaDraw>): Promise<{ now: number; handleHash: string; cap: QuotaDraw }> {
  const now = f.clock.now();
  const handleHash = await f.handle({ credits });
  return { now, handleHash, cap: draw(now, { subject: `h:${handleHash}`, ...cap }) };
}

/** The hold a credit request with budgets makes once reserved. */
function heldBy(request: SpendRequest): HeldQuotas {
  if (!request.quotas) throw new Error('a credit request without budgets holds none');
  return { holdId: request.quotas.holdId, counters: request.quotas.draws.map(counterOf) };
}

/** False (and one passing assertion saying why) for a store that holds budgets beside the credit. */
function withCredits(f: StoreFixture, t: Test): boolean {
  if (f.store.quotasWithCredits) return true;
  t.pass('this store holds budgets beside the credit (Redis Cluster): redis-cluster.test.ts checks it');
  return false;
}
