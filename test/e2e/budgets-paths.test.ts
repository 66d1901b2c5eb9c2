// A budget (SPEC §23) on every path a paid result can take (SPEC §6.5, §24), end to end: a real
// gateway (the memory store, then a real Redis; dev checkout) in front of real SDK upstreams over HTTP
// and a real stdio child. Each test uses a per-handle budget of one call (or two), so a path that
// draws twice refuses the next call too early, and a path that forgets to draw, or to give back, lets
// it through or refuses it wrongly:
// - a result delivered on a resumed GET (Last-Event-ID) after the client hung up: drawn once;
// - a call released at its deadline: given back, the next call served;
// - a legacy batch repeating one handle: exactly the cap served, the rest refused budget_exceeded;
// - a stdio session resumed after a hang-up: drawn once;
// - a task: the hold counts while the task runs, a cancelled task gives it back, a completed and read
//   one keeps it, a second read draws nothing;
// - an idempotent retry of a finished call: the same result again, no second draw, never refused;
// - on Redis, the commit's reply lost (a TCP proxy cut after Redis ran it): the re-run moves nothing.
// What is left of a budget is read from outside, as a caller would: tools/list naming the handle
// (`budgetRemaining`) and the next call's answer.
import t from 'tap';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, CreateTaskResultSchema } from '@modelcontextprotocol/sdk/types.js';
import type { ConfigInput } from '../../src/config/schema.js';
import { fundedHandle, researchBalance, startTestGateway, testConfig, waitForSpends } from '../helpers/gateway.js';
import { STDIO_FIXTURE_COMMAND } from '../helpers/interop-upstreams.js';
import { openSession, post, postRaw, resume, toolCall, type SessionHandle } from '../helpers/legacy-session.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';
import { startRedis, type RedisServer } from '../helpers/redis-server.js';
import { startCuttableProxy } from '../helpers/cuttable-proxy.js';
import { waitFor } from '../helpers/clock.js';
import { hashHandle } from '../../src/paywall/handles.js';
import { startTaskUpstream } from '../helpers/task-upstream.js';

type Json = Record<string, any>;
const RECEIPT = 'xyz.tollbooth/receipt';
const REFUSAL = 'xyz.tollbooth/refusal';

let redis: RedisServer | undefined;
t.teardown(() => redis?.stop());
let prefixes = 0;
/** The store of one run: the embedded memory store, or a real Redis (one server for the file, a key prefix per test). */
async function storeInput(kind: 'memory' | 'redis'): Promise<ConfigInput['store']> {
  if (kind === 'memory') return { type: 'memory' };
  redis ??= await startRedis();
  return { type: 'redis', redis: { url: redis.url, keyPrefix: `budget-paths-${prefixes++}:` } };
}

let nextId = 1;
async function rpc(gateway: { url: string }, body: unknown, version = '2025-11-25', headers: Record<string, string> = {}): Promise<Json> {
  const response = await fetch(gateway.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': version, ...headers },
    body: JSON.stringify(body),
  });
  const text = await response.text();
  return JSON.parse(/^data: (.*)$/m.exec(text)?.[1] ?? text) as Json;
}
const callBody = (name: string, args: Json, id: number = nextId++): Json => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } });

/** One request in a legacy session, its answer read whole (JSON, or the response event of an SSE stream). */
async function ask(session: SessionHandle, body: Json): Promise<Json> {
  const text = await (await postRaw(session, body)).text();
  const events = [...text.matchAll(/^data:(.*)$/gm)].map((match) => (match[1] as string).trim()).filter((data) => data !== '').map((data) => JSON.parse(data) as Json);
  return events.length > 0 ? (events.find((event) => event.id === body.id) as Json) : (JSON.parse(text) as Json);
}

/** What is left of the tool's budget for this handle, as tools/list naming the handle tells its caller. */
async function budgetRemaining(gateway: { url: string }, handle: string, tool: string, session?: SessionHandle): Promise<number | null> {
  const list = { jsonrpc: '2.0', id: nextId++, method: 'tools/list', params: { _meta: { 'xyz.tollbooth/handle': handle } } };
  const listed = session ? await ask(session, list) : await rpc(gateway, list);
  return (listed.result.tools as Json[]).find((entry) => entry.name === tool)?._meta?.['xyz.tollbooth/price']?.budgetRemaining ?? null;
}

