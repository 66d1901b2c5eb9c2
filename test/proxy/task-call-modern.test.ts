// SPEC §24 for the 2026-07-28 tasks extension: a priced tools/call answered `resultType: "task"` holds
// its credit; the terminal tasks/get that carries the result commits it (the result goes with its
// receipt, charged once however often it is read); a failed or cancelled task releases it. A real
// gateway in front of a hand-written 2026-07-28 task upstream (test/helpers/modern-task-upstream.ts),
// a client speaking the revision over plain HTTP (headers repeating the body, as §5.2 asks).
import t, { type Test } from 'tap';
import { hashHandle } from '../../src/paywall/handles.js';
import { fundedHandle, researchBalance, startTestGateway, testConfig, type TestGateway } from '../helpers/gateway.js';
import { startModernTaskUpstream, type ModernTaskUpstream } from '../helpers/modern-task-upstream.js';

type Json = Record<string, any>;
const MODERN = '2026-07-28';
const RECEIPT = 'xyz.tollbooth/receipt';

let upstream: ModernTaskUpstream;
t.before(async () => {
  upstream = await startModernTaskUpstream();
});
t.teardown(() => upstream.close());

let nextId = 1;
async function modern(gateway: TestGateway, method: string, params: Json): Promise<Json> {
  const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': MODERN, 'mcp-method': method };
  if (method === 'tools/call') headers['mcp-name'] = String(params.name);
  const response = await fetch(gateway.url, { method: 'POST', headers, body: JSON.stringify({ jsonrpc: '2.0', id: nextId++, method, params: { ...params, _meta: { 'io.modelcontextprotocol/protocolVersion': MODERN } } }) });
  return (await response.json()) as Json;
}

async function rig(t: Test) {
  const gateway = await startTestGateway(t, testConfig(upstream.url, { tools: { job: { sku: 'research', cost: 1 } } }));
  const handle = await fundedHandle(gateway, 'job', { name: 'fund' });
  const spends = async () => (await gateway.store.ledgerTail(hashHandle(handle, gateway.config.handles.hashSecret), 100)).filter((entry) => entry.kind === 'spend').length;
  const created = await modern(gateway, 'tools/call', { name: 'job', arguments: { name: 'modern', tollboothToken: handle } });
  t.equal(created.result?.resultType, 'task', 'the creation answer passed on as it came');
  t.notOk(created.result?._meta?.[RECEIPT], 'no receipt at creation');
  return { gateway, handle, spends, taskId: created.result.taskId as string };
}

t.test('completed: held at creation; the terminal tasks/get carrying the result commits it once, with the receipt', async (t) => {
  const { gateway, handle, spends, taskId } = await rig(t);
  t.equal(await researchBalance(gateway, handle), 2, 'the credit is held while the task runs');
  const running = await modern(gateway, 'tasks/get', { taskId });
  t.equal(running.result.status, 'working');
  t.notOk(running.result._meta?.[RECEIPT], 'a running task: nothing to charge');
  t.equal(await spends(), 0);

  upstream.finish(taskId, 'completed');
  const done = await modern(gateway, 'tasks/get', { taskId });
  t.equal(done.result.result.content[0].text, `done:${taskId}`, 'the result');
  t.same(done.result._meta?.[RECEIPT], { sku: 'research', cost: 1, remaining: 2 }, 'with the receipt');
  t.equal(await spends(), 1, 'one spend');

  const again = await modern(gateway, 'tasks/get', { taskId });
  t.same(again.result._meta?.[RECEIPT], { sku: 'research', cost: 1, remaining: 2 }, 'read again: the same receipt');
  t.equal(await spends(), 1, 'not charged again');
  t.equal(await researchBalance(gateway, handle), 2);
});

t.test('failed: the terminal tasks/get releases the credit and passes the failure on', async (t) => {
  const { gateway, handle, spends, taskId } = await rig(t);
  upstream.finish(taskId, 'failed');
  const failed = await modern(gateway, 'tasks/get', { taskId });
  t.equal(failed.result.status, 'failed');
  t.notOk(failed.result._meta?.[RECEIPT], 'no receipt');
  t.equal(await researchBalance(gateway, handle), 3, 'the credit is back');
  t.equal(await spends(), 0);
});

t.test('cancelled: tasks/cancel releases the credit', async (t) => {
  const { gateway, handle, spends, taskId } = await rig(t);
  const cancelled = await modern(gateway, 'tasks/cancel', { taskId });
  t.equal(cancelled.result.status, 'cancelled');
  t.equal(await researchBalance(gateway, handle), 3, 'the credit is back');
  t.equal(await spends(), 0);
});
