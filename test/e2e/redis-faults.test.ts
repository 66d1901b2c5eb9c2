// Faults with real processes (SPEC §6.5, §8, §11): redis-server SIGKILLed mid-load and restarted,
// priced calls while Redis is down, and a gateway SIGKILLed while it holds a reservation.
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import t, { type Test } from 'tap';
import { Agent } from 'undici';
import {
  balanceOf,
  callTool,
  HASH_SECRET,
  connectStore,
  heldReservations,
  payDevCheckout,
  redisGatewayConfig,
  startGatewayProcess,
  tally,
  waitForNoReservations,
  type CallOutcome,
  type GatewayProcess,
  type RedisTarget,
} from '../helpers/gateway-process.js';
import { waitFor } from '../helpers/clock.js';
import { matchSpends, runLedger } from '../helpers/run-ledger.js';
import { hashHandle } from '../../src/paywall/handles.js';
import { startPaidUpstream, type PaidUpstream } from '../helpers/paid-upstream.js';
import { startRedis } from '../helpers/redis-server.js';

const CALL_DEADLINE_MS = 2_000;
const REFUSAL_BOUND_MS = 1_200;

interface Setup {
  upstream: PaidUpstream;
  gateways: GatewayProcess[];
  target: RedisTarget;
  keyPrefix: string;
}

async function setUp(t: Test, target: RedisTarget, replicas: number, credits: number, logLevel: 'warn' | 'info' = 'warn'): Promise<Setup> {
  const upstream = await startPaidUpstream('stateless-json');
  t.teardown(() => upstream.close());
  const keyPrefix = `tbfault${randomBytes(3).toString('hex')}:`;
  const config = redisGatewayConfig(upstream.url, target, keyPrefix, {
    upstream: { url: upstream.url, callDeadline: CALL_DEADLINE_MS },
    payments: { provider: 'dev', reconcile: { interval: '1s' } },
    skus: { research: { label: 'Research tools', amount: '5.00', currency: 'USDC', credits } },
    logging: { level: logLevel }, // info: the call lines that name each committed call's reservation
  });
  const gateways = await Promise.all(Array.from({ length: replicas }, () => startGatewayProcess(t, config)));
  return { upstream, gateways, target, keyPrefix };
}

/** Challenge, pay the dev checkout: a handle holding the pack. */
async function fundedHandle(gateway: GatewayProcess): Promise<string> {
  const challenge = await callTool(gateway.url, 'fetch_readable', { url: 'https://example.com/' });
  if (challenge.kind !== 'challenged') throw new Error(`expected a challenge, got ${JSON.stringify(challenge)}`);
  const status = await payDevCheckout(challenge.checkoutUrl, gateway.origin);
  if (status !== 303) throw new Error(`the dev checkout answered ${status}`);
  return challenge.handle;
}

