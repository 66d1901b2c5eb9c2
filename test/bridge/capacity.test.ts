// SPEC §22 at the bridge: children are for clients that can use them. A client that never completes
// initialize loses its child after initTimeout; one that leaves before initialize was answered loses it at
// once; at maxChildren the least recently used idle child makes room before a client is refused; capacity()
// says where the slots are. Real children, counted from /proc by a marker argument.
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { newMarker, processesWith } from '../helpers/processes.js';
import { initializeRequest, openRawSession, raw, sessionHeaders, startTestBridge, toolCall, waitFor } from './helpers.js';

const fixture = (name: string): string => fileURLToPath(new URL(`../fixtures/bridge/${name}`, import.meta.url));

t.test('a client that never sends initialized: its child is stopped after initTimeout and the slot comes back', async (t) => {
  const marker = newMarker();
  const bridge = await startTestBridge(t, { command: [process.execPath, fixture('raw-server.mjs'), marker], maxChildren: 1, initTimeoutMs: 1_500 });
  const answer = await raw(bridge, 'POST', initializeRequest(0));
  const id = answer.headers['mcp-session-id'];
  t.ok(id, 'initialize was answered');
  t.match(bridge.capacity(), { starting: 1, free: 0 }, 'the child counts as starting until the client says initialized');
  await waitFor(() => processesWith(marker).length === 0 && bridge.capacity().free === 1, 'the child to be stopped and its slot freed');
  t.ok(bridge.log.lines.some((line) => line.evt === 'bridge_init_timeout'), 'logged why');
  t.equal((await raw(bridge, 'POST', toolCall(1, 'echo', { text: 'x' }), sessionHeaders(id!))).status, 404, 'the session is gone');
  const next = await openRawSession(bridge);
  t.ok(next.id, 'the next client gets the slot');
  t.match(bridge.capacity(), { active: 1, free: 0 });
});

t.test('a client that leaves before initialize is answered: its child is stopped (nobody can ever use it)', async (t) => {
  const marker = newMarker();
  // The server takes 1.5 s to start; the client gives up after 200 ms.
  const bridge = await startTestBridge(t, { command: [process.execPath, fixture('slow-start.mjs'), '1500', marker], maxChildren: 1, initTimeoutMs: 60_000 });
  await waitFor(() => processesWith(marker).length === 0, 'the start-up probe child to be gone');
  const abandoned = raw(bridge, 'POST', initializeRequest(0), {}, AbortSignal.timeout(200)).catch(() => undefined);
  await abandoned;
  await waitFor(() => bridge.log.lines.some((line) => line.evt === 'bridge_session_end' && line.why === 'the client left before initialize was answered'), 'the session to end');
  await waitFor(() => processesWith(marker).length === 0 && bridge.capacity().free === 1, 'the child gone, the slot free (well before the 60 s initTimeout)');
});

t.test('at maxChildren the least recently used idle child is stopped for a new client; a busy one never is', async (t) => {
  const marker = newMarker();
  const bridge = await startTestBridge(t, { command: [process.execPath, fixture('raw-server.mjs'), marker], maxChildren: 2, evictAfterIdleMs: 300 });
  const first = await openRawSession(bridge);
  const second = await openRawSession(bridge);
  // The second client keeps its GET stream open: in use, whatever the clock says.
  const listening = new AbortController();
  t.teardown(() => listening.abort());
  raw(bridge, 'GET', undefined, sessionHeaders(second.id!), listening.signal).catch(() => undefined);
  await waitFor(() => bridge.capacity().idle === 1, 'the first session to count as idle');
  t.strictSame(bridge.capacity(), { max: 2, starting: 0, active: 1, idle: 1, free: 0 });
  const third = await openRawSession(bridge);
  t.ok(third.id, 'the new client got a slot');
  t.ok(bridge.log.lines.some((line) => line.evt === 'bridge_child_evicted' && line.session === first.id), 'the idle first session was evicted');
  t.equal((await raw(bridge, 'POST', toolCall(1, 'echo', { text: 'x' }), sessionHeaders(first.id!))).status, 404, 'the evicted session is gone (its client initialises again)');
  t.match((await raw(bridge, 'POST', toolCall(2, 'echo', { text: 'still here' }), sessionHeaders(second.id!))).messages[0], { result: { content: [{ text: 'still here' }] } }, 'the listening session was kept');
  // The third session was just used: not idle long enough. The fourth client is refused.
  const fourth = await raw(bridge, 'POST', initializeRequest(0));
  t.match(fourth.messages[0], { error: { code: -32000, data: { reason: 'at_capacity' } } }, 'nothing idle long enough: refused');
  t.equal(processesWith(marker).length, 2, 'two children, as maxChildren says');
});
