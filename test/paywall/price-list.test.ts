// paywall/price-list.ts (SPEC §23): what a known caller's tools/list shows for each priced tool, against
// the real memory store: its balance, free calls and budget left, and whether the next call is served
// without payment. Another principal's handle discloses nothing.
import t from 'tap';
import { MemoryStore } from '../../src/store/memory.js';
import { CallerPriceList } from '../../src/paywall/price-list.js';
import { Quotas, type BudgetExceeded, type QuotaHold } from '../../src/paywall/quotas.js';
import { hashHandle, mintHandle } from '../../src/paywall/handles.js';
import type { PriceTag } from '../../src/mcp/tools-list.js';

/** A call's budgets held on their own, as the paywall does in Redis Cluster (null: no budget counts it). */
async function holdBudgets(q: Quotas, ...[call, caller, holdId, deadline]: Parameters<Quotas['budgetRequest']>): Promise<QuotaHold | BudgetExceeded | null> {
  const budgets = q.budgetRequest(call, caller, holdId, deadline);
  return budgets ? q.hold(budgets) : null;
}


const tag = (cost: number): PriceTag => ({ sku: 'research', cost, amount: '5.00', currency: 'USDC', credits: 3, label: 'R', charge: 'success' });

async function setup(rules: ConstructorParameters<typeof Quotas>[0] = { budgets: [], allowances: [] }) {
  const store = new MemoryStore();
  const quotas = new Quotas(rules, 'default', { store, now: () => Date.now() });
  const list = new CallerPriceList({ store, quotas, hashSecret: '', tools: [['fetch_readable', tag(1)], ['costly', tag(2)]] });
  const handle = mintHandle();
  const handleHash = hashHandle(handle, '');
  await store.createHandle({ handleHash, fingerprint: 'fp', principal: 'sub:alice', ttlMs: 3_600_000 });
  await store.grantCredits(handleHash, 'research', 1);
  return { list, handle, quotas };
}

t.test('a caller is known by its principal or a named handle', async (t) => {
  t.notOk(CallerPriceList.isKnown({ principal: null, clientKey: 'ip:1.2.3.4', handle: null }));
  t.ok(CallerPriceList.isKnown({ principal: 'sub:a', clientKey: 'p:sub:a', handle: null }));
  t.ok(CallerPriceList.isKnown({ principal: null, clientKey: 'ip:1.2.3.4', handle: 'tb_s_x' }));
});

t.test("the handle's balance decides affordable when no allowance covers the tool", async (t) => {
  const { list, handle } = await setup();
  const prices = await list.forCaller({ principal: 'sub:alice', clientKey: 'p:sub:alice', handle });
  t.same(prices.get('fetch_readable'), { balance: 1, allowanceRemaining: null, budgetRemaining: null, affordable: true });
  t.same(prices.get('costly'), { balance: 1, allowanceRemaining: null, budgetRemaining: null, affordable: false }, '1 credit does not pay for 2');
});

t.test("another principal naming the handle sees no balance; no handle named: balance null", async (t) => {
  const { list, handle } = await setup();
  t.same((await list.forCaller({ principal: 'sub:bob', clientKey: 'p:sub:bob', handle })).get('fetch_readable'), { balance: 0, allowanceRemaining: null, budgetRemaining: null, affordable: false });
  t.same((await list.forCaller({ principal: 'sub:alice', clientKey: 'p:sub:alice', handle: null })).get('fetch_readable')?.balance, null);
  t.same((await list.forCaller({ principal: null, clientKey: 'ip:1.2.3.4', handle: 'not-a-handle' })).get('fetch_readable')?.balance, 0, 'a malformed handle holds nothing');
});

t.test('a free call left makes a tool affordable; a spent budget makes it unaffordable whatever the balance', async (t) => {
  const { list, handle, quotas } = await setup({ budgets: [{ name: 'one', per: 'principal', tools: ['fetch_readable'], window: 3_600_000, maxCalls: 1 }], allowances: [{ name: 'trial', per: 'client', tools: ['costly'], window: 3_600_000, freeCalls: 1 }] });
  const caller = { principal: 'sub:alice', handleHash: null, clientKey: 'p:sub:alice' };
  t.same((await list.forCaller({ ...caller, handle })).get('fetch_readable')?.budgetRemaining, 1);
  const hold = await holdBudgets(quotas, { tool: 'fetch_readable', sku: 'research', cost: 1 }, caller, 'r1', Date.now() + 60_000);
  await quotas.conclude(hold as never, true);
  const prices = await list.forCaller({ principal: 'sub:alice', clientKey: 'p:sub:alice', handle });
  t.same(prices.get('costly'), { balance: 1, allowanceRemaining: 1, budgetRemaining: null, affordable: true });
  t.same(prices.get('fetch_readable'), { balance: 1, allowanceRemaining: null, budgetRemaining: 0, affordable: false });
});
