// paywall/quotas.ts (SPEC §23): which budgets and allowances count a call, whose counters they draw on,
// and what the store's answer means for the call — against the real memory store.
import t from 'tap';
import { MemoryStore } from '../../src/store/memory.js';
import { isBudgetExceeded, quotaSubject, Quotas, ruleCovers, type BudgetExceeded, type QuotaHold } from '../../src/paywall/quotas.js';
import type { AllowanceConfig, BudgetConfig } from '../../src/config/schema.js';

/** A call's budgets held on their own, as the paywall does in Redis Cluster (null: no budget counts it). */
async function holdBudgets(q: Quotas, ...[call, caller, holdId, deadline]: Parameters<Quotas['budgetRequest']>): Promise<QuotaHold | BudgetExceeded | null> {
  const budgets = q.budgetRequest(call, caller, holdId, deadline);
  return budgets ? q.hold(budgets) : null;
}


const HOUR = 3_600_000;
const call = { tool: 'fetch_readable', sku: 'research', cost: 2 };
const caller = { principal: 'sub:alice', handleHash: 'hash1', clientKey: 'p:sub:alice' };

function quotas(budgets: BudgetConfig[], allowances: AllowanceConfig[] = [], server = 'default') {
  let now = Date.UTC(2026, 0, 1, 10, 30);
  const store = new MemoryStore({ now: () => now });
  const q = new Quotas({ budgets, allowances }, server, { store, now: () => now });
  return { q, store, setNow: (ms: number) => (now = ms), now: () => now };
}

t.test('subjects: principal p:, handle h:, client c: with the IPv4 address or the IPv6 /64', async (t) => {
  t.equal(quotaSubject('principal', caller), 'p:sub:alice');
  t.equal(quotaSubject('handle', caller), 'h:hash1');
  t.equal(quotaSubject('client', caller), 'c:p:sub:alice', 'the principal when there is one');
  t.equal(quotaSubject('client', { principal: null, handleHash: null, clientKey: 'ip:203.0.113.9' }), 'c:ip:203.0.113.9');
  t.equal(quotaSubject('client', { principal: null, handleHash: null, clientKey: 'ip:2001:db8:1:2:aaaa::1' }), 'c:ip6:2001:db8:1:2::/64');
  t.equal(quotaSubject('client', { principal: null, handleHash: null, clientKey: 'ip:2001:db8:1:2:bbbb::7' }), 'c:ip6:2001:db8:1:2::/64', 'one /64, one subject');
  t.equal(quotaSubject('client', { principal: null, handleHash: null, clientKey: 'ip:::ffff:198.51.100.4' }), 'c:ip:198.51.100.4', 'IPv4-mapped is the IPv4 address');
  t.equal(quotaSubject('principal', { ...caller, principal: null }), null);
  t.equal(quotaSubject('handle', { ...caller, handleHash: null }), null);
});

t.test('a rule covers its tools, its SKU, its server, or every priced tool', async (t) => {
  t.ok(ruleCovers({ tools: ['fetch_readable'] }, call, 'default'));
  t.notOk(ruleCovers({ tools: ['costly'] }, call, 'default'));
  t.ok(ruleCovers({ sku: 'research' }, call, 'files'));
  t.notOk(ruleCovers({ sku: 'gold' }, call, 'default'));
  t.ok(ruleCovers({ server: 'files' }, call, 'files'));
  t.notOk(ruleCovers({ server: 'files' }, call, 'default'));
  t.ok(ruleCovers({}, call, 'anywhere'));
});

t.test('budget draws: one per covering budget the caller has a subject for, windows aligned to the epoch', async (t) => {
  const { q, now } = quotas([
    { name: 'daily', per: 'principal', window: 86_400_000, maxCalls: 10 },
    { name: 'hourly', per: 'handle', tools: ['fetch_readable'], window: HOUR, maxCredits: 5 },
    { name: 'other', per: 'handle', tools: ['costly'], window: HOUR, maxCalls: 1 },
  ]);
  const draws = q.budgetDraws(call, caller, 2, now());
  t.same(draws, [
    { name: 'budget:daily', subject: 'p:sub:alice', windowMs: 86_400_000, windowStart: Date.UTC(2026, 0, 1), calls: 1, credits: 2, maxCalls: 10, maxCredits: null },
    { name: 'budget:hourly', subject: 'h:hash1', windowMs: HOUR, windowStart: Date.UTC(2026, 0, 1, 10), calls: 1, credits: 2, maxCalls: null, maxCredits: 5 },
  ]);
  t.same(q.budgetDraws(call, { ...caller, handleHash: null }, 2, now()).map((d) => d.name), ['budget:daily'], 'no handle: the per-handle budget cannot count the call');
});

