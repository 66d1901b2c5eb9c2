// A priced tools/call answered with a task (SDK v1 1.32's experimental tasks, 2025-11-25 task-augmented
// calls): the reservation is held past the creation answer and concluded on the task's end — committed
// when its result is delivered (tasks/result), released when it fails, is cancelled, or outlives
// upstream.taskDeadline. Real SDK v1 client and server, a real gateway.
import t, { type Test } from 'tap';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, CreateTaskResultSchema, ListTasksResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { hashHandle } from '../../src/paywall/handles.js';
import { waitFor, wallClock } from '../helpers/clock.js';
import { fundedHandle, researchBalance, startTestGateway, testConfig, type TestGateway } from '../helpers/gateway.js';
import { openSession, post, resume } from '../helpers/legacy-session.js';
import { startTaskUpstream, type TaskUpstream } from '../helpers/task-upstream.js';

type Json = Record<string, any>;

let upstream: TaskUpstream;
t.before(async () => {
  upstream = await startTaskUpstream();
});
t.teardown(() => upstream.close());

const priced = (overrides: Json = {}) => testConfig(upstream.url, { tools: { job: { sku: 'research', cost: 1 } }, ...overrides });

async function connect(t: Test, gateway: TestGateway): Promise<Client> {
  const client = new Client({ name: 'task-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(gateway.url)));
  t.teardown(() => client.close());
  return client;
}

async function createTask(client: Client, args: Json): Promise<string> {
  const created = await client.request({ method: 'tools/call', params: { name: 'job', arguments: args, task: { ttl: 600_000 } } }, CreateTaskResultSchema);
  return created.task.taskId;
}

const spends = async (gateway: TestGateway, handle: string) =>
  (await gateway.store.ledgerTail(hashHandle(handle, gateway.config.handles.hashSecret), 100)).filter((entry) => entry.kind === 'spend').length;

const getResult = (client: Client, taskId: string) => client.request({ method: 'tasks/result', params: { taskId } }, CallToolResultSchema) as Promise<Json>;

t.test('completed: the creation holds the credit; tasks/result commits it once, with the receipt', async (t) => {
  const gateway = await startTestGateway(t, priced());
  const handle = await fundedHandle(gateway, 'job', { name: 'fund' });
  const client = await connect(t, gateway);
  const taskId = await createTask(client, { name: 'a', tollboothToken: handle });
  t.equal(await researchBalance(gateway, handle), 2, 'the credit is held while the task runs');
  t.equal(await spends(gateway, handle), 0, 'nothing spent at creation');

  await upstream.finish(taskId, 'completed');
  const result = await getResult(client, taskId);
  t.equal(result.content[0].text, `done:${taskId}`);
  t.same(result._meta['xyz.tollbooth/receipt'], { sku: 'research', cost: 1, remaining: 2 }, 'the result carries the receipt');
  t.equal(await spends(gateway, handle), 1, 'one spend');

  const again = await getResult(client, taskId);
  t.equal(again.content[0].text, `done:${taskId}`, 'a second read gets the result it paid for');
  t.equal(await researchBalance(gateway, handle), 2, 'charged once');
  t.equal(await spends(gateway, handle), 1);
});

t.test('failed: released, the failure passed on', async (t) => {
  const gateway = await startTestGateway(t, priced());
  const handle = await fundedHandle(gateway, 'job', { name: 'fund' });
  const client = await connect(t, gateway);
  const taskId = await createTask(client, { name: 'b', tollboothToken: handle });
  await upstream.finish(taskId, 'failed');
  const result = await getResult(client, taskId);
  t.equal(result.isError, true);
  t.notOk(result._meta?.['xyz.tollbooth/receipt'], 'no receipt');
  t.equal(await researchBalance(gateway, handle), 3, 'the credit is back');
  t.equal(await spends(gateway, handle), 0);
});

t.test('cancelled: released', async (t) => {
  const gateway = await startTestGateway(t, priced());
  const handle = await fundedHandle(gateway, 'job', { name: 'fund' });
  const client = await connect(t, gateway);
  const taskId = await createTask(client, { name: 'c', tollboothToken: handle });
  const cancelled = (await client.experimental.tasks.cancelTask(taskId)) as Json;
  t.equal(cancelled.status, 'cancelled');
  t.equal(await researchBalance(gateway, handle), 3, 'the credit is back');
  t.equal(await spends(gateway, handle), 0);
});

t.test('past upstream.taskDeadline: the reconciler releases it, and a late result is withheld', async (t) => {
  const gateway = await startTestGateway(t, priced({ upstream: { url: upstream.url, taskDeadline: '300ms' } }));
  const handle = await fundedHandle(gateway, 'job', { name: 'fund' });
  const client = await connect(t, gateway);
  const taskId = await createTask(client, { name: 'd', tollboothToken: handle });
  const createdAt = Date.now();
  await waitFor(async () => Date.now() > createdAt + 400 && (await gateway.reconciler.tick(), (await researchBalance(gateway, handle)) === 3), 'the held credit released');
  t.equal(await researchBalance(gateway, handle), 3);
  await upstream.finish(taskId, 'completed');
  const late = await getResult(client, taskId);
  t.not(late.content?.[0]?.text, `done:${taskId}`, 'the result of a task whose credit was released never goes out');
  t.equal(late._meta?.['xyz.tollbooth/refusal']?.reason, 'deadline_exceeded');
  t.equal(await spends(gateway, handle), 0);
});

t.test('an unpriced task-capable tool passes through unchanged', async (t) => {
  const gateway = await startTestGateway(t, testConfig(upstream.url, { tools: { other: { sku: 'research', cost: 1 } } }));
  const client = await connect(t, gateway);
  const taskId = await createTask(client, { name: 'free' });
  await upstream.finish(taskId, 'completed');
  const result = await getResult(client, taskId);
  t.equal(result.content[0].text, `done:${taskId}`);
  t.notOk(result._meta?.['xyz.tollbooth/receipt']);
});

t.test('a task belongs to the session that created it: another session asking for it is refused, nothing forwarded', async (t) => {
  const gateway = await startTestGateway(t, priced());
  const handle = await fundedHandle(gateway, 'job', { name: 'fund' });
  let nextId = 1;
  const post = async (session: string, method: string, params: Json): Promise<Json> => {
    const response = await fetch(gateway.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25', 'mcp-session-id': session },
      body: JSON.stringify({ jsonrpc: '2.0', id: nextId++, method, params }),
    });
    return (await response.json()) as Json;
  };
  const created = await post('session-a', 'tools/call', { name: 'job', arguments: { name: 'owned', tollboothToken: handle }, task: { ttl: 600_000 } });
  const taskId = created.result.task.taskId as string;
  await upstream.finish(taskId, 'completed');
  const before = upstream.bodies.length;

  const stranger = await post('session-b', 'tasks/result', { taskId });
  t.equal(stranger.error?.code, -32602, 'answered as an unknown task');
  t.notOk(stranger.result, 'no result');
  t.equal(upstream.bodies.length, before, 'nothing forwarded');
  t.equal(await researchBalance(gateway, handle), 2, 'still held');

  const owner = await post('session-a', 'tasks/result', { taskId });
  t.equal(owner.result.content[0].text, `done:${taskId}`);
  t.equal(owner.result._meta['xyz.tollbooth/receipt'].remaining, 2);
});

t.test('a held task asked for inside a legacy batch: refused with a JSON-RPC error, nothing forwarded, the credit still held', async (t) => {
  const gateway = await startTestGateway(t, priced());
  const handle = await fundedHandle(gateway, 'job', { name: 'fund' });
  const client = await connect(t, gateway);
  const taskId = await createTask(client, { name: 'batched', tollboothToken: handle });
  await upstream.finish(taskId, 'completed');
  const before = upstream.bodies.length;
  const response = await fetch(gateway.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-03-26' },
    body: JSON.stringify([
      { jsonrpc: '2.0', id: 'r', method: 'tasks/result', params: { taskId } },
      { jsonrpc: '2.0', id: 'g', method: 'tasks/get', params: { taskId } },
    ]),
  });
  const text = await response.text();
  t.notMatch(text, `done:${taskId}`, 'no result in the answer');
  const body = JSON.parse(text) as Json;
  const errors = (Array.isArray(body) ? body : [body]).map((message: Json) => message.error?.code);
  t.ok(errors.length > 0 && errors.every((code) => code === -32600), 'answered with Invalid Request');
  t.equal(upstream.bodies.length, before, 'nothing forwarded');
  t.equal(await researchBalance(gateway, handle), 2, 'still held');
  t.equal(await spends(gateway, handle), 0);
});

