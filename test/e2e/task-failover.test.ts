// A paid task across a Redis failover (SPEC §21 + §24). A priced task holds its credit from creation
// to its end, and the store's task record is what makes its result paid: a tasks/result for a task
// the store does not know passes as an unpriced task's. So a failover must neither lose a hold whose
// task id a client was given (its result would then go out free) nor a hold the client is still
// waiting on (its result would go out uncharged or be refused although paid).
//
// 1. The lag window, made deterministic: a primary and a replica behind one address (a TCP proxy, as a
//    managed Redis's DNS name or virtual IP); the replica stops following (`REPLICAOF NO ONE`: what the
//    primary writes from now on, no replica has) and is then promoted by moving the address to it.
//    A task created in that window must not be handed out (durability `replicated`: its hold is not
//    acknowledged), and the task created before it is charged once on the promoted replica.
// 2. Real Sentinel failovers (1 primary, 2 replicas, 3 sentinels): tasks held while the primary is
//    SIGKILLed and a replica promoted, some with a tasks/result already waiting at the upstream; after
//    the promotion each result is delivered and charged exactly once, each cancelled task refunded.
import { randomBytes } from 'node:crypto';
import t, { type Test } from 'tap';
import { verifyLedger } from '../../src/ledger/verify.js';
import { hashHandle, mintHandle } from '../../src/paywall/handles.js';
import type { RedisStore } from '../../src/store/redis.js';
import { waitFor } from '../helpers/clock.js';
import { startCuttableProxy } from '../helpers/cuttable-proxy.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { connectStore } from '../helpers/gateway-process.js';
import { cli, startRedis, startSentinelSet } from '../helpers/redis-server.js';
import { metricValue } from '../helpers/scripted-upstream.js';
import { lifecycleConfig } from '../helpers/task-lifecycles.js';
import { startTaskUpstream, type TaskUpstream } from '../helpers/task-upstream.js';

type Json = Record<string, any>;
const RECEIPT = 'xyz.tollbooth/receipt';
const REFUSAL = 'xyz.tollbooth/refusal';

let nextId = 1;
async function rpc(url: string, session: string, method: string, params: Json): Promise<Json> {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25', 'mcp-session-id': session },
    body: JSON.stringify({ jsonrpc: '2.0', id: nextId++, method, params }),
  });
  const text = await response.text();
  if (response.headers.get('content-type')?.includes('text/event-stream')) {
    const data = text.split('\n').filter((line) => line.startsWith('data: {')).map((line) => JSON.parse(line.slice(6)) as Json);
    return data.find((message) => 'result' in message || 'error' in message) ?? { status: response.status, text };
  }
  return text ? (JSON.parse(text) as Json) : { status: response.status };
}

/** A priced task-augmented call of the upstream's `job`. */
function createTask(gateway: TestGateway, session: string, handle: string, name: string): Promise<Json> {
  return rpc(gateway.url, session, 'tools/call', { name: 'job', arguments: { name, tollboothToken: handle }, task: { ttl: 600_000 } });
}

/** The store is failing over: refused payments_unavailable, or (a tasks/* request the gateway could not look up) a JSON-RPC internal error. Both say "ask again". */
const unavailable = (answer: Json): boolean => answer.result?._meta?.[REFUSAL]?.reason === 'payments_unavailable' || answer.error?.code === -32603;

