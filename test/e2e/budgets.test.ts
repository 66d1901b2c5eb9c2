// Budgets, free allowances and the caller's own price list (SPEC §23), end to end: a real gateway
// (memory store, dev checkout) in front of the real SDK upstream, real HTTP, real OAuth tokens from a
// real OpenID Provider (oidc-provider) where principals matter. Window roll-over runs on the test's
// own wall clock (helpers/clock.ts wallClock).
import t, { type Test } from 'tap';
import { startOidcIssuer } from '../helpers/oidc-issuer.js';
import { wallClock } from '../helpers/clock.js';
import { fundedHandle, researchBalance, startTestGateway, testConfig, type TestGateway } from '../helpers/gateway.js';
import { startPaidUpstream, type PaidUpstream } from '../helpers/paid-upstream.js';
import { metricValue } from '../helpers/scripted-upstream.js';
import { writeFileSync } from 'node:fs';
import { waitFor } from '../helpers/clock.js';
import { callTool, payDevCheckout, startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process.js';
import type { ConfigInput } from '../../src/config/schema.js';

type Json = Record<string, any>;
let nextId = 1;

async function rpc(gateway: { url: string }, method: string, params: Json, headers: Record<string, string> = {}): Promise<{ status: number; headers: Headers; body: Json }> {
  const response = await fetch(gateway.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25', ...headers },
    body: JSON.stringify({ jsonrpc: '2.0', id: nextId++, method, params }),
  });
  const text = await response.text();
  const body = JSON.parse(/^data: (.*)$/m.exec(text)?.[1] ?? text) as Json;
  return { status: response.status, headers: response.headers, body };
}

const call = (gateway: { url: string }, name: string, args: Json, headers: Record<string, string> = {}) => rpc(gateway, 'tools/call', { name, arguments: args }, headers);
const refusalOf = (reply: { body: Json }) => reply.body.result?._meta?.['xyz.tollbooth/refusal'];
const receiptOf = (reply: { body: Json }) => reply.body.result?._meta?.['xyz.tollbooth/receipt'];
const challengeOf = (reply: { body: Json }) => reply.body.result?._meta?.['xyz.tollbooth/challenge'];

async function setup(t: Test, overrides: Partial<ConfigInput>, clock?: () => number): Promise<{ upstream: PaidUpstream; gateway: TestGateway }> {
  const upstream = await startPaidUpstream('stateless-json');
  t.teardown(() => upstream.close());
  const gateway = await startTestGateway(t, testConfig(upstream.url, overrides), clock ? { clock: wallClock(clock) } : {});
  return { upstream, gateway };
}

t.test('a call over a budget is refused budget_exceeded with the budget, when it resets and how long to wait; nothing spent', async (t) => {
  const { upstream, gateway } = await setup(t, { budgets: [{ name: 'daily-fetch', per: 'handle', tools: ['fetch_readable'], window: '1d', maxCalls: 2 }] });
  const handle = await fundedHandle(gateway);
  for (const n of [1, 2]) t.same(receiptOf(await call(gateway, 'fetch_readable', { url: `u${n}`, tollboothToken: handle })), { sku: 'research', cost: 1, remaining: 3 - n });
  const before = Date.now();
  const refused = await call(gateway, 'fetch_readable', { url: 'u3', tollboothToken: handle });
  t.equal(refused.body.result.isError, true, 'a tool result, not a JSON-RPC error');
  const refusal = refusalOf(refused);
  t.equal(refusal.reason, 'budget_exceeded');
  t.equal(refusal.budget, 'daily-fetch');
  const dayEnd = Math.floor(before / 86_400_000) * 86_400_000 + 86_400_000;
  t.equal(refusal.resetsAt, new Date(dayEnd).toISOString(), 'resets at the end of the UTC day (windows aligned to the epoch)');
  t.ok(Math.abs(refusal.retryAfterSeconds - Math.ceil((dayEnd - before) / 1000)) <= 2, 'retryAfterSeconds counts to resetsAt');
  t.match(refused.body.result.content[0].text, /spending limit.*no credit was spent/);
  t.equal(await researchBalance(gateway, handle), 1, 'no credit moved');
  t.equal(upstream.callsOf('fetch_readable').filter((c) => c.arguments.url === 'u3').length, 0, 'never forwarded');
  t.equal(await metricValue(gateway.origin, 'tollbooth_budget_refusals_total', { budget: 'daily-fetch' }), 1);
  t.equal(await metricValue(gateway.origin, 'tollbooth_paid_calls_total', { tool: 'fetch_readable', outcome: 'refused_budget' }), 1);
  // Another tool is not in this budget.
  t.same(receiptOf(await call(gateway, 'costly', { q: 'x', tollboothToken: handle })), undefined, 'costly (2 credits) is over the balance: challenged, not refused by the budget');
});

