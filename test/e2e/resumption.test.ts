// SPEC §6.5, issue 12's main hole: no priced result reaches a client unless its credit was committed,
// on any path — with an upstream that supports stream resumption (SDK v1 StreamableHTTPServerTransport
// + an event store), a legacy client can hang up after the first event and GET the stream again
// with Last-Event-ID. A call read to its end is charged and its result is delivered on resume; a call
// released at the deadline never delivers its late result; an upstream that closes POST streams on
// purpose (2025-11-25 polling) still charges an honest client once and delivers.
import { setTimeout as sleep } from 'node:timers/promises';
import t, { type Test } from 'tap';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { waitFor } from '../helpers/clock.js';
import { fundedHandle, researchBalance, startTestGateway, testConfig, waitForSpends, type TestGateway } from '../helpers/gateway.js';
import { openSession, post, postRaw, resume, toolCall, type EventReader } from '../helpers/legacy-session.js';
import { startPaidUpstream, type PaidUpstream } from '../helpers/paid-upstream.js';

const RECEIPT = 'xyz.tollbooth/receipt';
const REFUSAL = 'xyz.tollbooth/refusal';

async function setUp(t: Test, options: { callDeadline?: string; ignoreCancellation?: boolean } = {}): Promise<{ upstream: PaidUpstream; gateway: TestGateway; handle: string }> {
  const upstream = await startPaidUpstream('sessions-resumable', { ignoreCancellation: options.ignoreCancellation ?? false });
  t.teardown(() => upstream.close());
  const base = testConfig(upstream.url);
  const gateway = await startTestGateway(t, { ...base, upstream: { url: upstream.url, callDeadline: options.callDeadline ?? '10s' }, tools: { ...base.tools, polling: { sku: 'research', cost: 1 } } });
  const handle = await fundedHandle(gateway);
  t.equal(await researchBalance(gateway, handle), 3, 'funded with 3 credits');
  return { upstream, gateway, handle };
}

/** Starts a paid call and reads up to its first event with an id (the priming event); returns the reader and that id. */
async function startPaidCall(gateway: TestGateway, sessionId: Awaited<ReturnType<typeof openSession>>, id: number, name: string, args: Record<string, unknown>): Promise<{ call: EventReader; lastEventId: string }> {
  const call = await post(sessionId, toolCall(id, name, args));
  if (call.response.status !== 200) throw new Error(`HTTP ${call.response.status}: ${await call.response.text()}`);
  const first = await call.next();
  if (!first?.id) throw new Error(`the first event carries no id: ${JSON.stringify(first)}`);
  return { call, lastEventId: first.id };
}

t.test('a client that hangs up after the first event and resumes after the tool finished: charged once, result delivered on resume', async (t) => {
  const { upstream, gateway, handle } = await setUp(t);
  const session = await openSession(gateway.url);
  const { call, lastEventId } = await startPaidCall(gateway, session, 7, 'slow', { ms: 400, tollboothToken: handle });
  call.abort();
  await waitForSpends(gateway, handle); // the tool finishes upstream and the call is charged while nobody listens

  const resumed = await resume(session, lastEventId);
  t.equal(resumed.response.status, 200);
  const reply = await resumed.responseFor(7, 5_000);
  resumed.abort();
  t.equal(reply?.result?.content?.[0]?.text, 'slept:400', 'the result the client paid for');
  t.equal(reply?.result?._meta?.[RECEIPT]?.cost, 1, 'with its receipt');
  t.equal(await researchBalance(gateway, handle), 2, 'exactly one credit spent');
  t.equal(upstream.callsOf('slow').length, 1, 'the tool ran once');
});

t.test('a client that hangs up and resumes while the tool still runs (the upstream moves the stream to the GET): charged once, result delivered', async (t) => {
  const { upstream, gateway, handle } = await setUp(t);
  const session = await openSession(gateway.url);
  const { call, lastEventId } = await startPaidCall(gateway, session, 8, 'slow', { ms: 800, tollboothToken: handle });
  call.abort();
  await sleep(150);

  const resumed = await resume(session, lastEventId);
  const reply = await resumed.responseFor(8, 5_000);
  resumed.abort();
  t.equal(reply?.result?.content?.[0]?.text, 'slept:800');
  t.equal(reply?.result?._meta?.[RECEIPT]?.cost, 1, 'with its receipt');
  t.equal(await researchBalance(gateway, handle), 2, 'exactly one credit spent');
  t.equal(upstream.callsOf('slow').length, 1);
});