t.test('redis-server SIGKILLed mid-load and restarted: every credit spent is a delivered receipt or a logged lost commit reply', async (t) => {
  const redis = await startRedis({ persist: true });
  t.teardown(() => redis.stop());
  const { upstream, gateways, target, keyPrefix } = await setUp(t, { url: redis.url }, 2, 1_000, 'info');
  const store = await connectStore(t, target, keyPrefix);
  const handle = await fundedHandle(gateways[0]!);
  const before = (await balanceOf(store, handle)) as number;

  const agent = new Agent({ connections: 8 });
  t.teardown(() => agent.close());
  const outcomes: CallOutcome[] = [];
  let running = true;
  const worker = async (index: number): Promise<void> => {
    for (let i = 0; running; i++) {
      const outcome = await callTool(gateways[(index + i) % gateways.length]!.url, 'fetch_readable', { url: `https://example.com/${index}/${i}`, tollboothToken: handle }, agent);
      outcomes.push(outcome);
      if (outcome.kind === 'refused') await sleep(50); // a refused caller backs off a little
    }
  };
  const load = Promise.all(Array.from({ length: 12 }, (_, index) => worker(index)));
  // Each phase lasts until the load has shown what the phase is about (not a fixed time a loaded machine
  // may not fill): paid calls, then refusals with Redis down, then paid calls again after the restart.
  const count = (from: number, kind: string): number => tally(outcomes.slice(from))[kind] ?? 0;
  await waitFor(() => count(0, 'paid') >= 24, 'paid calls before the kill', { timeoutMs: 30_000 });
  const beforeKill = outcomes.length;
  redis.kill('SIGKILL');
  await waitFor(() => count(beforeKill, 'refused:payments_unavailable') >= 12, 'refusals while Redis is down', { timeoutMs: 30_000 });
  const whileDown = tally(outcomes.slice(beforeKill));
  await redis.restart();
  const restartedAt = Date.now();
  const atRestart = outcomes.length;
  await waitFor(() => count(atRestart, 'paid') >= 12, 'paid calls after the restart', { timeoutMs: 30_000 });
  running = false;
  await load;
  const afterRestart = tally(outcomes.filter((_, index) => index >= beforeKill));

  // Reserves whose replies were lost hold credits until the reconciler's stale sweep (deadline + 5 s).
  const releaseWaitMs = await waitForNoReservations(target, keyPrefix, handle, 20_000);
  const after = (await balanceOf(store, handle)) as number;
  const spent = before - after;
  const upstreamCalls = upstream.callsOf('fetch_readable').length;
  const counts = tally(outcomes);
  const receipts = counts.paid ?? 0;
  // Reached the upstream but not charged (SPEC §6.5): the commit failed, so the result was withheld
  // (refused payments_unavailable, like a call refused before it was forwarded), or stopped at the call
  // deadline (a slow moment right after the restart) and released.
  const uncharged = (counts['refused:payments_unavailable'] ?? 0) + (counts['refused:deadline_exceeded'] ?? 0);
  t.comment(
    `${outcomes.length} calls (${JSON.stringify(counts)}); while Redis was down ${JSON.stringify(whileDown)}; from the kill on ${JSON.stringify(afterRestart)}; ` +
      `balance ${before} → ${after} (spent ${spent}), upstream calls ${upstreamCalls}, receipts ${receipts}; ` +
      `stale reservations gone ${releaseWaitMs} ms after the load (${Date.now() - restartedAt} ms after the restart)`,
  );

  t.same(
    Object.keys(counts).filter((kind) => !['paid', 'refused:payments_unavailable', 'refused:deadline_exceeded'].includes(kind)),
    [],
    'calls were paid, or refused payments_unavailable/deadline_exceeded: never a result without a receipt (§6.5), never a 5xx or a reset',
  );
  t.ok((whileDown['refused:payments_unavailable'] ?? 0) > 0, 'calls were refused while Redis was down');
  t.ok(receipts > beforeKill / 2 && (afterRestart.paid ?? 0) > 0, 'calls were paid before the kill and again after the restart');
  t.ok(spent <= upstreamCalls, `no credit spent without an upstream call (spent ${spent}, upstream ${upstreamCalls})`);
  t.ok(upstreamCalls - spent <= uncharged, `every upstream call was charged unless its commit failed (result withheld) or it hit the deadline (${upstreamCalls - spent} uncharged, ${uncharged} such answers)`);

  // The exact ledger of the run: granted = spent + remaining, and each spend is one call, matched by
  // its reservation id to a receipt the caller got or to a commit whose reply was lost with Redis
  // (it ran; the gateway saw a failure, logged it with the ref and refused payments_unavailable).
  const ledger = await runLedger(store, hashHandle(handle, HASH_SECRET), 'research');
  const logs = (await Promise.all(gateways.map((gateway) => gateway.settledLogs()))).flat();
  const match = matchSpends(ledger.entries, logs);
  t.comment(
    `ledger: granted ${ledger.granted} = spent ${ledger.spent} + balance ${ledger.balance} + reserved ${ledger.reserved}; ${match.delivered.length} spends delivered with a receipt, ` +
      `${match.lostReplies.length} commits ran but their reply was lost (caller refused), ${match.failedCommits} logged commit failures that spent nothing`,
  );
  t.same(ledger.mismatches, [], 'ledger verify: sequence, running totals, hash chain and stored balance agree');
  t.equal(ledger.granted, 1_000, 'the one settlement granted the pack');
  t.equal(ledger.granted, ledger.spent + ledger.balance + ledger.reserved, 'granted = spent + remaining');
  t.equal(ledger.reserved, 0, 'nothing is held any more');
  t.equal(ledger.spent, spent, 'the ledger says what the balance says');
  t.equal(ledger.spends, ledger.spent, 'one credit per spend entry');
  t.same(match.duplicated, [], 'no call spent twice');
  t.same(match.unaccounted, [], 'every spend is a call the gateway committed or a commit it logged as failed');
  t.same(match.committedWithoutSpend, [], 'every call logged as committed has its spend entry');
  t.equal(match.delivered.length, receipts, 'the spends of committed calls are exactly the receipts the callers got');
  t.equal(ledger.spent, receipts + match.lostReplies.length, `spent = receipts + lost commit replies (${receipts} + ${match.lostReplies.length})`);
  t.ok((counts['refused:payments_unavailable'] ?? 0) >= match.lostReplies.length, 'each lost commit reply was a refused call');
});

