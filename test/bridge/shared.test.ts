// `sessions: shared` (SPEC §5.5): one child for every client, ids and progress tokens rewritten so clients
// never collide, server→client requests routed to the client whose call is running, a dead child restarted
// with backoff while sessions stay. The capabilities the child sees are the bridge's (documented).
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, ElicitRequestSchema, type ClientCapabilities } from '@modelcontextprotocol/sdk/types.js';
import t from 'tap';
import { SHARED_CHILD_CAPABILITIES } from '../../src/bridge/supervisor.js';
import { CAPABILITIES_SERVER, MiB, RAW_SERVER, openRawSession, raw, sessionHeaders, startTestBridge, toolCall, waitFor, type Json, type TestBridge } from './helpers.js';

async function connect(bridge: TestBridge, capabilities: ClientCapabilities = {}): Promise<Client> {
  const client = new Client({ name: 'shared-client', version: '1.0.0' }, { capabilities });
  await client.connect(new StreamableHTTPClientTransport(new URL(bridge.url), { fetch: bridge.fetch }));
  t.teardown(() => client.close());
  return client;
}

const text = (result: unknown): string => (result as Json).content[0].text as string;

t.test('the shared child is initialised by the bridge with its own capabilities, once', async (t) => {
  const bridge = await startTestBridge(t, { command: CAPABILITIES_SERVER, sessions: 'shared' });
  const a = await connect(bridge, { roots: {} });
  const b = await connect(bridge, {});
  const seen = JSON.parse(text(await a.callTool({ name: 'whoami', arguments: {} }))) as Json;
  t.strictSame(seen, { clientInfo: { name: 'tollbooth-bridge', version: '0.1.0' }, capabilities: SHARED_CHILD_CAPABILITIES }, 'documented: what a shared child sees');
  t.equal(text(await b.callTool({ name: 'whoami', arguments: {} })), JSON.stringify(seen), 'the same child for every client');
  t.strictSame(a.getServerVersion(), { name: 'capabilities-fixture', version: '1.0.0' }, 'clients get the child’s own identity');
  t.match(await bridge.probe(), { ok: true, detail: /shared stdio child running/ });
});

t.test('two clients with colliding request ids and progress tokens each get their own progress', async (t) => {
  const bridge = await startTestBridge(t, { command: RAW_SERVER, sessions: 'shared' });
  const [a, b] = [await connect(bridge), await connect(bridge)];
  const seen: Record<string, number[]> = { a: [], b: [] };
  // Both SDK clients number their first request and its progress token alike: the child must not mix them up.
  const call = (client: Client, tag: string, steps: number) =>
    client.callTool({ name: 'slow', arguments: { ms: 30, steps } }, CallToolResultSchema, { onprogress: (p) => void seen[tag]!.push(p.total as number) });
  const [ra, rb] = await Promise.all([call(a, 'a', 3), call(b, 'b', 2)]);
  t.equal(text(ra), 'slow done');
  t.equal(text(rb), 'slow done');
  t.strictSame(seen, { a: [3, 3, 3], b: [2, 2] });
});

t.test('a server→client request reaches the client whose call is running, and its answer gets back', async (t) => {
  const bridge = await startTestBridge(t, { command: CAPABILITIES_SERVER, sessions: 'shared' });
  const asker = await connect(bridge, { elicitation: {} });
  asker.setRequestHandler(ElicitRequestSchema, async () => ({ action: 'accept', content: { name: 'Ada' } }));
  await connect(bridge, { elicitation: {} }); // another capable client, idle: not a candidate
  t.equal(text(await asker.callTool({ name: 'ask', arguments: { via: 'elicit' } })), 'elicited accept {"name":"Ada"}');
});

t.test('a dead shared child: the call in flight gets an error, the child restarts, the session goes on', async (t) => {
  const bridge = await startTestBridge(t, { command: RAW_SERVER, sessions: 'shared', restartBackoff: { initialMs: 50, maxMs: 200 } });
  const { id } = await openRawSession(bridge);
  const crash = await raw(bridge, 'POST', toolCall(1, 'crash'), sessionHeaders(id!));
  t.match(crash.messages.at(-1), { id: 1, error: { code: -32603, message: /exited \(code 1\)/, data: { reason: 'stdio_server_gone' } } });
  const after = await raw(bridge, 'POST', toolCall(2, 'echo', { text: 'back' }), sessionHeaders(id!));
  t.equal(after.status, 200, 'the session survived');
  t.match(after.messages.at(-1), { id: 2, result: { content: [{ text: 'back' }] } }, 'served by the restarted child');
  t.ok(bridge.log.lines.some((line) => line.evt === 'bridge_child_restart'));
});

t.test('a line over maxLineBytes on the shared child: the call gets an error, the child restarts', async (t) => {
  const bridge = await startTestBridge(t, { command: RAW_SERVER, sessions: 'shared', maxLineBytes: 2 * MiB, restartBackoff: { initialMs: 50, maxMs: 200 } });
  const { id } = await openRawSession(bridge);
  const big = await raw(bridge, 'POST', toolCall(1, 'big', { mb: 100 }), sessionHeaders(id!));
  t.match(big.messages.at(-1), { id: 1, error: { message: /line longer than 2097152 bytes/ } });
  await waitFor(async () => (await bridge.probe()).ok, 'the restart');
  t.match((await raw(bridge, 'POST', toolCall(2, 'echo', { text: 'ok' }), sessionHeaders(id!))).messages.at(-1), { result: { content: [{ text: 'ok' }] } });
});

t.test('maxSessions bounds the sessions on a shared child', async (t) => {
  const bridge = await startTestBridge(t, { command: RAW_SERVER, sessions: 'shared', maxSessions: 2 });
  t.ok((await openRawSession(bridge)).id);
  const second = await openRawSession(bridge);
  t.ok(second.id);
  const third = await openRawSession(bridge);
  t.match(third.answer.messages[0], { id: 0, error: { code: -32000, message: /maximum number of sessions on the shared stdio child \(2\)/, data: { reason: 'at_capacity' } } });
  await raw(bridge, 'DELETE', undefined, sessionHeaders(second.id!));
  t.ok((await openRawSession(bridge)).id, 'a freed place is taken');
});

t.test('an idle session on the shared child ends (404) while the child stays', async (t) => {
  const bridge = await startTestBridge(t, { command: RAW_SERVER, sessions: 'shared', idleTimeoutMs: 150 });
  const { id } = await openRawSession(bridge);
  await waitFor(() => bridge.log.lines.some((line) => line.evt === 'bridge_session_end' && line.session === id), 'the session to be reaped');
  t.equal((await raw(bridge, 'POST', toolCall(1, 'echo', { text: 'x' }), sessionHeaders(id!))).status, 404);
  t.match(await bridge.probe(), { ok: true });
});
