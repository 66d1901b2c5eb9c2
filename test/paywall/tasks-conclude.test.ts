// SPEC §24 on the Paywall class: the conclusion of a task holding a priced call's reservation when two
// reads of the task conclude it at once (a tasks/result and a terminal tasks/get, or two tasks/result,
// on any replica), and when the store's reply to the commit is lost. Either way the result is charged
// once and every read that delivers it carries the receipt; none says the credit was refunded.
import t from 'tap';
import { Writable } from 'node:stream';
import type { ToolCall } from '../../src/mcp/classify.js';
import type { JsonRpcResponse } from '../../src/mcp/jsonrpc.js';
import type { PriceTag } from '../../src/mcp/tools-list.js';
import { RECEIPT_META_KEY, REFUSAL_META_KEY } from '../../src/mcp/challenge.js';
import { createLogger } from '../../src/observability/logger.js';
import { createMetrics } from '../../src/observability/metrics.js';
import { DevProvider } from '../../src/payments/dev.js';
import { Settler } from '../../src/payments/settle.js';
import { Paywall } from '../../src/paywall/decide.js';
import type { PricedCall } from '../../src/paywall/outcome.js';
import { hashHandle, mintHandle } from '../../src/paywall/handles.js';
import { GatewayError } from '../../src/errors.js';
import { MemoryStore } from '../../src/store/memory.js';
import type { Store } from '../../src/store/store.js';
import { wallClock } from '../helpers/clock.js';

type Json = Record<string, any>;
const SECRET = 'tasks-conclude-secret';
const HOUR = 3_600_000;

async function heldTask(wrapStore: (store: MemoryStore) => Store = (store) => store) {
  const now = () => Date.UTC(2030, 0, 1);
  const store = new MemoryStore({ now });
  const used = wrapStore(store);
  const logger = createLogger('info', new Writable({ write: (_chunk: Buffer, _e, done) => done() }));
  const metrics = createMetrics(() => store.countPendingCharges());
  const provider = new DevProvider({ store, publicUrl: 'http://127.0.0.1:9/mcp', now });
  const settler = new Settler({ store: used, provider, policy: { tolerance: 0.005, minimumFraction: 0.1 }, metrics, logger, clock: wallClock(now) });
  const paywall = new Paywall({
    settings: { argumentName: 'tollboothToken', hashSecret: SECRET, handleTtlMs: 30 * 24 * HOUR, chargeTtlMs: HOUR, callDeadlineMs: 20_000, perHandle: { ratePerSecond: 100, burst: 100 }, challengesPerClient: { ratePerSecond: 100, burst: 100 }, newChargesPerSecond: 10_000 },
    store: used,
    provider,
    settler,
    metrics,
    logger,
    now,
  });
  const price: PriceTag = { sku: 'research', cost: 1, amount: '5.00', currency: 'USDC', credits: 3, label: 'Research tools', charge: 'success' };
  const handle = mintHandle();
  const handleHash = hashHandle(handle, SECRET);
  await store.createHandle({ handleHash, fingerprint: 'tb_s_xxxx..yyyy', principal: null, ttlMs: HOUR });
  await store.grantCredits(handleHash, 'research', 3);
  const args = { tollboothToken: handle };
  const call: ToolCall = { request: { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'job', arguments: args } }, name: 'job', args };
  const priced: PricedCall = { call, price, principal: null, clientKey: 'ip:127.0.0.1', resultShape: async () => ({ era: 'legacy', structuredContentAllowed: false }), startedAt: now(), taskOwner: '' };
  const held = await paywall.authorise(priced);
  if (held.kind !== 'reserved') throw new Error('not reserved');
  const created = await paywall.conclude(priced, held, { kind: 'answered', message: { jsonrpc: '2.0', id: 1, result: { task: { taskId: 'task-1', status: 'working' } } } }, null);
  if (created.state !== 'held') throw new Error(`not held: ${created.state}`);
  const found = await paywall.heldTask('task-1', '');
  if (!found) throw new Error('no task record');
  const spends = async () => (await store.ledgerTail(handleHash, 10)).filter((entry) => entry.kind === 'spend').length;
  const balance = async () => (await store.getHandle(handleHash))?.balances.research ?? 0;
  const spentMetric = async () => (await metrics.registry.getSingleMetric('tollbooth_credits_total')!.get()).values.filter((v) => v.labels.kind === 'spent').reduce((sum, v) => sum + v.value, 0);
  return { paywall, store, found, spends, balance, spentMetric };
}