t.test('a call released at the deadline never delivers its late result: not on a resumed GET, not on a later one', async (t) => {
  const { upstream, gateway, handle } = await setUp(t, { callDeadline: '600ms', ignoreCancellation: true });
  const session = await openSession(gateway.url);
  const { call, lastEventId } = await startPaidCall(gateway, session, 9, 'slow', { ms: 1_500, tollboothToken: handle });

  const refused = await call.responseFor(9, 5_000);
  t.equal(refused?.result?._meta?.[REFUSAL]?.reason, 'deadline_exceeded', 'the POST is answered at the deadline');
  t.equal(await researchBalance(gateway, handle), 3, 'released');
  await waitFor(() => upstream.cancellations.length > 0, 'notifications/cancelled at the upstream'); // sent beside the refusal, not before it
  t.same(upstream.cancellations.map((c) => [c.requestId, c.sessionId]), [[9, session.sessionId]], 'the upstream was told to cancel, in its session');

  await sleep(1_500); // the tool (ignoring the cancellation) finishes and its result is stored for replay
  for (const attempt of ['first', 'second']) {
    const resumed = await resume(session, lastEventId);
    const late = await resumed.responseFor(9, 1_000);
    resumed.abort();
    t.equal(late, null, `the ${attempt} resumed GET does not carry the late result`);
  }
  t.equal(await researchBalance(gateway, handle), 3, 'still nothing spent');

  // Negative control: the upstream itself does replay the late result, so the checks above could fail.
  const direct = await resume({ ...session, url: upstream.url }, lastEventId);
  const replayed = await direct.responseFor(9, 3_000);
  direct.abort();
  t.equal(replayed?.result?.content?.[0]?.text, 'slept:1500', 'the upstream replays the late result to whoever asks it directly');
});

t.test('an upstream that closes the POST stream on purpose (2025-11-25 polling): the SDK client resumes, is charged once and gets its result', async (t) => {
  const { upstream, gateway, handle } = await setUp(t);
  const client = new Client({ name: 'polling-client', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(gateway.url), { reconnectionOptions: { initialReconnectionDelay: 50, maxReconnectionDelay: 200, reconnectionDelayGrowFactor: 1.5, maxRetries: 5 } }));
  t.teardown(() => client.close());

  const result = await client.callTool({ name: 'polling', arguments: { ms: 300, tollboothToken: handle } });
  t.equal((result.content as { text: string }[])[0]?.text, 'polled:300', 'the result, delivered on the resumed stream');
  t.equal((result._meta as Record<string, { cost: number }> | undefined)?.[RECEIPT]?.cost, 1, 'with its receipt');
  t.equal(await researchBalance(gateway, handle), 2, 'exactly one credit spent');
  t.equal(upstream.callsOf('polling').length, 1, 'the tool ran once');
});

t.test('a free request reusing the id of a paid call in flight, or of a released one, is refused and never carries its result', async (t) => {
  const { upstream, gateway, handle } = await setUp(t, { callDeadline: '800ms', ignoreCancellation: true });
  const session = await openSession(gateway.url);
  const { call } = await startPaidCall(gateway, session, 11, 'slow', { ms: 1_500, tollboothToken: handle });

  const inFlight = await postRaw(session, toolCall(11, 'echo', { text: 'free' }));
  t.equal(inFlight.status, 400, 'refused while the paid call runs');
  t.equal(((await inFlight.json()) as { error?: { code?: number } }).error?.code, -32600);

  const refused = await call.responseFor(11, 5_000);
  t.equal(refused?.result?._meta?.[REFUSAL]?.reason, 'deadline_exceeded');
  const afterRelease = await postRaw(session, toolCall(11, 'echo', { text: 'free' }));
  t.equal(afterRelease.status, 400, 'refused after the paid call was released');
  await afterRelease.arrayBuffer();
  await sleep(1_000); // the tool finishes upstream
  t.equal(upstream.callsOf('echo').length, 0, 'no free request with that id reached the upstream');
  t.equal(await researchBalance(gateway, handle), 3);
});
