// SPEC §24 through a stdio upstream: the child sits behind the gateway's bridge (src/bridge/), so a priced
// task-augmented call on a stdio session holds its credit like an HTTP upstream's; its result, read with
// tasks/result on the same session, goes out with its receipt, charged once; a failed task releases it;
// an unpriced task's traffic passes through untouched. A real gateway spawning an SDK v1 task server.
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import { fundedHandle, researchBalance, startTestGateway, testConfig, type TestGateway } from '../helpers/gateway.js';
import { openSession, post, toolCall, type SessionHandle } from '../helpers/legacy-session.js';
import { hashHandle } from '../../src/paywall/handles.js';

type Json = Record<string, any>;
const RECEIPT = 'xyz.tollbooth/receipt';
const COMMAND = [process.execPath, '--import', import.meta.resolve('tsx'), fileURLToPath(new URL('../fixtures/stdio-task-server.ts', import.meta.url))];

async function setUp(t: Test): Promise<{ gateway: TestGateway; handle: string; session: SessionHandle; spends: () => Promise<number> }> {
  const base = testConfig('http://unused.invalid/mcp');
  const gateway = await startTestGateway(t, { ...base, upstream: { command: COMMAND }, tools: { job: { sku: 'research', cost: 1 } } });
  const handle = await fundedHandle(gateway, 'job', { name: 'fund', ms: 1 });
  const session = await openSession(gateway.url);
  const spends = async () => (await gateway.store.ledgerTail(hashHandle(handle, gateway.config.handles.hashSecret), 100)).filter((entry) => entry.kind === 'spend').length;
  return { gateway, handle, session, spends };
}

let nextId = 100;
async function ask(session: SessionHandle, method: string, params: Json): Promise<Json | null> {
  const id = nextId++;
  const reply = await post(session, { jsonrpc: '2.0', id, method, params });
  const answer = await reply.responseFor(id, 10_000);
  reply.abort();
  return answer;
}

t.test('stdio: a priced task holds its credit; tasks/result delivers the result once, with its receipt', async (t) => {
  const { gateway, handle, session, spends } = await setUp(t);
  const created = await ask(session, 'tools/call', { ...toolCall(0, 'job', { name: 'stdio', ms: 300, tollboothToken: handle }).params, task: { ttl: 600_000 } });
  const taskId = created?.result?.task?.taskId as string;
  t.ok(taskId, 'the child created a task');
  t.equal(await researchBalance(gateway, handle), 2, 'its credit is held');
  const result = await ask(session, 'tasks/result', { taskId });
  t.equal(result?.result?.content?.[0]?.text, 'done:stdio', 'the result');
  t.same(result?.result?._meta?.[RECEIPT], { sku: 'research', cost: 1, remaining: 2 }, 'with its receipt');
  const again = await ask(session, 'tasks/result', { taskId });
  t.same(again?.result?._meta?.[RECEIPT], { sku: 'research', cost: 1, remaining: 2 }, 'read again: the same receipt');
  t.equal(await spends(), 1, 'charged once');
});

t.test('stdio: a failed task releases its credit', async (t) => {
  const { gateway, handle, session, spends } = await setUp(t);
  const created = await ask(session, 'tools/call', { ...toolCall(0, 'job', { name: 'broken', ms: 100, fail: true, tollboothToken: handle }).params, task: { ttl: 600_000 } });
  const taskId = created?.result?.task?.taskId as string;
  const result = await ask(session, 'tasks/result', { taskId });
  t.equal(result?.result?.isError, true, 'the failure passed on');
  t.notOk(result?.result?._meta?.[RECEIPT]);
  t.equal(await researchBalance(gateway, handle), 3, 'the credit is back');
  t.equal(await spends(), 0);
});

t.test('stdio: an unpriced task passes through untouched', async (t) => {
  const { session } = await setUp(t);
  const created = await ask(session, 'tools/call', { name: 'free_job', arguments: { name: 'free', ms: 50 }, task: { ttl: 600_000 } });
  const taskId = created?.result?.task?.taskId as string;
  t.ok(taskId);
  const result = await ask(session, 'tasks/result', { taskId });
  t.equal(result?.result?.content?.[0]?.text, 'done:free');
  t.notOk(result?.result?._meta?.[RECEIPT], 'no receipt on an unpriced task');
});