const taskResult = (id: number): JsonRpcResponse => ({ jsonrpc: '2.0', id, result: { content: [{ type: 'text', text: 'done' }] } });
const shape = async () => ({ era: 'legacy' as const, structuredContentAllowed: false });
const meta = (message: JsonRpcResponse, key: string): Json | undefined => ((message.result as Json | undefined)?._meta as Json | undefined)?.[key];

t.test('two reads of one completed task concluding at once: both deliver it with the receipt, one spend', async (t) => {
  const { paywall, found, spends, balance, spentMetric } = await heldTask();
  // Both looked the record up before either concluded (the race a tasks/result and a terminal tasks/get run).
  const [a, b] = await Promise.all([
    paywall.concludeTask(found.key, found.record, 'tasks/result', taskResult(2), shape),
    paywall.concludeTask(found.key, found.record, 'tasks/result', taskResult(3), shape),
  ]);
  for (const answer of [a, b]) {
    t.same(meta(answer, RECEIPT_META_KEY), { sku: 'research', cost: 1, remaining: 2 }, 'the result with its receipt');
    t.notOk(meta(answer, REFUSAL_META_KEY), 'never refused as refunded');
  }
  t.equal(await spends(), 1, 'one spend');
  t.equal(await balance(), 2);
  t.equal(await spentMetric(), 1, 'counted once');
  const later = await paywall.heldTask('task-1', '');
  t.equal(later?.record.state, 'committed', 'the record says so for any later read');
  const again = await paywall.concludeTask(found.key, later!.record, 'tasks/result', taskResult(4), shape);
  t.same(meta(again, RECEIPT_META_KEY), { sku: 'research', cost: 1, remaining: 2 }, 'a later read gets the same receipt');
  t.equal(await spends(), 1, 'and is not charged');
});

t.test('a commit whose reply was lost: the read is told to ask again, the next read delivers it, one spend', async (t) => {
  let lose = true;
  const { paywall, found, spends, balance } = await heldTask((store) => new Proxy(store, {
    get(target, name, receiver) {
      const value = Reflect.get(target, name, receiver) as unknown;
      if (name !== 'commit' || typeof value !== 'function') return typeof value === 'function' ? value.bind(target) : value;
      return async (...args: unknown[]) => {
        const reply = await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
        if (lose) {
          lose = false; // applied in the store, the answer lost on its way back
          throw new GatewayError('TB_ERR_STORE_UNAVAILABLE', 'the Redis store is unavailable (commit): Command timed out');
        }
        return reply;
      };
    },
  }));
  const first = await paywall.concludeTask(found.key, found.record, 'tasks/result', taskResult(2), shape);
  t.equal(meta(first, REFUSAL_META_KEY)?.reason, 'payments_unavailable', 'withheld');
  t.match(((first.result as Json).content as Json[])[0]!.text, /Ask for it again/, 'the refusal says to ask again, never that nothing was spent');
  t.notMatch(((first.result as Json).content as Json[])[0]!.text, /no credit was spent/);
  const second = await paywall.concludeTask(found.key, (await paywall.heldTask('task-1', ''))!.record, 'tasks/result', taskResult(3), shape);
  t.same(meta(second, RECEIPT_META_KEY), { sku: 'research', cost: 1, remaining: 2 }, 'the retry delivers it with the receipt');
  t.equal(await spends(), 1, 'charged once');
  t.equal(await balance(), 2);
});

t.test('a read that finds the task already released by a cancel withholds the result', async (t) => {
  const { paywall, found, spends, balance } = await heldTask();
  const cancelled = await paywall.concludeTask(found.key, found.record, 'tasks/cancel', { jsonrpc: '2.0', id: 2, result: { taskId: 'task-1', status: 'cancelled' } }, shape);
  t.equal((cancelled.result as Json).status, 'cancelled');
  const late = await paywall.concludeTask(found.key, found.record, 'tasks/result', taskResult(3), shape);
  t.equal(meta(late, REFUSAL_META_KEY)?.reason, 'deadline_exceeded', 'withheld: its credit went back');
  t.notOk(meta(late, RECEIPT_META_KEY));
  t.equal(await spends(), 0);
  t.equal(await balance(), 3);
});

