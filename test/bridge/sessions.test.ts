// perClient sessions over raw HTTP against the hand-written fixture: one child per session, 404 once a
// session ended (DELETE, idle, dead child), maxChildren, the 64 KiB bound on client state, readiness.
import t from 'tap';
import {
  initializeRequest, openRawSession, processAlive, raw, sessionHeaders, startTestBridge, toolCall, waitFor,
} from './helpers.js';

t.test('each initialize gets its own child, and the child answers the client’s own initialize', async (t) => {
  const bridge = await startTestBridge(t);
  const a = await raw(bridge, 'POST', initializeRequest(1, {}, '2025-06-18'));
  const b = await raw(bridge, 'POST', initializeRequest(1, {}, '2025-03-26'));
  t.equal(a.status, 200);
  // The fixture echoes the requested revision back: each child saw its own client's initialize.
  t.equal(a.messages.at(-1)?.result.protocolVersion, '2025-06-18');
  t.equal(b.messages.at(-1)?.result.protocolVersion, '2025-03-26');
  t.equal(a.messages.at(-1)?.id, 1, 'the client’s id, untouched');
  t.not(a.headers['mcp-session-id'], b.headers['mcp-session-id']);
  t.match(await bridge.probe(), { ok: true, detail: /2 stdio children running/ });
});

t.test('requests need a known session; DELETE ends it and stops its child (404 afterwards)', async (t) => {
  const bridge = await startTestBridge(t);
  const missing = await raw(bridge, 'POST', toolCall(1, 'echo', { text: 'x' }));
  t.equal(missing.status, 400);
  t.match(missing.messages[0], { error: { message: /Mcp-Session-Id header is required/ } });
  const unknown = await raw(bridge, 'POST', toolCall(1, 'echo', { text: 'x' }), sessionHeaders('nope'));
  t.equal(unknown.status, 404);

  const { id } = await openRawSession(bridge);
  const echo = await raw(bridge, 'POST', toolCall(7, 'echo', { text: 'hi' }), sessionHeaders(id!));
  t.same(echo.messages.at(-1), { jsonrpc: '2.0', id: 7, result: { content: [{ type: 'text', text: 'hi' }] } });
  const deleted = await raw(bridge, 'DELETE', undefined, sessionHeaders(id!));
  t.equal(deleted.status, 200);
  const after = await raw(bridge, 'POST', toolCall(8, 'echo', { text: 'hi' }), sessionHeaders(id!));
  t.equal(after.status, 404, 'the session is gone');
  await waitFor(async () => (await bridge.probe()).detail !== '1 stdio child running', 'the child to be stopped');
});

t.test('past maxChildren a new initialize gets a JSON-RPC error saying so; ending a session frees a slot', async (t) => {
  const bridge = await startTestBridge(t, { maxChildren: 2 });
  const first = await openRawSession(bridge);
  const second = await openRawSession(bridge);
  t.ok(first.id && second.id);
  const third = await openRawSession(bridge);
  t.equal(third.id, undefined, 'no session');
  t.equal(third.answer.status, 200);
  t.match(third.answer.messages[0], { id: 0, error: { code: -32000, message: /maximum number of stdio children \(maxChildren: 2\)/, data: { reason: 'at_capacity' } } });
  await raw(bridge, 'DELETE', undefined, sessionHeaders(first.id!));
  const fourth = await openRawSession(bridge);
  t.ok(fourth.id, 'a slot was freed');
});