t.test('a released task asked for after its record would have lapsed: still refused as deadline_exceeded, never forwarded as unknown', async (t) => {
  let wall = Date.now();
  const gateway = await startTestGateway(t, priced({ upstream: { url: upstream.url, taskDeadline: '300ms' } }), { clock: wallClock(() => wall) });
  const handle = await fundedHandle(gateway, 'job', { name: 'fund' });
  const client = await connect(t, gateway);
  const taskId = await createTask(client, { name: 'lapsed', tollboothToken: handle });
  wall += 1_000;
  await gateway.reconciler.tick();
  t.equal(await researchBalance(gateway, handle), 3, 'released at the task deadline');
  wall += 60 * 60_000; // an hour past the task deadline
  await upstream.finish(taskId, 'completed');
  const late = await getResult(client, taskId);
  t.not(late.content?.[0]?.text, `done:${taskId}`, 'the result of a released task never goes out');
  t.equal(late._meta?.['xyz.tollbooth/refusal']?.reason, 'deadline_exceeded');
  t.equal(await spends(gateway, handle), 0);
});

// At the call deadline the gateway refuses the call and releases its credit; an upstream that creates the
// task anyway and answers late must not leave a task the gateway does not know: a tasks/result for an id
// without a record passes as an unpriced task's, and the SDK's task store lists a caller's tasks to it.
// The upstream request stays open past the deadline, the late answer's task id is recorded as released.
// Both ways the answer comes: a JSON reply after the deadline (its head late), and an SSE reply whose
// head came in time and whose creation event came late (a legacy session, as the SDK server streams).
/**
 * A priced task-augmented call to an upstream that creates the task at once and answers its creation
 * `answerDelayMs` later, past `callDeadline`; returns the call's own answer and the task id once the
 * upstream has created it.
 */
