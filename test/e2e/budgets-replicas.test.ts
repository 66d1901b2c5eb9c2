// A budget across processes (SPEC §23): three `tollbooth start` processes share one Redis; one principal
// (a real OAuth token from oidc-provider) with ample credits sends 600 concurrent priced calls, spread
// over the three, against `maxCalls: 50`. Exactly 50 are committed and the rest refused budget_exceeded;
// balance, ledger and the budget's counter agree. The same burst of calls that fail upstream commits
// nothing and counts nothing. On one Redis the budget is drawn in the credit's own script; on a Redis
// Cluster its counters live in other slots, so the gateway holds it beside the credit (§23's order):
// the burst runs on both.
import { randomBytes } from 'node:crypto';
import t, { type Test } from 'tap';
import { Agent, request, type Dispatcher } from 'undici';
import { hashHandle } from '../../src/paywall/handles.js';
import { quotaWindowStart } from '../../src/store/store.js';
import { balanceOf, connectStore, HASH_SECRET, payDevCheckout, redisGatewayConfig, startGatewayProcess, tally, waitForNoReservations, type CallOutcome, type RedisTarget } from '../helpers/gateway-process.js';
import { startOidcIssuer } from '../helpers/oidc-issuer.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';
import { startRedis, startRedisCluster } from '../helpers/redis-server.js';

const CALLS = 600;
const MAX_CALLS = 50;
const CREDITS = 1000;
const REPLICAS = 3;
const DAY = 86_400_000;
const PUBLIC_URL = 'http://gateway.test/mcp'; // one audience for the three processes

let nextId = 1;

/** One legacy tools/call with the principal's bearer token, classified as helpers/gateway-process.ts callTool does. */
async function call(url: string, bearer: string, name: string, args: Record<string, unknown>, dispatcher?: Dispatcher): Promise<CallOutcome> {
  try {
    const response = await request(url, {
      method: 'POST',
      dispatcher,
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18', authorization: `Bearer ${bearer}` },
      body: JSON.stringify({ jsonrpc: '2.0', id: nextId++, method: 'tools/call', params: { name, arguments: args } }),
    });
    const text = await response.body.text();
    const result = (JSON.parse(/^data: (.*)$/m.exec(text)?.[1] ?? text) as { result?: { isError?: boolean; _meta?: Record<string, Record<string, unknown>> } }).result;
    if (response.statusCode !== 200 || !result) return { kind: 'failed', detail: `${response.statusCode} ${text.slice(0, 200)}`, ms: 0 };
    const meta = result._meta ?? {};
    const receipt = meta['xyz.tollbooth/receipt'];
    if (receipt) return { kind: 'paid', remaining: receipt.remaining as number, ms: 0 };
    const challenge = meta['xyz.tollbooth/challenge'];
    if (challenge) return { kind: 'challenged', reason: challenge.reason as string, handle: (challenge.retry as { value: string }).value, checkoutUrl: challenge.checkoutUrl as string, ms: 0 };
    const refusal = meta['xyz.tollbooth/refusal'];
    if (refusal) return { kind: 'refused', reason: refusal.reason as string, ms: 0 };
    return result.isError ? { kind: 'tool_error', ms: 0 } : { kind: 'ok', ms: 0 };
  } catch (error) {
    return { kind: 'failed', detail: (error as Error).message, ms: 0 };
  }
}

