// SPEC §24 + §8: a task holding a priced call's credit outlives a Redis crash. While Redis is down a read
// of the task is refused and carries no result; once Redis is back (AOF, fsync always) the task's record
// and reservation are there: the result goes out with its receipt, charged once. A real redis-server
// killed with SIGKILL and restarted on its port, a real gateway, a real SDK v1 task upstream.
import t from 'tap';
import { waitFor } from '../helpers/clock.js';
import { startTestGateway } from '../helpers/gateway.js';
import { connectStore } from '../helpers/gateway-process.js';
import { startRedis } from '../helpers/redis-server.js';
import { lifecycleConfig } from '../helpers/task-lifecycles.js';
import { startTaskUpstream } from '../helpers/task-upstream.js';
import { hashHandle, mintHandle } from '../../src/paywall/handles.js';

type Json = Record<string, any>;

let nextId = 1;
async function rpc(url: string, method: string, params: Json): Promise<{ status: number; text: string; body: Json | null }> {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25', 'mcp-session-id': 'restart-session' },
    body: JSON.stringify({ jsonrpc: '2.0', id: nextId++, method, params }),
  });
  const text = await response.text();
  const parse = (): Json | null => {
    try {
      return JSON.parse(text) as Json;
    } catch {
      return null;
    }
  };
  return { status: response.status, text, body: parse() };
}

t.test('a held task survives a Redis crash and restart: refused while down, delivered once after', async (t) => {
  const upstream = await startTaskUpstream();
  t.teardown(() => upstream.close());
  const redis = await startRedis({ persist: true });
  t.teardown(() => redis.stop());
  const input = lifecycleConfig(upstream.url, { store: { type: 'redis', redis: { url: redis.url, keyPrefix: 'restart:' } } });
  const gateway = await startTestGateway(t, input);
  const store = await connectStore(t, { url: redis.url }, 'restart:');
  const handle = mintHandle();
  const handleHash = hashHandle(handle, gateway.config.handles.hashSecret);
  await store.createHandle({ handleHash, fingerprint: 'tb_s_rest..art0', principal: null, ttlMs: 24 * 3_600_000 });
  await store.grantCredits(handleHash, 'research', 3);
  const balance = async () => (await store.getHandle(handleHash))?.balances.research;
  const spends = async () => (await store.ledgerTail(handleHash, 100)).filter((entry) => entry.kind === 'spend').length;

  const created = await rpc(gateway.url, 'tools/call', { name: 'job', arguments: { name: 'restart', tollboothToken: handle }, task: { ttl: 600_000 } });
  const taskId = created.body?.result?.task?.taskId as string;
  t.ok(taskId, 'a task was created');
  t.equal(await balance(), 2, 'its credit is held');
  await upstream.finish(taskId, 'completed');

  redis.kill('SIGKILL');
  const whileDown = await rpc(gateway.url, 'tasks/result', { taskId });
  t.notMatch(whileDown.text, `done:${taskId}`, 'no result while the store cannot say whether it is paid');
  t.ok(whileDown.body?.error || whileDown.body?.result?.isError, `refused (${whileDown.text.slice(0, 120)})`);

  await redis.restart();
  await waitFor(async () => (await balance().catch(() => undefined)) === 2, 'Redis back with the held credit', { timeoutMs: 15_000 });
  let delivered: Json | null = null;
  await waitFor(async () => {
    const answer = await rpc(gateway.url, 'tasks/result', { taskId });
    if (answer.text.includes(`done:${taskId}`)) delivered = answer.body;
    return delivered !== null;
  }, 'the result delivered once the gateway reaches Redis again', { timeoutMs: 15_000, everyMs: 200 });
  t.same((delivered as Json | null)?.result?._meta?.['xyz.tollbooth/receipt'], { sku: 'research', cost: 1, remaining: 2 }, 'with its receipt');
  t.equal(await spends(), 1, 'charged once');
  t.equal(await balance(), 2);
});
