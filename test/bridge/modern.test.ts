// 2026-07-28 clients (SPEC §5.5): stateless requests served on top of a legacy child initialised with the
// capabilities the request declares; the same capability set shares a child; results stamped
// `resultType: "complete"`; closing a request's stream cancels it in the child; maxChildren and the idle
// timeout cover these children too.
import { Client as ModernClient, StreamableHTTPClientTransport as ModernTransport } from '@modelcontextprotocol/client';
import t from 'tap';
import { everythingEntry } from '../helpers/interop-upstreams.js';
import { CAPABILITIES_SERVER, openRawSession, raw, readEvents, sessionHeaders, startTestBridge, waitFor, type Json, type TestBridge } from './helpers.js';

const envelope = (capabilities: Json = {}, clientInfo: Json = { name: 'raw-modern', version: '1' }): Json => ({
  'io.modelcontextprotocol/protocolVersion': '2026-07-28',
  'io.modelcontextprotocol/clientCapabilities': capabilities,
  'io.modelcontextprotocol/clientInfo': clientInfo,
});
const modern = (id: number, method: string, params: Json = {}, capabilities: Json = {}): Json => ({
  jsonrpc: '2.0', id, method, params: { ...params, _meta: { ...(params._meta as Json | undefined), ...envelope(capabilities) } },
});
const modernCall = (id: number, name: string, args: Json = {}, capabilities: Json = {}, meta: Json = {}): Json =>
  modern(id, 'tools/call', { name, arguments: args, _meta: meta }, capabilities);
const whoami = async (bridge: TestBridge, capabilities: Json): Promise<Json> =>
  JSON.parse((await raw(bridge, 'POST', modernCall(1, 'whoami', {}, capabilities))).messages[0]!.result.content[0].text as string) as Json;

t.test('a 2026-07-28 request is served without a session, its result stamped complete', async (t) => {
  const bridge = await startTestBridge(t);
  const answer = await raw(bridge, 'POST', modernCall(4, 'echo', { text: 'now' }));
  t.equal(answer.status, 200);
  t.equal(answer.headers['mcp-session-id'], undefined);
  t.match(answer.messages[0], { jsonrpc: '2.0', id: 4, result: { content: [{ text: 'now' }], resultType: 'complete', _meta: { 'io.modelcontextprotocol/serverInfo': { name: 'raw-fixture' } } } });
  const discover = await raw(bridge, 'POST', modern(5, 'server/discover'));
  t.match(discover.messages[0], { id: 5, result: { supportedVersions: ['2026-07-28'], serverInfo: { name: 'raw-fixture' }, resultType: 'complete' } });
  const batch = await raw(bridge, 'POST', [modernCall(6, 'echo', { text: 'a' })]);
  t.equal(batch.status, 400, '2026-07-28 has no batches');
  const wrong = await raw(bridge, 'POST', { ...modernCall(7, 'echo'), params: { name: 'echo', _meta: { 'io.modelcontextprotocol/protocolVersion': '2099-01-01' } } });
  t.match(wrong, { status: 400, messages: [{ error: { code: -32022 } }] });
});

t.test('the child sees the capabilities the request declares; one child per capability set', async (t) => {
  const bridge = await startTestBridge(t, { command: CAPABILITIES_SERVER });
  const withRoots = await whoami(bridge, { roots: { listChanged: true } });
  t.strictSame(withRoots, { clientInfo: { name: 'raw-modern', version: '1' }, capabilities: { roots: { listChanged: true } } });
  t.strictSame(await whoami(bridge, { sampling: {} }), { clientInfo: { name: 'raw-modern', version: '1' }, capabilities: { sampling: {} } });
  const tools = (capabilities: Json) => raw(bridge, 'POST', modern(2, 'tools/list', {}, capabilities)).then((a) => (a.messages[0]!.result.tools as Json[]).map((tool) => tool.name));
  t.ok((await tools({ roots: {} })).includes('list_roots'), 'a tool registered only for clients declaring roots');
  t.notOk((await tools({})).includes('list_roots'));
  t.match(await bridge.probe(), { ok: true, detail: /4 stdio children running/ }, 'four capability sets, four children');
  await whoami(bridge, { roots: { listChanged: true } });
  t.match(await bridge.probe(), { detail: /4 stdio children/ }, 'a known set reuses its child');
});

t.test('the bridge passes tasks and execution fields through on the wire', async (t) => {
  const bridge = await startTestBridge(t, { command: [process.execPath, everythingEntry(), 'stdio'] });
  const discover = await raw(bridge, 'POST', modern(1, 'server/discover'));
  t.match(discover.messages[0], { result: { capabilities: { tasks: { requests: { tools: { call: {} } } } } } });
  const listed = await raw(bridge, 'POST', modern(2, 'tools/list'));
  t.match((listed.messages[0]!.result.tools as Json[]).find((tool) => tool.name === 'echo'), { execution: { taskSupport: 'forbidden' } });
});