/** tasks/result, asked again while the store is failing over, as the answers tell an agent. */
async function readResult(gateway: TestGateway, session: string, taskId: string): Promise<Json[]> {
  const answers: Json[] = [];
  for (let attempt = 0; attempt < 60; attempt++) {
    const answer = await rpc(gateway.url, session, 'tasks/result', { taskId });
    answers.push(answer);
    if (!unavailable(answer)) return answers;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  return answers;
}

const delivered = (answers: Json[], taskId: string): number => answers.filter((answer) => JSON.stringify(answer.result ?? null).includes(`done:${taskId}`)).length;

async function fund(store: RedisStore, hashSecret: string, credits: number): Promise<{ handle: string; handleHash: string }> {
  const handle = mintHandle();
  const handleHash = hashHandle(handle, hashSecret);
  await store.createHandle({ handleHash, fingerprint: `${handle.slice(0, 9)}..${handle.slice(-4)}`, principal: null, ttlMs: 24 * 3_600_000 });
  await store.grantCredits(handleHash, 'research', credits);
  return { handle, handleHash };
}

async function spends(store: RedisStore, handleHash: string): Promise<number> {
  return (await store.ledgerTail(handleHash, 100)).filter((entry) => entry.kind === 'spend').length;
}

async function reserved(store: RedisStore, handleHash: string): Promise<number> {
  return (await store.ledgerCheckpoint({ kind: 'handle', handleHash }))?.holdings.research?.reserved ?? 0;
}

async function startUpstream(t: Test): Promise<TaskUpstream> {
  const upstream = await startTaskUpstream();
  t.teardown(() => upstream.close());
  return upstream;
}

t.test('a task created while its hold had reached no replica is not handed out; the one before it is charged once after the failover', async (t) => {
  const upstream = await startUpstream(t);
  const primary = await startRedis();
  t.teardown(() => primary.stop());
  const replica = await startRedis({ replicaOf: primary.port });
  t.teardown(() => replica.stop());
  const address = await startCuttableProxy(primary.port);
  t.teardown(() => address.close());
  const keyPrefix = `tbtaskfo${randomBytes(3).toString('hex')}:`;
  const gateway = await startTestGateway(t, lifecycleConfig(upstream.url, { store: { type: 'redis', redis: { url: address.url, keyPrefix, durability: 'replicated', waitReplicas: 1, waitTimeout: '100ms' } } }));
  const hashSecret = gateway.config.handles.hashSecret;
  const onPrimary = await connectStore(t, { url: primary.url }, keyPrefix);
  const onReplica = await connectStore(t, { url: replica.url }, keyPrefix);
  const { handle, handleHash } = await fund(onPrimary, hashSecret, 3);
  await waitFor(async () => (await onReplica.getHandle(handleHash))?.balances.research === 3, 'the grant on the replica');

  const before = await createTask(gateway, 'fo-session', handle, 'before');
  const firstTask = before.result?.task?.taskId as string | undefined;
  t.type(firstTask, 'string', 'a task created while the replica follows is handed out');
  await waitFor(async () => (await reserved(onReplica, handleHash)) === 1, 'the first task\'s hold on the replica');

  // The lag window: the replica stops following, so nothing written from now on reaches it.
  cli(replica.port, 'replicaof', 'no', 'one');
  const during = await createTask(gateway, 'fo-session', handle, 'during');
  t.equal(during.result?.task, undefined, 'a task whose hold no replica acknowledged: its id is withheld');
  t.equal(during.result?._meta?.[REFUSAL]?.reason, 'payments_unavailable', 'and the call is refused payments_unavailable');
  t.equal(await metricValue(gateway.origin, 'tollbooth_store_unreplicated_writes_total', { op: 'task' }), 1, 'counted: tollbooth_store_unreplicated_writes_total{op="task"}');
  t.equal(upstream.taskIds().length, 2, 'the upstream created both tasks');
  const withheld = upstream.taskIds().find((taskId) => taskId !== firstTask) as string;
  t.same({ reserved: await reserved(onPrimary, handleHash), balance: (await onPrimary.getHandle(handleHash))?.balances.research }, { reserved: 1, balance: 2 }, 'the withheld task\'s credit is back at once (only the first task holds one)');
  // Its id learned elsewhere (the upstream's tasks/list): refused, not served as an unpriced task's.
  await upstream.finish(withheld, 'completed');
  const asked = await readResult(gateway, 'fo-session', withheld);
  t.equal(delivered(asked, withheld), 0, 'the withheld task\'s result is not delivered');
  t.ok(asked.at(-1)?.result?._meta?.[REFUSAL], `but refused (${asked.at(-1)?.result?._meta?.[REFUSAL]?.reason})`);

  // The failover: the address now reaches the promoted replica; the old primary's writes are gone with it.
  address.redirect(replica.port);
  await upstream.finish(firstTask as string, 'completed');
  const first = await readResult(gateway, 'fo-session', firstTask as string);
  t.equal(delivered(first, firstTask as string), 1, 'the first task\'s result is delivered once after the failover');
  t.match(first.at(-1)?.result?._meta?.[RECEIPT], { cost: 1, remaining: 2 }, 'with its receipt');
  t.equal(await spends(onReplica, handleHash), 1, 'covered by one spend on the promoted replica');
  t.equal((await onReplica.getHandle(handleHash))?.balances.research, 2, 'the handle paid for one result: 3 → 2');
  t.equal(await reserved(onReplica, handleHash), 0, 'nothing is left held');
  const verified = await verifyLedger(onReplica, () => undefined);
  t.equal(verified.mismatches, 0, 'ledger verify agrees on the promoted replica');
});

t.test('tasks held through Sentinel failovers: each result read after the promotion charged once, each cancelled task refunded', async (t) => {
  const upstream = await startUpstream(t);
  const set = await startSentinelSet();
  t.teardown(() => set.stop());
  const keyPrefix = `tbtaskfo${randomBytes(3).toString('hex')}:`;
  const gateway = await startTestGateway(t, lifecycleConfig(upstream.url, { store: { type: 'redis', redis: { url: set.url, keyPrefix, durability: 'replicated', waitReplicas: 2, waitTimeout: '100ms' } } }));
  const hashSecret = gateway.config.handles.hashSecret;
  const store = await connectStore(t, { url: set.url }, keyPrefix);

  const kinds = ['read', 'read', 'waiting', 'waiting', 'cancelled', 'cancelled'] as const;
  const lives = await Promise.all(kinds.map(async (kind, i) => {
    const { handle, handleHash } = await fund(store, hashSecret, 3);
    const created = await createTask(gateway, `sentinel-${i}`, handle, `held-${i}`);
    const taskId = created.result?.task?.taskId as string | undefined;
    if (typeof taskId !== 'string') throw new Error(`no task for ${kind} ${i}: ${JSON.stringify(created)}`);
    return { kind, session: `sentinel-${i}`, handleHash, taskId, answers: [] as Json[] };
  }));
  // tasks/result already asked of the upstream (it answers when the task ends) as the primary dies.
  const waiting = lives.filter((life) => life.kind === 'waiting').map(async (life) => {
    life.answers.push(await rpc(gateway.url, life.session, 'tasks/result', { taskId: life.taskId }));
  });
  await waitFor(() => upstream.calls.length >= kinds.length, 'every task created at the upstream');

  const old = set.primaryPort();
  const node = set.nodes.find((candidate) => candidate.port === old);
  if (!node) throw new Error(`no node on the primary's port ${old}`);
  node.kill('SIGKILL');
  await set.awaitPromotion(old);
  for (const life of lives) if (life.kind !== 'cancelled') await upstream.finish(life.taskId, 'completed');
  await Promise.all(waiting);
  for (const life of lives) {
    if (life.kind === 'cancelled') {
      for (let attempt = 0; attempt < 60; attempt++) {
        const answer = await rpc(gateway.url, life.session, 'tasks/cancel', { taskId: life.taskId });
        life.answers.push(answer);
        if (!unavailable(answer)) break;
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
    } else if (delivered(life.answers, life.taskId) === 0) {
      // A read, or a waiting read the failover answered payments_unavailable: asked (again) now.
      life.answers.push(...(await readResult(gateway, life.session, life.taskId)));
    }
  }

  for (const life of lives) {
    const count = delivered(life.answers, life.taskId);
    const balance = (await store.getHandle(life.handleHash))?.balances.research;
    const spent = await spends(store, life.handleHash);
    if (life.kind === 'cancelled') {
      t.same({ delivered: count, spent, balance }, { delivered: 0, spent: 0, balance: 3 }, `cancelled ${life.taskId}: nothing delivered, nothing spent, the credit back`);
    } else {
      t.same({ delivered: count, spent, balance }, { delivered: 1, spent: 1, balance: 2 }, `${life.kind} ${life.taskId}: delivered once, one spend, one credit gone`);
      const receipts = life.answers.map((answer) => answer.result?._meta?.[RECEIPT]).filter(Boolean);
      t.match(receipts, [{ cost: 1, remaining: 2 }], 'with its receipt');
    }
    t.equal(await reserved(store, life.handleHash), 0, 'nothing left held');
  }
  const verified = await verifyLedger(store, () => undefined);
  t.equal(verified.mismatches, 0, 'ledger verify agrees after the failover');
});