t.test('maxCredits caps the credits spent in the window', async (t) => {
  const { gateway } = await setup(t, { budgets: [{ name: 'credits', per: 'handle', window: '1h', maxCredits: 2 }] });
  const handle = await fundedHandle(gateway);
  t.same(receiptOf(await call(gateway, 'costly', { q: 'a', tollboothToken: handle })), { sku: 'research', cost: 2, remaining: 1 });
  t.equal(refusalOf(await call(gateway, 'fetch_readable', { url: 'b', tollboothToken: handle }))?.reason, 'budget_exceeded', '2 + 1 credits would pass maxCredits 2');
  t.equal(await researchBalance(gateway, handle), 1);
});

t.test('a call that fails upstream uses no budget and no allowance', async (t) => {
  const { upstream, gateway } = await setup(t, {
    budgets: [{ name: 'one', per: 'handle', window: '1h', maxCalls: 1 }],
    allowances: [{ name: 'trial', per: 'client', window: '1h', freeCalls: 1 }],
  });
  // The free call first: failing twice leaves the free call unused.
  for (const n of [1, 2]) {
    const failed = await call(gateway, 'failing', {});
    t.equal(failed.body.result.isError, true, `failed call ${n} is the upstream's error`);
    t.equal(receiptOf(failed), undefined);
  }
  t.equal(upstream.callsOf('failing').length, 2, 'both reached the upstream');
  const free = await call(gateway, 'fetch_readable', { url: 'free' });
  t.same(receiptOf(free), { sku: 'research', cost: 0, allowance: { name: 'trial', remaining: 0 } }, 'the free call is still there');
  // Paid calls: two failures, then the one call the budget allows.
  const handle = await fundedHandle(gateway);
  for (const n of [1, 2]) t.equal(refusalOf(await call(gateway, 'failing', { tollboothToken: handle })), undefined, `failed paid call ${n} is not refused`);
  t.equal(await researchBalance(gateway, handle), 3, 'failed calls spent nothing');
  t.same(receiptOf(await call(gateway, 'fetch_readable', { url: 'paid', tollboothToken: handle })), { sku: 'research', cost: 1, remaining: 2 }, 'the budget still had its one call');
  t.equal(refusalOf(await call(gateway, 'fetch_readable', { url: 'over', tollboothToken: handle }))?.reason, 'budget_exceeded');
});

t.test('allowance: free calls with a receipt naming the allowance, a token stripped and not charged, then the challenge', async (t) => {
  const { upstream, gateway } = await setup(t, { allowances: [{ name: 'trial', per: 'client', tools: ['fetch_readable'], window: '1d', freeCalls: 2 }] });
  const handle = await fundedHandle(gateway, 'costly', { q: 'fund' });
  const first = await call(gateway, 'fetch_readable', { url: 'a' });
  t.match(first.body.result.content[0].text, 'ok:{"url":"a"}', "the upstream's result");
  t.same(receiptOf(first), { sku: 'research', cost: 0, allowance: { name: 'trial', remaining: 1 } });
  const withToken = await call(gateway, 'fetch_readable', { url: 'b', tollboothToken: handle });
  t.same(receiptOf(withToken), { sku: 'research', cost: 0, allowance: { name: 'trial', remaining: 0 } }, 'a token on a free call is not charged');
  t.equal(await researchBalance(gateway, handle), 3);
  t.notOk(upstream.sawText(handle), 'the token was stripped');
  const used = await call(gateway, 'fetch_readable', { url: 'c' });
  t.equal(challengeOf(used)?.reason, 'payment_required', 'used up: the usual challenge');
  t.same(receiptOf(await call(gateway, 'fetch_readable', { url: 'd', tollboothToken: handle })), { sku: 'research', cost: 1, remaining: 2 }, 'and the handle pays');
  t.equal(await metricValue(gateway.origin, 'tollbooth_allowance_calls_total', { allowance: 'trial' }), 2);
  t.equal(await metricValue(gateway.origin, 'tollbooth_paid_calls_total', { tool: 'fetch_readable', outcome: 'allowance' }), 2);
  t.equal(upstream.callsOf('costly').length, 0, 'costly is not in the allowance');
});