t.test('progress streams on the request with the client’s token; a closed stream cancels the call', async (t) => {
  const bridge = await startTestBridge(t);
  const progress = await readEvents(bridge, 'POST', modernCall(1, 'slow', { ms: 20, steps: 2 }, {}, { progressToken: 'mine' }), {}, (events) => events.some((e) => e.message?.id === 1));
  const messages = progress.events.map((event) => event.message);
  t.strictSame(messages.filter((m) => m?.method === 'notifications/progress').map((m) => m?.params.progressToken), ['mine', 'mine']);
  t.match(messages.at(-1), { id: 1, result: { content: [{ text: 'slow done' }], resultType: 'complete' } });
  // The client goes away before the answer (a JSON answer has not even begun): the child hears notifications/cancelled.
  const gone = new AbortController();
  const slow = raw(bridge, 'POST', modernCall(2, 'slow', { ms: 10_000 }), {}, gone.signal).catch(() => 'aborted');
  await new Promise((resolve) => setTimeout(resolve, 300));
  gone.abort();
  t.equal(await slow, 'aborted');
  let cancelled: unknown[] = [];
  await waitFor(async () => {
    const stats = await raw(bridge, 'POST', modernCall(3, 'stats'));
    cancelled = (JSON.parse(stats.messages[0]!.result.content[0].text as string) as Json).cancelled as unknown[];
    return cancelled.length === 1;
  }, 'the child to see the cancellation');
  t.equal(typeof cancelled[0], 'number', 'under the bridge’s own id for the call (ids are rewritten on a shared child)');
});

t.test('an SDK v2 client pinned to 2026-07-28 works through the bridge', async (t) => {
  const bridge = await startTestBridge(t);
  const client = new ModernClient({ name: 'modern', version: '1.0.0' }, { versionNegotiation: { mode: { pin: '2026-07-28' } } });
  await client.connect(new ModernTransport(new URL(bridge.url), { fetch: bridge.fetch }));
  t.teardown(() => client.close());
  t.equal(client.getNegotiatedProtocolVersion(), '2026-07-28');
  t.match(await client.callTool({ name: 'echo', arguments: { text: 'pinned' } }), { content: [{ text: 'pinned' }] });
});

t.test('2026-07-28 children count against maxChildren; an idle one makes room; idle ones are stopped', async (t) => {
  // evictAfterIdleMs 0: a child with nothing running may make room at once (30 s in production).
  const bridge = await startTestBridge(t, { maxChildren: 2, idleTimeoutMs: 3_000, evictAfterIdleMs: 0 });
  t.match((await raw(bridge, 'POST', modernCall(1, 'echo', { text: 'a' }, { a: {} }))).messages[0], { result: {} });
  t.match((await raw(bridge, 'POST', modernCall(1, 'echo', { text: 'b' }, { b: {} }))).messages[0], { result: {} });
  // Both slots hold idle 2026-07-28 children: a legacy session takes the least recently used one's slot.
  const session = await openRawSession(bridge);
  t.ok(session.id, 'a legacy session got a slot');
  t.ok(bridge.log.lines.some((line) => line.evt === 'bridge_child_stop' && /make room/.test(String(line.why))), 'an idle 2026-07-28 child was stopped to make room');
  // The legacy client keeps its GET stream open: its child is in use, not idle.
  const listening = new AbortController();
  t.teardown(() => listening.abort());
  raw(bridge, 'GET', undefined, sessionHeaders(session.id!), listening.signal).catch(() => undefined);
  await waitFor(() => bridge.capacity().idle === 1, 'the legacy session to be listening (only the 2026-07-28 child idle)');
  const slow = raw(bridge, 'POST', modernCall(1, 'slow', { ms: 1_000, steps: 1 }, { b: {} }));
  await new Promise((resolve) => setTimeout(resolve, 200)); // the slow call is running: that child is busy
  const refused = await raw(bridge, 'POST', modernCall(1, 'echo', { text: 'c' }, { c: {} }));
  t.match(refused.messages[0], { id: 1, error: { code: -32000, message: /maximum number of stdio children/, data: { reason: 'at_capacity' } } }, 'every slot busy: refused');
  t.match((await slow).messages.at(-1), { result: { content: [{ text: 'slow done' }] } });
  await waitFor(() => bridge.log.lines.some((line) => line.evt === 'bridge_child_stop' && line.why === 'idle'), 'the idle 2026-07-28 child to be stopped');
});

t.test('a 2026-07-28 envelope with capabilities over 64 KiB is refused', async (t) => {
  const bridge = await startTestBridge(t);
  const answer = await raw(bridge, 'POST', modernCall(9, 'echo', { text: 'x' }, { experimental: { big: { data: 'x'.repeat(70 * 1024) } } }));
  t.match(answer.messages[0], { id: 9, error: { code: -32602, data: { reason: 'client_state_too_large' } } });
});