t.test('capabilities or clientInfo over 64 KiB are refused with a JSON-RPC error and no child', async (t) => {
  const bridge = await startTestBridge(t, { maxChildren: 1 });
  // (experimental values must be objects, or the SDK transport does not take it for an initialize at all)
  const big = { experimental: { blob: { data: 'x'.repeat(65 * 1024) } } };
  const refused = await raw(bridge, 'POST', initializeRequest(3, big));
  t.equal(refused.headers['mcp-session-id'], undefined);
  t.match(refused.messages[0], { id: 3, error: { code: -32602, message: /capabilities of \d+ bytes is over the bridge's 64 KiB limit/, data: { reason: 'client_state_too_large' } } });
  const info = await raw(bridge, 'POST', initializeRequest(4, {}, '2025-11-25', { name: 'n'.repeat(70 * 1024), version: '1' }));
  t.match(info.messages[0], { id: 4, error: { message: /clientInfo of \d+ bytes/ } });
  const fine = await openRawSession(bridge, { experimental: { blob: { data: 'x'.repeat(60 * 1024) } } });
  t.ok(fine.id, 'just under the bound is fine, and the refused ones held no child slot (maxChildren: 1)');
});

t.test('an idle session is reaped: its child stops and the next request gets 404', async (t) => {
  const bridge = await startTestBridge(t, { idleTimeoutMs: 200 });
  const { id } = await openRawSession(bridge);
  t.equal((await raw(bridge, 'POST', toolCall(1, 'echo', { text: 'a' }), sessionHeaders(id!))).status, 200);
  // Watch the log, not the endpoint: a request is activity and would keep the session alive.
  await waitFor(() => bridge.log.lines.some((line) => line.evt === 'bridge_session_end' && line.session === id), 'the session to be reaped');
  const ended = bridge.log.lines.find((line) => line.evt === 'bridge_session_end' && line.session === id);
  t.match(ended, { why: 'idle' });
  await waitFor(() => !processAlive(ended?.pid), 'its child to exit');
  t.equal((await raw(bridge, 'POST', toolCall(2, 'echo', { text: 'b' }), sessionHeaders(id!))).status, 404, 'the next request gets 404');
  t.ok((await openRawSession(bridge)).id, 'a new session works');
});

t.test('a session with a call in flight or an open stream is not idle', async (t) => {
  const bridge = await startTestBridge(t, { idleTimeoutMs: 500 });
  const { id } = await openRawSession(bridge);
  const slow = await raw(bridge, 'POST', toolCall(1, 'slow', { ms: 500, steps: 3 }), sessionHeaders(id!));
  t.match(slow.messages.at(-1), { id: 1, result: { content: [{ text: 'slow done' }] } }, 'a 1.5 s call outlives a 500 ms idle timeout');
  t.notOk(bridge.log.lines.some((line) => line.evt === 'bridge_session_end'), 'the session was never reaped');
});

t.test('a child that dies mid-call: the call gets an error result, the session ends (404), a new one works', async (t) => {
  const bridge = await startTestBridge(t);
  const { id } = await openRawSession(bridge);
  const crash = await raw(bridge, 'POST', toolCall(5, 'crash'), sessionHeaders(id!));
  t.equal(crash.status, 200);
  t.match(crash.messages.at(-1), { id: 5, error: { code: -32603, message: /the stdio server exited \(code 1\)/, data: { reason: 'stdio_server_gone' } } });
  await waitFor(async () => (await raw(bridge, 'POST', toolCall(6, 'echo', { text: 'x' }), sessionHeaders(id!))).status === 404, 'the session to end');
  const next = await openRawSession(bridge);
  t.match((await raw(bridge, 'POST', toolCall(1, 'echo', { text: 'ok' }), sessionHeaders(next.id!))).messages.at(-1), { result: { content: [{ text: 'ok' }] } });
  t.ok(bridge.log.lines.some((line) => line.evt === 'bridge_child_stderr' && line.line === 'crashing on purpose'), 'its stderr went to the log');
});

t.test('a command that cannot start fails startBridge with a clear error', async (t) => {
  await t.rejects(startTestBridge(t, { command: ['/nonexistent/mcp-server'] }), { code: 'TB_ERR_UPSTREAM_UNAVAILABLE', message: /did not start and initialise: .*could not be started/ });
});

t.test('a child that never answers initialize fails startBridge after initializeTimeout', async (t) => {
  const silent = await startTestBridge(t, { command: [process.execPath, '-e', 'setInterval(() => {}, 1000)'], initializeTimeoutMs: 300 }).catch((error: Error) => error);
  t.match(silent, { message: /did not answer initialize within 300 ms/ }, 'even at start: the readiness spawn times out');
});

t.test('GET and DELETE without a session, other methods, other paths', async (t) => {
  const bridge = await startTestBridge(t);
  t.equal((await raw(bridge, 'GET', undefined, { accept: 'text/event-stream' })).status, 400);
  t.equal((await raw(bridge, 'DELETE')).status, 400);
  const { request } = await import('undici');
  const put = await request(bridge.url, { method: 'PUT', dispatcher: bridge.dispatcher });
  t.equal(put.statusCode, 405);
  t.equal(put.headers.allow, 'GET, POST, DELETE');
  await put.body.dump();
  const other = await request(bridge.url.replace('/mcp', '/other'), { method: 'POST', dispatcher: bridge.dispatcher, body: '{}', headers: { 'content-type': 'application/json' } });
  t.equal(other.statusCode, 404);
  await other.body.dump();
  const notJson = await raw(bridge, 'POST', '{nope', {});
  t.equal(notJson.status, 400);
  t.match(notJson.messages[0], { error: { code: -32700 } });
  const big = await raw(bridge, 'POST', 'x'.repeat(5 * 1024 * 1024));
  t.equal(big.status, 413);
});