t.test('windows roll over on the clock: a used allowance and a spent budget come back in the next window', async (t) => {
  let now = Date.UTC(2026, 0, 1, 10, 59, 0);
  const { gateway } = await setup(
    t,
    { budgets: [{ name: 'hourly', per: 'handle', window: '1h', maxCalls: 1 }], allowances: [{ name: 'trial', per: 'client', window: '1h', freeCalls: 1 }] },
    () => now,
  );
  t.equal(receiptOf(await call(gateway, 'fetch_readable', { url: 'free' }))?.allowance?.remaining, 0);
  const handle = await fundedHandle(gateway);
  t.equal(receiptOf(await call(gateway, 'fetch_readable', { url: 'paid', tollboothToken: handle }))?.remaining, 2);
  const refused = refusalOf(await call(gateway, 'fetch_readable', { url: 'over', tollboothToken: handle }));
  t.same(refused, { reason: 'budget_exceeded', retryAfterSeconds: 60, budget: 'hourly', resetsAt: '2026-01-01T11:00:00.000Z' });
  now = Date.UTC(2026, 0, 1, 11, 0, 0);
  t.equal(receiptOf(await call(gateway, 'fetch_readable', { url: 'free again' }))?.allowance?.remaining, 0, 'a free call again in the new window');
  t.equal(receiptOf(await call(gateway, 'fetch_readable', { url: 'paid again', tollboothToken: handle }))?.remaining, 1, 'and the budget has its call again');
});

t.test('oauth', async (t) => {
  const issuer = await startOidcIssuer();
  t.teardown(() => issuer.close());
  const upstream = await startPaidUpstream('stateless-json');
  t.teardown(() => upstream.close());
  const gateway = await startTestGateway(
    t,
    testConfig(upstream.url, {
      server: { host: '127.0.0.1', port: 0, publicUrl: 'http://127.0.0.1:0/mcp' },
      auth: { mode: 'oauth', issuer: issuer.issuer, jwksUrl: issuer.jwksUri, authorizationServers: [issuer.issuer], requiredScopes: ['mcp:use'] },
      budgets: [{ name: 'per-user', per: 'principal', tools: ['fetch_readable'], window: '1d', maxCalls: 3 }],
      allowances: [{ name: 'trial', per: 'client', tools: ['fetch_readable'], window: '1d', freeCalls: 1 }],
    }),
  );
  const resource = gateway.config.server.publicUrl;
  const bearer = async (clientId: string) => ({ authorization: `Bearer ${await issuer.tokenFor({ clientId, scope: 'mcp:use', resource })}` });

  await t.test('100 principals behind one IP each get their own allowance', async (t) => {
    const callers = await Promise.all(Array.from({ length: 100 }, (_, i) => bearer(`agent-${i}`)));
    const replies = await Promise.all(callers.map((headers, i) => call(gateway, 'fetch_readable', { url: `p${i}` }, headers)));
    t.equal(replies.filter((reply) => receiptOf(reply)?.allowance?.remaining === 0).length, 100, 'every principal had its one free call');
    t.equal(challengeOf(await call(gateway, 'fetch_readable', { url: 'again' }, callers[0]))?.reason, 'payment_required', 'and only one');
  });

  await t.test('a principal budget counts free and paid calls together', async (t) => {
    const headers = await bearer('budgeted');
    t.equal(receiptOf(await call(gateway, 'fetch_readable', { url: 'free' }, headers))?.allowance?.remaining, 0);
    const challenge = challengeOf(await call(gateway, 'fetch_readable', { url: 'x' }, headers));
    await fetch(`${challenge.checkoutUrl}/pay`, { method: 'POST', redirect: 'manual' });
    const handle = challenge.retry.value as string;
    for (const url of ['p1', 'p2']) t.ok(receiptOf(await call(gateway, 'fetch_readable', { url, tollboothToken: handle }, headers))?.remaining >= 0);
    t.equal(refusalOf(await call(gateway, 'fetch_readable', { url: 'p3', tollboothToken: handle }, headers))?.reason, 'budget_exceeded', '1 free + 2 paid = maxCalls 3');
  });

  await t.test("two principals each see their own balance and allowance in tools/list, privately; the handle never reaches the upstream", async (t) => {
    const alice = await bearer('alice');
    const bob = await bearer('bob');
    // Alice uses her free call and funds a handle; Bob does nothing.
    await call(gateway, 'fetch_readable', { url: 'alice free' }, alice);
    const challenge = challengeOf(await call(gateway, 'fetch_readable', { url: 'alice' }, alice));
    await fetch(`${challenge.checkoutUrl}/pay`, { method: 'POST', redirect: 'manual' });
    const aliceHandle = challenge.retry.value as string;
    const bodiesBefore = upstream.bodies.length;
    const aliceList = await rpc(gateway, 'tools/list', { _meta: { 'xyz.tollbooth/handle': aliceHandle } }, alice);
    const bobList = await rpc(gateway, 'tools/list', {}, bob);
    const priceOf = (reply: { body: Json }, tool: string) => (reply.body.result.tools as Json[]).find((entry) => entry.name === tool)?._meta?.['xyz.tollbooth/price'];
    t.match(priceOf(aliceList, 'fetch_readable'), { sku: 'research', cost: 1, balance: 3, allowanceRemaining: 0, budgetRemaining: 2, affordable: true });
    t.match(priceOf(bobList, 'fetch_readable'), { sku: 'research', cost: 1, balance: null, allowanceRemaining: 1, budgetRemaining: 3, affordable: true });
    t.match(priceOf(aliceList, 'costly'), { cost: 2, balance: 3, allowanceRemaining: null, budgetRemaining: null, affordable: true });
    t.match(priceOf(bobList, 'costly'), { balance: null, affordable: false });
    t.equal(aliceList.headers.get('cache-control'), 'private, no-store');
    t.equal(bobList.headers.get('cache-control'), 'private, no-store');
    // Bob naming Alice's handle learns nothing about it.
    t.match(priceOf(await rpc(gateway, 'tools/list', { _meta: { 'xyz.tollbooth/handle': aliceHandle } }, bob), 'costly'), { balance: 0, affordable: false });
    t.notOk(upstream.bodies.slice(bodiesBefore).some((body) => body.includes(aliceHandle) || body.includes('xyz.tollbooth/handle')), 'the handle in _meta never reached the upstream');
  });
});