for (const label of ['memory', 'redis'] as const) {
  const oneCall = async (tool: string, maxCalls = 1): Promise<Partial<ConfigInput>> => ({ store: await storeInput(label), budgets: [{ name: 'cap', per: 'handle', tools: [tool], window: '1d', maxCalls }] });

  t.test(`${label}: a result delivered on a resumed GET after the client hung up draws the budget once`, async (t) => {
    const upstream = await startPaidUpstream('sessions-resumable');
    t.teardown(() => upstream.close());
    const gateway = await startTestGateway(t, testConfig(upstream.url, await oneCall('slow')));
    const handle = await fundedHandle(gateway);
    const session = await openSession(gateway.url);
    t.equal(await budgetRemaining(gateway, handle, 'slow', session), 1);
    const call = await post(session, toolCall(7, 'slow', { ms: 400, tollboothToken: handle }));
    const first = await call.next();
    t.ok(first?.id, 'the stream is primed with an event id');
    call.abort();
    await waitForSpends(gateway, handle);

    const resumed = await resume(session, first?.id as string);
    const reply = await resumed.responseFor(7, 5_000);
    resumed.abort();
    t.equal(reply?.result?.content?.[0]?.text, 'slept:400', 'the result, on the resumed stream');
    t.same(reply?.result?._meta?.[RECEIPT], { sku: 'research', cost: 1, remaining: 2 });
    t.equal(await budgetRemaining(gateway, handle, 'slow', session), 0, 'the budget drawn once');
    const over = await ask(session, toolCall(8, 'slow', { ms: 1, tollboothToken: handle }));
    t.equal(over?.result?._meta?.[REFUSAL]?.reason, 'budget_exceeded', 'the next call is over the cap');
    t.equal(await researchBalance(gateway, handle), 2, 'one credit spent');
    t.equal(upstream.callsOf('slow').length, 1, 'the over-cap call never reached the upstream');
  });

  t.test(`${label}: a call released at its deadline gives its budget back: the next call is served`, async (t) => {
    const upstream = await startPaidUpstream('sessions-resumable');
    t.teardown(() => upstream.close());
    const base = testConfig(upstream.url, await oneCall('slow'));
    const gateway = await startTestGateway(t, { ...base, upstream: { url: upstream.url, callDeadline: '600ms' } });
    const handle = await fundedHandle(gateway);
    const session = await openSession(gateway.url);
    const released = await ask(session, toolCall(9, 'slow', { ms: 1_500, tollboothToken: handle }));
    t.equal(released?.result?._meta?.[REFUSAL]?.reason, 'deadline_exceeded');
    t.equal(await budgetRemaining(gateway, handle, 'slow', session), 1, 'given back');
    const served = await ask(session, toolCall(10, 'slow', { ms: 1, tollboothToken: handle }));
    t.same(served?.result?._meta?.[RECEIPT], { sku: 'research', cost: 1, remaining: 2 }, 'the next call is served and charged');
    t.equal(await budgetRemaining(gateway, handle, 'slow', session), 0);
  });

  t.test(`${label}: a legacy batch repeating one handle: exactly the cap is served, the rest refused budget_exceeded, nothing else moves`, async (t) => {
    const upstream = await startPaidUpstream('stateless-json');
    t.teardown(() => upstream.close());
    const gateway = await startTestGateway(t, testConfig(upstream.url, await oneCall('fetch_readable', 2)));
    const handle = await fundedHandle(gateway);
    const marker = `budget-batch-${Date.now()}`;
    const replies = (await rpc(gateway, Array.from({ length: 5 }, (_, i) => callBody('fetch_readable', { url: marker, tollboothToken: handle }, 500 + i)), '2025-03-26')) as unknown as Json[];
    t.same(replies.map((reply) => reply.id), [500, 501, 502, 503, 504], 'answered in order');
    const served = replies.filter((reply) => reply.result?._meta?.[RECEIPT]);
    const refused = replies.filter((reply) => reply.result?._meta?.[REFUSAL]?.reason === 'budget_exceeded');
    t.equal(served.length, 2, 'maxCalls 2: two served');
    t.equal(refused.length, 3, 'three refused by the budget (not challenged: one credit is left)');
    t.equal(upstream.callsOf('fetch_readable').filter((c) => c.arguments.url === marker).length, 2, 'two reached the upstream');
    t.equal(await researchBalance(gateway, handle), 1, 'two credits spent');
    t.equal(await budgetRemaining(gateway, handle, 'fetch_readable'), 0);
  });

  t.test(`${label}: stdio: a result delivered on resume after a hang-up draws the budget once`, async (t) => {
    const base = testConfig('http://unused.invalid/mcp', await oneCall('slow'));
    const gateway = await startTestGateway(t, { ...base, upstream: { command: STDIO_FIXTURE_COMMAND, callDeadline: '10s' }, tools: { slow: { sku: 'research', cost: 1 } } });
    const handle = await fundedHandle(gateway, 'slow', { ms: 1 });
    const session = await openSession(gateway.url);
    const call = await post(session, toolCall(31, 'slow', { ms: 400, tollboothToken: handle }));
    const first = await call.next();
    call.abort();
    await waitForSpends(gateway, handle);
    const resumed = await resume(session, first?.id as string);
    const reply = await resumed.responseFor(31, 5_000);
    resumed.abort();
    t.equal(reply?.result?.content?.[0]?.text, 'slow done');
    t.equal(reply?.result?._meta?.[RECEIPT]?.cost, 1);
    const over = await ask(session, toolCall(32, 'slow', { ms: 1, tollboothToken: handle }));
    t.equal(over?.result?._meta?.[REFUSAL]?.reason, 'budget_exceeded', 'drawn once: the next call is over the cap');
    t.equal(await researchBalance(gateway, handle), 2);
  });

  t.test(`${label}: tasks: the hold counts while a task runs, a cancelled task gives it back, a delivered one keeps it once`, async (t) => {
    const upstream = await startTaskUpstream();
    t.teardown(() => upstream.close());
    const gateway = await startTestGateway(t, testConfig(upstream.url, { tools: { job: { sku: 'research', cost: 1 } }, ...(await oneCall('job')) }));
    const handle = await fundedHandle(gateway, 'job', { name: 'fund' });
    const client = new Client({ name: 'budget-tasks', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(gateway.url)));
    t.teardown(() => client.close());
    const createTask = async (name: string) =>
      (await client.request({ method: 'tools/call', params: { name: 'job', arguments: { name, tollboothToken: handle }, task: { ttl: 600_000 } } }, CreateTaskResultSchema)).task.taskId;
    const plainCall = async (name: string) => (await client.request({ method: 'tools/call', params: { name: 'job', arguments: { name, tollboothToken: handle } } }, CallToolResultSchema)) as Json;
    const result = async (taskId: string) => (await client.request({ method: 'tasks/result', params: { taskId } }, CallToolResultSchema)) as Json;

    const first = await createTask('first');
    t.equal(await budgetRemaining(gateway, handle, 'job'), 0, 'held while the task runs');
    t.equal((await plainCall('beside'))._meta?.[REFUSAL]?.reason, 'budget_exceeded', 'a call beside the running task is over the cap');
    await client.experimental.tasks.cancelTask(first);
    t.equal(await budgetRemaining(gateway, handle, 'job'), 1, 'the cancelled task gave it back');
    t.equal(await researchBalance(gateway, handle), 3);

    const second = await createTask('second');
    await upstream.finish(second, 'completed');
    const delivered = await result(second);
    t.equal(delivered.content[0].text, `done:${second}`);
    t.same(delivered._meta[RECEIPT], { sku: 'research', cost: 1, remaining: 2 });
    const again = await result(second);
    t.equal(again.content[0].text, `done:${second}`, 'a second read gets the result, not a refusal');
    t.equal(await budgetRemaining(gateway, handle, 'job'), 0, 'kept once');
    t.equal(await researchBalance(gateway, handle), 2, 'charged once');
    t.equal((await plainCall('after'))._meta?.[REFUSAL]?.reason, 'budget_exceeded');
  });

  t.test(`${label}: an idempotent retry of a finished call gets the same result without a second draw, and is never refused by the cap`, async (t) => {
    const upstream = await startPaidUpstream('stateless-json');
    t.teardown(() => upstream.close());
    const gateway = await startTestGateway(t, testConfig(upstream.url, await oneCall('fetch_readable')));
    const handle = await fundedHandle(gateway);
    const keyed = { 'idempotency-key': `budget-retry-${Date.now()}` };
    const firstReply = await rpc(gateway, callBody('fetch_readable', { url: 'once', tollboothToken: handle }), '2025-11-25', keyed);
    t.same(firstReply.result._meta[RECEIPT], { sku: 'research', cost: 1, remaining: 2 });
    const retry = await rpc(gateway, callBody('fetch_readable', { url: 'once', tollboothToken: handle }), '2025-11-25', keyed);
    t.same(retry.result.content, firstReply.result.content, 'the same result');
    t.same(retry.result._meta[RECEIPT], firstReply.result._meta[RECEIPT], 'with the same receipt');
    t.equal(upstream.callsOf('fetch_readable').filter((c) => c.arguments.url === 'once').length, 1, 'the upstream ran once');
    t.equal(await researchBalance(gateway, handle), 2, 'charged once');
    t.equal(await budgetRemaining(gateway, handle, 'fetch_readable'), 0, 'drawn once');
    const other = await rpc(gateway, callBody('fetch_readable', { url: 'another', tollboothToken: handle }));
    t.equal(other.result._meta?.[REFUSAL]?.reason, 'budget_exceeded', 'a new call is over the cap');
  });
}