t.test('budgetRequest + hold: held until concluded; over a cap → the budget, its window end and the wait', async (t) => {
  const { q, store, setNow } = quotas([{ name: 'hourly', per: 'handle', window: HOUR, maxCalls: 2 }]);
  const first = await holdBudgets(q, call, caller, 'r1', Date.now() + 60_000);
  const second = await holdBudgets(q, call, caller, 'r2', Date.now() + 60_000);
  t.notOk(isBudgetExceeded(first));
  t.notOk(isBudgetExceeded(second));
  const third = await holdBudgets(q, call, caller, 'r3', Date.now() + 60_000);
  t.same(third, { kind: 'budget_exceeded', budget: 'hourly', resetsAt: Date.UTC(2026, 0, 1, 11), retryAfterSeconds: 1800 }, 'held draws count toward the cap');
  await q.conclude(second as QuotaHold, false);
  t.notOk(isBudgetExceeded(await holdBudgets(q, call, caller, 'r4', Date.now() + 60_000)), 'a released hold gives its call back');
  await q.conclude(first as QuotaHold, true);
  t.same((await store.quotaUsage([{ name: 'budget:hourly', subject: 'h:hash1', windowMs: HOUR, windowStart: Date.UTC(2026, 0, 1, 10) }]))[0]?.calls, 2);
  setNow(Date.UTC(2026, 0, 1, 11, 0, 1));
  t.notOk(isBudgetExceeded(await holdBudgets(q, call, caller, 'r5', Date.now() + 60_000)), 'a new window');
  const none = quotas([]);
  t.equal(await holdBudgets(none.q, call, caller, 'x', 0), null, 'no budget: nothing held');
  t.notOk(none.q.active);
});

t.test('holdAllowance: a free call with the budgets that count it; used up → null; a budget over its cap → refused', async (t) => {
  const { q } = quotas([{ name: 'calls', per: 'principal', window: HOUR, maxCalls: 3, maxCredits: 1 }], [{ name: 'trial', per: 'client', window: HOUR, freeCalls: 2 }]);
  const hold = await q.holdAllowance(call, caller, 'a1', Date.now() + 60_000);
  t.match(hold, { allowance: 'trial', freeCalls: 2, counter: { name: 'allowance:trial', subject: 'c:p:sub:alice' } });
  t.equal((hold as QuotaHold).counters.length, 2, 'the allowance and the principal budget (free calls draw no credits, so maxCredits 1 does not refuse)');
  await q.conclude(hold as QuotaHold, true);
  t.equal(await q.allowanceRemaining(hold as never), 1);
  await q.conclude((await q.holdAllowance(call, caller, 'a2', Date.now() + 60_000)) as QuotaHold, true);
  t.equal(await q.holdAllowance(call, caller, 'a3', Date.now() + 60_000), null, 'used up: the usual path');
  const budgeted = quotas([{ name: 'tight', per: 'principal', window: HOUR, maxCalls: 1 }], [{ name: 'trial', per: 'client', window: HOUR, freeCalls: 5 }]);
  await budgeted.q.conclude((await budgeted.q.holdAllowance(call, caller, 'b1', Date.now() + 60_000)) as QuotaHold, true);
  t.match(await budgeted.q.holdAllowance(call, caller, 'b2', Date.now() + 60_000), { kind: 'budget_exceeded', budget: 'tight' }, 'a budget counts free calls toward maxCalls');
});

t.test('remainingFor: free calls and budget left (the smaller of calls and credits, in calls of this tool)', async (t) => {
  const { q } = quotas([{ name: 'b', per: 'handle', window: HOUR, maxCalls: 10, maxCredits: 7 }], [{ name: 'trial', per: 'client', tools: ['costly'], window: HOUR, freeCalls: 3 }]);
  t.same(await q.remainingFor(call, caller), { allowanceRemaining: null, budgetRemaining: 3 }, '7 credits at 2 a call: 3 calls');
  await q.conclude((await holdBudgets(q, call, caller, 'r1', Date.now() + 60_000)) as QuotaHold, true);
  t.same(await q.remainingFor(call, caller), { allowanceRemaining: null, budgetRemaining: 2 });
  t.same(await q.remainingFor({ tool: 'costly', sku: 'research', cost: 1 }, caller), { allowanceRemaining: 3, budgetRemaining: 5 });
  t.same(await q.remainingFor(call, { ...caller, handleHash: null }), { allowanceRemaining: null, budgetRemaining: null }, 'nothing covers it for this caller');
});

t.test('a rule for another server does not count calls here', async (t) => {
  const { q, now } = quotas([{ name: 'files', per: 'handle', server: 'files', window: HOUR, maxCalls: 1 }], [], 'default');
  t.same(q.budgetDraws(call, caller, 2, now()), []);
});