async function lateTaskCall(t: Test, options: { resumable: boolean; callDeadline: string; answerDelayMs: number; charge?: 'attempt' }) {
  const slow = await startTaskUpstream({ answerDelayMs: options.answerDelayMs, resumable: options.resumable });
  t.teardown(() => slow.close());
  const job = { sku: 'research', cost: 1, ...(options.charge ? { charge: options.charge } : {}) };
  const gateway = await startTestGateway(t, testConfig(slow.url, { upstream: { url: slow.url, callDeadline: options.callDeadline }, tools: { job } }));
  const handle = await fundedHandle(gateway, 'job', { name: 'fund' });
  const client = await connect(t, gateway);
  const answer = (await client.request({ method: 'tools/call', params: { name: 'job', arguments: { name: 'late', tollboothToken: handle }, task: { ttl: 600_000 } } }, CallToolResultSchema)) as Json;
  await waitFor(() => slow.taskIds().length === 1, 'the upstream to have created the task');
  return { slow, gateway, handle, client, answer, taskId: slow.taskIds()[0] as string };
}

for (const mode of ['json', 'sse'] as const) {
  t.test(`a task created past the call deadline (${mode === 'json' ? 'a JSON answer, late' : 'an SSE answer whose event came late'}): refused and released, and its result, found through tasks/list, refused too`, async (t) => {
    const { slow, gateway, handle, client, answer: refused, taskId } = await lateTaskCall(t, { resumable: mode === 'sse', callDeadline: '300ms', answerDelayMs: 1_500 });
    t.equal(refused._meta?.['xyz.tollbooth/refusal']?.reason, 'deadline_exceeded', 'the call is refused at its deadline');
    t.equal(await researchBalance(gateway, handle), 3, 'its credit back');
    // The late answer reaches the gateway 1.5 s after the call; it records the task as released.
    await waitFor(async () => (await gateway.store.getTask({ scope: 'default', taskId }))?.state === 'released', 'the late task recorded as released', { timeoutMs: 10_000, everyMs: 50 });
    // The caller finds it where the upstream lists it.
    const listed = (await client.request({ method: 'tasks/list', params: {} }, ListTasksResultSchema)) as Json;
    t.ok(listed.tasks.some((task: Json) => task.taskId === taskId), 'the upstream lists the task to its creator');
    await slow.finish(taskId, 'completed');
    const late = await getResult(client, taskId);
    t.not(late.content?.[0]?.text, `done:${taskId}`, 'the result of a task nobody paid for never goes out');
    t.equal(late._meta?.['xyz.tollbooth/refusal']?.reason, 'deadline_exceeded', 'refused as the call was');
    t.equal(await spends(gateway, handle), 0);
    t.equal(await researchBalance(gateway, handle), 3);
  });
}