t.test('Redis down: priced calls refused payments_unavailable fast, free calls flow, /readyz says so; nothing lost after', async (t) => {
  const redis = await startRedis({ persist: true });
  t.teardown(() => redis.stop());
  const { upstream, gateways, target, keyPrefix } = await setUp(t, { url: redis.url }, 1, 10);
  const [gateway] = gateways as [GatewayProcess];
  const store = await connectStore(t, target, keyPrefix);
  const handle = await fundedHandle(gateway);
  t.match(await callTool(gateway.url, 'fetch_readable', { url: 'https://example.com/1', tollboothToken: handle }), { kind: 'paid', remaining: 9 });

  redis.kill('SIGKILL');
  // The gateway has seen the connection go (its /readyz says so) before the calls that measure the refusal.
  await waitFor(async () => (await fetch(`${gateway.origin}/readyz`)).status === 503, '/readyz 503 with Redis down');
  const refusals = [];
  for (let i = 0; i < 3; i++) refusals.push(await callTool(gateway.url, 'fetch_readable', { url: 'https://example.com/down', tollboothToken: handle }));
  const withoutToken = await callTool(gateway.url, 'fetch_readable', { url: 'https://example.com/down' });
  const free = await callTool(gateway.url, 'echo', { text: 'still here' });
  const ready = await fetch(`${gateway.origin}/readyz`);
  const readyBody = (await ready.json()) as { store: { ok: boolean; detail: string }; upstream: { ok: boolean } };
  t.comment(`with Redis down: priced refusals in ${refusals.map((r) => r.ms).join('/')} ms, without a token ${withoutToken.ms} ms, free call ${free.ms} ms`);

  for (const refusal of refusals) {
    t.match(refusal, { kind: 'refused', reason: 'payments_unavailable' }, 'a priced call is refused payments_unavailable');
    t.ok(refusal.ms < REFUSAL_BOUND_MS, `within ${REFUSAL_BOUND_MS} ms (${refusal.ms} ms)`);
  }
  t.match(withoutToken, { kind: 'refused', reason: 'payments_unavailable' }, 'a call without a token is refused too, not challenged');
  t.ok(withoutToken.ms < REFUSAL_BOUND_MS, `within ${REFUSAL_BOUND_MS} ms (${withoutToken.ms} ms)`);
  t.match(free, { kind: 'ok' }, 'a free tool still answers');
  t.equal(upstream.callsOf('echo').length, 1, 'the free call reached the upstream');
  t.equal(ready.status, 503, '/readyz is 503');
  t.match(readyBody, { store: { ok: false, detail: /redis store/ }, upstream: { ok: true } }, '/readyz names the store');

  await redis.restart();
  await waitFor(async () => (await fetch(`${gateway.origin}/readyz`)).status === 200, '/readyz 200 after Redis came back', { timeoutMs: 10_000, everyMs: 100 });
  t.equal(await balanceOf(store, handle), 9, 'the balance survived and the refused calls took nothing');
  t.match(await callTool(gateway.url, 'fetch_readable', { url: 'https://example.com/2', tollboothToken: handle }), { kind: 'paid', remaining: 8 }, 'paid calls work again');
  t.equal(upstream.callsOf('fetch_readable').length, 2, 'only the two paid calls reached the upstream');
});

t.test('a gateway SIGKILLed while a priced call holds a reservation: another replica releases it after the deadline', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const { upstream, gateways, target, keyPrefix } = await setUp(t, { url: redis.url }, 2, 10);
  const [doomed, survivor] = gateways as [GatewayProcess, GatewayProcess];
  const store = await connectStore(t, target, keyPrefix);
  const handle = await fundedHandle(survivor);

  const call = callTool(doomed.url, 'slow', { ms: 5_000, tollboothToken: handle });
  await waitFor(() => upstream.callsOf('slow').length > 0, 'the call at the upstream');
  const forwardedAt = Date.now();
  t.equal(await heldReservations(target, keyPrefix, handle), 1, 'the call holds a reservation');
  t.equal(await balanceOf(store, handle), 9, 'the reserved credit is out of the balance');

  await doomed.kill();
  t.match(await call, { kind: 'failed' }, 'the caller lost its connection');
  const releaseWaitMs = await waitForNoReservations(target, keyPrefix, handle, 20_000);
  const sinceForwardMs = Date.now() - forwardedAt;
  t.comment(`reservation released ${sinceForwardMs} ms after the call was forwarded (callDeadline ${CALL_DEADLINE_MS} ms + 5 s), ${releaseWaitMs} ms after the kill`);

  t.ok(sinceForwardMs >= CALL_DEADLINE_MS + 5_000 - 1_000, 'not released before its deadline');
  t.equal(await balanceOf(store, handle), 10, 'the credit is back');
  t.match(await callTool(survivor.url, 'fetch_readable', { url: 'https://example.com/', tollboothToken: handle }), { kind: 'paid', remaining: 9 }, 'the handle spends normally afterwards');
  t.ok((await survivor.settledLogs()).some((line) => line.evt === 'reservations_released'), 'the survivor logged the release');
});
