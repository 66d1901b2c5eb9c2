// SPEC §19 × §24 as the gateway behaves today: an x402-paid tools/call answered with a task is settled
// with the facilitator when the task is created (the creation answer carries the SettleResponse), not
// when its result is delivered: money that moved on chain cannot be held open like a credit reservation.
// A task that then fails is not refunded; its result, when it comes, is passed on without a second
// settlement. docs/payments.md lists this under Known limits. Real gateway, real SDK v1 task upstream,
// a fake facilitator that checks the EIP-712 signature, a payer signing with @x402/evm.
import t, { type Test } from 'tap';
import { startFakeFacilitator, type FakeFacilitator } from '../helpers/x402-facilitator.js';
import { paymentMeta, paymentRequiredOf, withX402 } from '../helpers/x402-gateway.js';
import { newPayer } from '../helpers/x402-payer.js';
import { startTestGateway, testConfig, type TestGateway } from '../helpers/gateway.js';
import { startTaskUpstream, type TaskUpstream } from '../helpers/task-upstream.js';

type Json = Record<string, any>;
const RESPONSE = 'x402/payment-response';

let upstream: TaskUpstream;
let fake: FakeFacilitator;
t.before(async () => {
  upstream = await startTaskUpstream();
  fake = await startFakeFacilitator();
});
t.teardown(async () => {
  await upstream.close();
  await fake.close();
});

let nextId = 1;
async function rpc(gateway: TestGateway, method: string, params: Json): Promise<Json> {
  const response = await fetch(gateway.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' },
    body: JSON.stringify({ jsonrpc: '2.0', id: nextId++, method, params }),
  });
  return (await response.json()) as Json;
}

/** An x402-paid task-augmented call: the challenge, the payer's signature, the paid retry; the task's creation answer. */
async function paidTask(t: Test, gateway: TestGateway, name: string): Promise<{ created: Json; taskId: string }> {
  const challenge = await rpc(gateway, 'tools/call', { name: 'job', arguments: { name }, task: { ttl: 600_000 } });
  const payload = await newPayer().pay(paymentRequiredOf(challenge.result));
  const created = await rpc(gateway, 'tools/call', { name: 'job', arguments: { name }, task: { ttl: 600_000 }, _meta: paymentMeta(payload) });
  const taskId = created.result?.task?.taskId as string;
  t.ok(taskId, 'the paid call created a task');
  return { created, taskId };
}

t.test('x402-paid task: settled at creation; a completed result is passed on without a second settlement', async (t) => {
  const gateway = await startTestGateway(t, withX402(testConfig(upstream.url, { tools: { job: { sku: 'research', cost: 1 } } }), fake.url));
  const before = fake.calls.settle;
  const { created, taskId } = await paidTask(t, gateway, 'x402-completed');
  t.equal(fake.calls.settle, before + 1, 'settled once, at creation');
  t.match(created.result._meta?.[RESPONSE], { success: true, transaction: /^0x[0-9a-f]{64}$/ }, 'the creation answer carries the SettleResponse');
  await upstream.finish(taskId, 'completed');
  const result = await rpc(gateway, 'tasks/result', { taskId });
  t.equal(result.result.content[0].text, `done:${taskId}`, 'the result it paid for');
  t.equal(fake.calls.settle, before + 1, 'no second settlement');
  t.notOk(result.result._meta?.['xyz.tollbooth/receipt'], 'no Tollbooth receipt: no handle is involved');
});

t.test('x402-paid task that fails: the payment settled at creation stands (Known limits: not refunded)', async (t) => {
  const gateway = await startTestGateway(t, withX402(testConfig(upstream.url, { tools: { job: { sku: 'research', cost: 1 } } }), fake.url));
  const before = fake.calls.settle;
  const { taskId } = await paidTask(t, gateway, 'x402-failed');
  await upstream.finish(taskId, 'failed');
  const result = await rpc(gateway, 'tasks/result', { taskId });
  t.equal(result.result.isError, true, 'the failure is passed on');
  t.equal(fake.calls.settle, before + 1, 'the settlement made at creation stands');
});