t.test('redis: the reply of a paid call\'s commit is lost (the connection cut after Redis ran it): delivered once, charged once, the budget drawn once', async (t) => {
  redis ??= await startRedis();
  const proxy = await startCuttableProxy(redis.port);
  t.teardown(() => proxy.close());
  const upstream = await startPaidUpstream('stateless-json');
  t.teardown(() => upstream.close());
  const gateway = await startTestGateway(t, testConfig(upstream.url, { store: { type: 'redis', redis: { url: proxy.url, keyPrefix: `budget-paths-${prefixes++}:` } }, budgets: [{ name: 'cap', per: 'handle', tools: ['slow'], window: '1d', maxCalls: 2 }] }));
  const handle = await fundedHandle(gateway);
  // A first call loads every script the call uses, so the reply swallowed below is a script's own, not a NOSCRIPT.
  t.equal((await rpc(gateway, callBody('slow', { ms: 1, tollboothToken: handle }))).result._meta[RECEIPT].remaining, 2);
  const pending = rpc(gateway, callBody('slow', { ms: 400, tollboothToken: handle }));
  await waitFor(() => upstream.callsOf('slow').length === 2, 'the second call at the upstream');
  proxy.cutNextReply(); // nothing else talks to Redis while the tool runs: the next reply is the commit's
  const reply = await pending;
  t.equal(proxy.swallowed, 1, 'a reply was lost');
  t.equal(reply.result.content[0].text, 'slept:400', 'the result was delivered');
  t.same(reply.result._meta[RECEIPT], { sku: 'research', cost: 1, remaining: 1 }, 'with the receipt the first run of the commit wrote');
  t.equal(await researchBalance(gateway, handle), 1, 'two calls, two credits: the re-run commit took nothing more');
  t.equal(await budgetRemaining(gateway, handle, 'slow'), 0, 'maxCalls 2, two calls: the budget drawn once per call');
  t.equal(upstream.callsOf('slow').length, 2);
  const spends = (await gateway.store.ledgerTail(hashHandle(handle, gateway.config.handles.hashSecret), 100)).filter((entry) => entry.kind === 'spend');
  t.equal(spends.length, 2, 'one ledger entry per call');
});
