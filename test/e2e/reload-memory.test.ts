// SPEC §6.5 + §21: what the gateway remembers to keep paid results paid — the paid and released request
// ids of each session, and the deadlines of paid calls still pending — survives a config reload and is
// shared by every replica on one Redis. As an operator sees it: real gateway processes (`node dist/cli.js
// start`), a real SIGHUP, an SDK v1 upstream with sessions and an event store, a legacy client that reuses
// a paid call's JSON-RPC id (the SDK v1 server routes a response to the latest request with its id, so a
// reuse that reached it would take the paid result). Needs `npm run build` first.
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import t, { type Test } from 'tap';
import type { ConfigInput } from '../../src/config/schema.js';
import { waitFor } from '../helpers/clock.js';
import { testConfig } from '../helpers/gateway.js';
import { balanceOf, callTool, connectStore, payDevCheckout, redisGatewayConfig, startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process.js';
import { openSession, post, postRaw, toolCall, type EventReader, type SessionHandle } from '../helpers/legacy-session.js';
import { startPaidUpstream, type PaidUpstream } from '../helpers/paid-upstream.js';
import { startRedis } from '../helpers/redis-server.js';

const REFUSAL = 'xyz.tollbooth/refusal';
const TOOLS = { fetch_readable: { sku: 'research', cost: 1 }, slow: { sku: 'research', cost: 1 }, polling: { sku: 'research', cost: 1 } };

async function resumableUpstream(t: Test): Promise<PaidUpstream> {
  const upstream = await startPaidUpstream('sessions-resumable', { ignoreCancellation: true });
  t.teardown(() => upstream.close());
  return upstream;
}

async function fund(gateway: GatewayProcess): Promise<string> {
  const challenge = await callTool(gateway.url, 'fetch_readable', { url: 'https://example.com/' });
  if (challenge.kind !== 'challenged') throw new Error(`expected a challenge, got ${JSON.stringify(challenge)}`);
  if ((await payDevCheckout(challenge.checkoutUrl, gateway.origin)) !== 303) throw new Error('the dev checkout failed');
  return challenge.handle;
}

/** Rewrites the config file (a price changed, the port kept) and sends SIGHUP; resolves on the reload's success line. */
async function reload(gateway: GatewayProcess, input: ConfigInput): Promise<void> {
  writeFileSync(gateway.configPath, JSON.stringify({ ...input, server: { ...input.server, host: '127.0.0.1', port: gateway.port } }, null, 2));
  const before = gateway.logs().filter((line) => line.evt === 'config_reload').length;
  gateway.child.kill('SIGHUP');
  await waitFor(() => gateway.logs().filter((line) => line.evt === 'config_reload').length > before, 'the reload line', { timeoutMs: 30_000 });
  const line = gateway.logs().filter((entry) => entry.evt === 'config_reload').pop();
  if (line?.result !== 'success') throw new Error(`the reload failed: ${JSON.stringify(line)}`);
}

/** Starts a paid call in the session and reads its first event (the call is then at the upstream). */
async function startPaidCall(session: SessionHandle, id: number, name: string, args: Record<string, unknown>): Promise<EventReader> {
  const call = await post(session, toolCall(id, name, args));
  if (call.response.status !== 200) throw new Error(`HTTP ${call.response.status}: ${await call.response.text()}`);
  if (!(await call.next())?.id) throw new Error('the first event carries no id');
  return call;
}

/** A free request reusing `id` in the session: refused 400 -32600, its body never the paid result. */
async function assertReuseRefused(t: Test, session: SessionHandle, id: number, what: string): Promise<void> {
  const reuse = await postRaw(session, toolCall(id, 'echo', { text: 'free' }));
  const text = await reuse.text();
  t.equal(reuse.status, 400, `${what}: refused 400`);
  t.match(text, /"code":-32600/, `${what}: Invalid Request`);
  t.notMatch(text, /slept|polled/, `${what}: the paid result is not in the answer`);
}

t.test('after a SIGHUP, a free request reusing the id of a paid call in flight is refused and never takes its result', async (t) => {
  const upstream = await resumableUpstream(t);
  const config = testConfig(upstream.url, { upstream: { url: upstream.url, callDeadline: '1500ms' }, tools: TOOLS });
  const gateway = await startGatewayProcess(t, config);
  const handle = await fund(gateway);
  const session = await openSession(gateway.url);
  const paid = await startPaidCall(session, 11, 'slow', { ms: 2_500, tollboothToken: handle });

  await reload(gateway, { ...config, tools: { ...TOOLS, fetch_readable: { sku: 'research', cost: 2 } } });
  await assertReuseRefused(t, session, 11, 'while the paid call runs, after the reload');

  const refused = await paid.responseFor(11, 8_000);
  t.equal(refused?.result?._meta?.[REFUSAL]?.reason, 'deadline_exceeded', 'the paid call ends at its deadline under the old config');
  await assertReuseRefused(t, session, 11, 'after the paid call was released');
  t.equal(upstream.callsOf('echo').length, 0, 'no request reusing the id reached the upstream');
});

t.test('a paid call left pending by the upstream (stream closed early) is still released at its deadline after the gateway that forwarded it was replaced', async (t) => {
  const upstream = await resumableUpstream(t);
  const config = testConfig(upstream.url, { upstream: { url: upstream.url, callDeadline: '1500ms' }, tools: TOOLS });
  const gateway = await startGatewayProcess(t, config);
  const handle = await fund(gateway);
  const session = await openSession(gateway.url);
  // `polling` closes its POST stream at once (2025-11-25 polling) and answers 4 s later: the call stays
  // in flight for a resumed stream to conclude, or for its deadline.
  const paid = await startPaidCall(session, 12, 'polling', { ms: 4_000, tollboothToken: handle });
  t.equal(await paid.next(3_000), null, 'the client stream ends as the upstream ended it');

  // The old gateway has no request in flight: it drains at once and closes.
  await reload(gateway, { ...config, tools: { ...TOOLS, fetch_readable: { sku: 'research', cost: 2 } } });
  await waitFor(() => upstream.cancellations.some((c) => c.requestId === 12), 'notifications/cancelled for the pending call at its deadline', { timeoutMs: 8_000 });
  t.same(upstream.cancellations.filter((c) => c.requestId === 12).map((c) => c.sessionId), [session.sessionId], 'released at its deadline: the upstream told to cancel, in its session');
  await assertReuseRefused(t, session, 12, 'after it was released');
});

t.test('two replicas on one Redis: a session reused through another replica has its paid ids refused the same there', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const upstream = await resumableUpstream(t);
  const keyPrefix = `tbreload${randomBytes(3).toString('hex')}:`;
  const config = redisGatewayConfig(upstream.url, { url: redis.url }, keyPrefix, { upstream: { url: upstream.url, callDeadline: '1500ms' }, tools: TOOLS });
  const [a, b] = await Promise.all([startGatewayProcess(t, config), startGatewayProcess(t, config)]);
  const handle = await fund(a);
  const store = await connectStore(t, { url: redis.url }, keyPrefix);

  const session = await openSession(a.url);
  const onB: SessionHandle = { ...session, url: b.url }; // the same Mcp-Session-Id, sent to the other replica
  const paid = await startPaidCall(session, 21, 'slow', { ms: 2_500, tollboothToken: handle });
  await assertReuseRefused(t, onB, 21, 'through the other replica while the paid call runs');

  const refused = await paid.responseFor(21, 8_000);
  t.equal(refused?.result?._meta?.[REFUSAL]?.reason, 'deadline_exceeded');
  await assertReuseRefused(t, onB, 21, 'through the other replica after the paid call was released');
  t.equal(upstream.callsOf('echo').length, 0, 'no request reusing the id reached the upstream');
  t.equal(await balanceOf(store, handle), 3, 'the released call cost nothing');

  // Negative control: a fresh id in the same session goes through the other replica as usual.
  const fresh = await postRaw(onB, toolCall(22, 'echo', { text: 'free' }));
  t.equal(fresh.status, 200, 'a new id is served by either replica');
  t.match(await fresh.text(), /free/);
});