t.test('without oauth, a tools/list naming a handle is that handle\'s own and the upstream never sees the handle', async (t) => {
  const { upstream, gateway } = await setup(t, {});
  const handle = await fundedHandle(gateway);
  const anonymous = await rpc(gateway, 'tools/list', {});
  t.notOk(anonymous.headers.get('cache-control')?.includes('private'), 'an anonymous list is everyone\'s');
  t.notOk('balance' in ((anonymous.body.result.tools as Json[]).find((tool) => tool.name === 'fetch_readable')?._meta?.['xyz.tollbooth/price'] ?? {}));
  const before = upstream.bodies.length;
  const own = await rpc(gateway, 'tools/list', { _meta: { 'xyz.tollbooth/handle': handle } });
  t.equal(own.headers.get('cache-control'), 'private, no-store');
  t.match((own.body.result.tools as Json[]).find((tool) => tool.name === 'costly')?._meta?.['xyz.tollbooth/price'], { balance: 3, affordable: true, allowanceRemaining: null, budgetRemaining: null });
  const forwarded = upstream.bodies.slice(before).join('\n');
  t.match(forwarded, /tools\/list/, 'the list went upstream');
  t.notOk(forwarded.includes(handle), 'without the handle');
});

/** Rewrites a gateway process's config file (port kept) and sends SIGHUP; resolves on the reload's success line. */
async function reload(gateway: GatewayProcess, input: ConfigInput): Promise<void> {
  writeFileSync(gateway.configPath, JSON.stringify({ ...input, server: { ...input.server, host: '127.0.0.1', port: gateway.port } }, null, 2));
  const before = gateway.logs().filter((line) => line.evt === 'config_reload').length;
  gateway.child.kill('SIGHUP');
  await waitFor(() => gateway.logs().filter((line) => line.evt === 'config_reload').length > before, 'the reload line', { timeoutMs: 30_000 });
  const line = gateway.logs().filter((entry) => entry.evt === 'config_reload').pop();
  if (line?.result !== 'success') throw new Error(`the reload failed: ${JSON.stringify(line)}`);
}

t.test('a reload (SIGHUP) that changes a cap applies it to new calls while the count goes on', async (t) => {
  const upstream = await startPaidUpstream('stateless-json');
  t.teardown(() => upstream.close());
  const input = (maxCalls: number) => testConfig(upstream.url, { budgets: [{ name: 'b', per: 'handle', window: '1d', maxCalls }] });
  const gateway = await startGatewayProcess(t, input(3));
  const challenge = await callTool(gateway.url, 'fetch_readable', { url: 'fund' });
  if (challenge.kind !== 'challenged') throw new Error('expected a challenge');
  await payDevCheckout(challenge.checkoutUrl, gateway.origin);
  const paid = (url: string) => callTool(gateway.url, 'fetch_readable', { url, tollboothToken: challenge.handle });
  t.match(await paid('1'), { kind: 'paid', remaining: 2 });
  t.match(await paid('2'), { kind: 'paid', remaining: 1 });
  await reload(gateway, input(2));
  t.match(await paid('3'), { kind: 'refused', reason: 'budget_exceeded' }, 'the lower cap counts the two calls made before the reload');
  await reload(gateway, input(4));
  t.match(await paid('4'), { kind: 'paid', remaining: 0 }, 'a raised cap lets the next call through');
});