t.test('charge: attempt, a task created past the call deadline after the upstream accepted the call: charged once, and its result read without paying again', async (t) => {
  // A deadline of 1 s: the SSE head (sent at once) must beat it even on a loaded machine for the call to count as
  // accepted; under attempt the credit is then kept.
  const { slow, gateway, handle, client, answer: answered, taskId } = await lateTaskCall(t, { resumable: true, callDeadline: '1s', answerDelayMs: 2_500, charge: 'attempt' });
  t.equal(answered._meta?.['xyz.tollbooth/refusal']?.reason, 'deadline_exceeded', 'answered deadline_exceeded at the deadline');
  t.equal(await researchBalance(gateway, handle), 2, 'and charged: the upstream accepted the call');
  await waitFor(async () => (await gateway.store.getTask({ scope: 'default', taskId }))?.state !== undefined, 'the late task recorded', { timeoutMs: 10_000, everyMs: 50 });
  t.equal((await gateway.store.getTask({ scope: 'default', taskId }))?.state, 'committed', 'recorded as the call was concluded: committed');
  await slow.finish(taskId, 'completed');
  const result = await getResult(client, taskId);
  t.equal(result.content?.[0]?.text, `done:${taskId}`, 'the result the payer was charged for goes out');
  t.equal(await researchBalance(gateway, handle), 2, 'reading it charges nothing more');
  t.equal(await spends(gateway, handle), 1);
});

t.test('a released task\'s result replayed on a resumed stream (Last-Event-ID) is withheld, never delivered free', async (t) => {
  const resumable = await startTaskUpstream({ resumable: true });
  t.teardown(() => resumable.close());
  let wall = Date.now();
  const gateway = await startTestGateway(t, testConfig(resumable.url, { tools: { job: { sku: 'research', cost: 1 } }, upstream: { url: resumable.url, taskDeadline: '300ms' } }), { clock: wallClock(() => wall) });
  const handle = await fundedHandle(gateway, 'job', { name: 'fund' });
  const session = await openSession(gateway.url);
  const creation = await post(session, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'job', arguments: { name: 'replayed', tollboothToken: handle }, task: { ttl: 600_000 } } });
  const taskId = (await creation.responseFor(1))?.result?.task?.taskId as string;
  t.ok(taskId, 'a task was created');
  wall += 1_000;
  await gateway.reconciler.tick();
  t.equal(await researchBalance(gateway, handle), 3, 'released at the task deadline');
  await resumable.finish(taskId, 'completed');

  const asked = await post(session, { jsonrpc: '2.0', id: 2, method: 'tasks/result', params: { taskId } });
  const answer = await asked.responseFor(2);
  t.equal(answer?.result?._meta?.['xyz.tollbooth/refusal']?.reason, 'deadline_exceeded', 'the own answer is the refusal');
  const lastEventId = asked.events.find((event) => event.id)?.id;
  t.ok(lastEventId, 'the reply carried an event id to resume from');

  const replay = await resume(session, lastEventId as string);
  const replayed: string[] = [];
  for (let event = await replay.next(2_000); event; event = await replay.next(500)) if (event.data) replayed.push(event.data);
  replay.abort();
  t.notOk(replayed.some((data) => data.includes(`done:${taskId}`)), 'the upstream\'s result is not replayed to the client');
  t.equal(await spends(gateway, handle), 0, 'nothing spent');
});

t.test('unpriced task traffic reads the same through the gateway as direct: creation, tasks/get, tasks/result, tasks/cancel', async (t) => {
  const gateway = await startTestGateway(t, testConfig(upstream.url, { tools: { other: { sku: 'research', cost: 1 } } }));
  let id = 1;
  const send = async (url: string, method: string, params: Json): Promise<Json> => {
    const response = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' },
      body: JSON.stringify({ jsonrpc: '2.0', id: id++, method, params }),
    });
    return { status: response.status, type: response.headers.get('content-type'), body: (await response.json()) as Json };
  };
  // What may differ between two runs of the same exchange: the task id, its timestamps, the JSON-RPC id.
  const normal = (reply: Json, taskId: string): Json =>
    JSON.parse(JSON.stringify(reply).replaceAll(taskId, '<task>').replace(/"(createdAt|lastUpdatedAt)":"[^"]*"/g, '"$1":"<time>"').replace(/"id":\d+/g, '"id":"<id>"')) as Json;
  const run = async (url: string): Promise<Json[]> => {
    const created = await send(url, 'tools/call', { name: 'job', arguments: { name: 'same' }, task: { ttl: 600_000 } });
    const taskId = created.body.result.task.taskId as string;
    const cancelled = await send(url, 'tools/call', { name: 'job', arguments: { name: 'other' }, task: { ttl: 600_000 } });
    const otherId = cancelled.body.result.task.taskId as string;
    const replies = [created, await send(url, 'tasks/get', { taskId })];
    await upstream.finish(taskId, 'completed');
    replies.push(await send(url, 'tasks/get', { taskId }), await send(url, 'tasks/result', { taskId }));
    replies.push(normal(await send(url, 'tasks/cancel', { taskId: otherId }), otherId));
    return replies.map((reply) => normal(reply, taskId));
  };
  const direct = await run(upstream.url);
  const through = await run(gateway.url);
  t.same(through, direct, 'the same statuses, content types and bodies');
});