async function burstAgainstBudget(t: Test, tool: 'fetch_readable' | 'failing', topology: 'standalone' | 'cluster' = 'standalone'): Promise<void> {
  let target: RedisTarget;
  if (topology === 'cluster') {
    const cluster = await startRedisCluster();
    t.teardown(() => cluster.stop());
    target = { cluster: cluster.seeds };
  } else {
    const redis = await startRedis();
    t.teardown(() => redis.stop());
    target = { url: redis.url };
  }
  const issuer = await startOidcIssuer();
  t.teardown(() => issuer.close());
  const upstream = await startPaidUpstream('stateless-json');
  t.teardown(() => upstream.close());
  const keyPrefix = `tbbudget${randomBytes(3).toString('hex')}:`;
  const config = redisGatewayConfig(upstream.url, target, keyPrefix, {
    server: { host: '127.0.0.1', publicUrl: PUBLIC_URL },
    upstream: { url: upstream.url, callDeadline: '15s' },
    payments: { provider: 'dev', reconcile: { interval: '1s' } },
    skus: { research: { label: 'Research tools', amount: '5.00', currency: 'USDC', credits: CREDITS } },
    auth: { mode: 'oauth', issuer: issuer.issuer, jwksUrl: issuer.jwksUri, authorizationServers: [issuer.issuer], requiredScopes: ['mcp:use'] },
    budgets: [{ name: 'cap', per: 'principal', tools: ['fetch_readable', 'failing'], window: '1d', maxCalls: MAX_CALLS }],
  });
  const gateways = await Promise.all(Array.from({ length: REPLICAS }, () => startGatewayProcess(t, config)));
  const store = await connectStore(t, target, keyPrefix);
  const bearer = await issuer.tokenFor({ clientId: 'agent', sub: 'alice', scope: 'mcp:use', resource: PUBLIC_URL });

  // Fund one handle of alice's: challenged on the first replica, paid on the second.
  const challenge = await call(gateways[0]!.url, bearer, 'fetch_readable', { url: 'fund' });
  if (challenge.kind !== 'challenged') throw new Error(`expected a challenge, got ${JSON.stringify(challenge)}`);
  t.equal(await payDevCheckout(challenge.checkoutUrl, gateways[1]!.origin), 303);
  const handle = challenge.handle;
  // Warm each replica's tool catalog with one call that the budget does not count (the challenge path).
  for (const gateway of gateways.slice(1)) await call(gateway.url, bearer, 'fetch_readable', { url: 'warm' });
  const upstreamBefore = upstream.callsOf(tool).length;

  const agent = new Agent({ connections: 32 });
  t.teardown(() => agent.close());
  const started = performance.now();
  const burst = await Promise.all(Array.from({ length: CALLS }, (_, i) => call(gateways[i % REPLICAS]!.url, bearer, tool, { url: `u${i}`, tollboothToken: handle }, agent)));
  const burstMs = Math.round(performance.now() - started);
  const counts = tally(burst);
  // A store call over its 1 s budget on a saturated machine is refused payments_unavailable (its draws
  // given back, or swept after callDeadline + 5 s): wait for every hold to end, then spend what the budget
  // has left one call at a time. Whatever the timing, exactly maxCalls succeeded calls are committed.
  await waitForNoReservations(target, keyPrefix, handle, 20_000);
  const windowStart = quotaWindowStart(Date.now(), DAY);
  const counter = { name: 'budget:cap', subject: 'p:sub:alice', windowMs: DAY, windowStart };
  const mopUp: CallOutcome[] = [];
  if (tool === 'fetch_readable') {
    for (let i = 0; i < MAX_CALLS + 5; i++) {
      const outcome = await call(gateways[i % REPLICAS]!.url, bearer, tool, { url: 'last', tollboothToken: handle });
      mopUp.push(outcome);
      if (outcome.kind === 'refused' && outcome.reason === 'budget_exceeded') break;
      if (outcome.kind === 'refused' && outcome.reason === 'payments_unavailable') await new Promise((resolve) => setTimeout(resolve, 7_000));
    }
  }
  const paid = (counts.paid ?? 0) + (tally(mopUp).paid ?? 0);
  const [usage] = await store.quotaUsage([counter]);
  const spends = (await store.ledgerTail(hashHandle(handle, HASH_SECRET), 2 * CALLS)).filter((entry) => entry.kind === 'spend');
  t.comment(`${tool}: ${CALLS} calls over ${REPLICAS} processes in ${burstMs} ms: ${JSON.stringify(counts)}; mop-up ${JSON.stringify(tally(mopUp))}; upstream ${upstream.callsOf(tool).length - upstreamBefore}; budget counter ${JSON.stringify(usage)}`);
  t.same(
    Object.keys(counts).filter((kind) => !['paid', 'tool_error', 'refused:budget_exceeded', 'refused:payments_unavailable', 'refused:deadline_exceeded'].includes(kind)),
    [],
    'every call was paid, refused by the budget, or refused because the store or the deadline failed it (nothing charged)',
  );
  if (tool === 'fetch_readable') {
    // Committed is what the store says (ledger, balance, counter). A client may see fewer receipts: a commit
    // Redis applied after the gateway's 1 s command budget ran out is answered payments_unavailable.
    t.equal(spends.length, MAX_CALLS, `exactly ${MAX_CALLS} calls committed (the ledger's spends)`);
    t.ok(paid <= MAX_CALLS && paid >= MAX_CALLS - (counts['refused:payments_unavailable'] ?? 0), `receipts for the committed calls (${paid}) but for ones the store failed to answer`);
    const failedByLoad = (counts['refused:payments_unavailable'] ?? 0) + (counts['refused:deadline_exceeded'] ?? 0);
    t.equal(counts['refused:budget_exceeded'] ?? 0, CALLS - (counts.paid ?? 0) - failedByLoad, 'the rest refused budget_exceeded (but for calls the saturated store or the deadline refused)');
    t.equal(await balanceOf(store, handle), CREDITS - MAX_CALLS, 'the balance lost exactly the committed calls');
    t.equal(usage?.calls, MAX_CALLS, "the budget's counter agrees");
    const reached = upstream.callsOf(tool).length - upstreamBefore;
    t.ok(reached >= MAX_CALLS && reached <= MAX_CALLS + failedByLoad, `the upstream ran the committed calls, and at most the ones refused after running (${reached})`);
  } else {
    t.equal(counts.paid ?? 0, 0, 'no failed call is paid');
    t.ok((counts.tool_error ?? 0) >= 1, `the upstream ran failed calls (${counts.tool_error ?? 0})`);
    t.equal(await balanceOf(store, handle), CREDITS, 'no credit spent');
    t.equal(spends.length, 0, 'no spend in the ledger');
    t.equal(usage?.calls ?? 0, 0, 'the budget counted none of them');
    const after = await call(gateways[0]!.url, bearer, 'fetch_readable', { url: 'after', tollboothToken: handle });
    t.match(after, { kind: 'paid', remaining: CREDITS - 1 }, 'the budget is whole for the next call');
  }
}

t.test('600 concurrent calls of one principal over 3 processes on one Redis against maxCalls 50: exactly 50 committed', async (t) => {
  await burstAgainstBudget(t, 'fetch_readable');
});

t.test('the same burst of calls that fail upstream: none counted, nothing spent', async (t) => {
  await burstAgainstBudget(t, 'failing');
});

t.test('the same 600 calls over 3 processes on a Redis Cluster (the budget held beside the credit): exactly 50 committed', async (t) => {
  await burstAgainstBudget(t, 'fetch_readable', 'cluster');
});
