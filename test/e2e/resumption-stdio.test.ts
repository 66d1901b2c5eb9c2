// SPEC §6.5 for a stdio upstream: the child sits behind the bridge (src/bridge/), which keeps a session's
// events for Last-Event-ID like an SDK server with an event store, and the gateway proxies to it like
// to any HTTP upstream — so a paid call on a stdio session follows the same rules: read to its end
// when the client hangs up, charged once and delivered on resume; at the deadline released and
// cancelled in the child (notifications/cancelled through the bridge), never delivered later.
import { setTimeout as sleep } from 'node:timers/promises';
import t, { type Test } from 'tap';
import { fundedHandle, researchBalance, startTestGateway, testConfig, waitForSpends, type TestGateway } from '../helpers/gateway.js';
import { STDIO_FIXTURE_COMMAND } from '../helpers/interop-upstreams.js';
import { openSession, post, resume, toolCall } from '../helpers/legacy-session.js';

const RECEIPT = 'xyz.tollbooth/receipt';
const REFUSAL = 'xyz.tollbooth/refusal';

async function setUp(t: Test, callDeadline: string): Promise<{ gateway: TestGateway; handle: string }> {
  const base = testConfig('http://unused.invalid/mcp');
  const gateway = await startTestGateway(t, { ...base, upstream: { command: STDIO_FIXTURE_COMMAND, callDeadline }, tools: { slow: { sku: 'research', cost: 1 } } });
  const handle = await fundedHandle(gateway, 'slow', { ms: 1 });
  t.equal(await researchBalance(gateway, handle), 3);
  return { gateway, handle };
}

t.test('stdio: a client that hangs up after the first event and resumes: charged once, the result delivered on resume', async (t) => {
  const { gateway, handle } = await setUp(t, '10s');
  const session = await openSession(gateway.url);
  const call = await post(session, toolCall(31, 'slow', { ms: 500, tollboothToken: handle }));
  const first = await call.next();
  t.ok(first?.id, 'the bridge primes the stream with an event id');
  call.abort();
  await waitForSpends(gateway, handle); // the call ends in the child and is charged while nobody listens
  const resumed = await resume(session, first?.id as string);
  const reply = await resumed.responseFor(31, 5_000);
  resumed.abort();
  t.equal(reply?.result?.content?.[0]?.text, 'slow done');
  t.equal(reply?.result?._meta?.[RECEIPT]?.cost, 1, 'with its receipt');
  t.equal(await researchBalance(gateway, handle), 2, 'exactly one credit spent');
});

t.test('stdio: at the deadline the call is released and cancelled in the child; nothing of it comes later', async (t) => {
  const { gateway, handle } = await setUp(t, '700ms');
  const session = await openSession(gateway.url);
  const call = await post(session, toolCall(32, 'slow', { ms: 2_000, tollboothToken: handle }));
  const first = await call.next();
  const refused = await call.responseFor(32, 5_000);
  t.equal(refused?.result?._meta?.[REFUSAL]?.reason, 'deadline_exceeded');
  t.equal(await researchBalance(gateway, handle), 3, 'released');
  await sleep(1_800);
  const resumed = await resume(session, first?.id as string);
  t.equal(await resumed.responseFor(32, 1_000), null, 'no late result on the resumed stream');
  resumed.abort();
  const stats = await post(session, toolCall(33, 'stats', {}));
  const counted = JSON.parse((await stats.responseFor(33, 5_000))?.result?.content?.[0]?.text ?? '{}') as { cancelledCalls?: number };
  t.equal(counted.cancelledCalls, 1, 'the child heard notifications/cancelled for the call');
});
