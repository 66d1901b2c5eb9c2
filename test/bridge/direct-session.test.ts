// perClient routing (SPEC §5.5): which stream a child's message travels on when stdio does not say.
import t from 'tap';
import { CAPABILITIES_SERVER, openRawSession, raw, readEvents, sessionHeaders, startTestBridge, toolCall, type Json } from './helpers.js';

t.test('a server→client request whose call lost its client goes to the GET stream; the answer completes the call', async (t) => {
  const bridge = await startTestBridge(t, { command: CAPABILITIES_SERVER });
  // 2025-06-18: no priming event, so the dropped POST stream cannot be resumed.
  const { id } = await openRawSession(bridge, { elicitation: {} }, '2025-06-18');
  const headers = sessionHeaders(id!, '2025-06-18');
  const gone = new AbortController();
  const call = raw(bridge, 'POST', toolCall(1, 'ask', { via: 'elicit', delayMs: 400 }), headers, gone.signal).catch(() => 'gone');
  await new Promise((resolve) => setTimeout(resolve, 100));
  gone.abort(); // well before the child asks
  t.equal(await call, 'gone');
  // The child asks after the client left that call: the GET stream (held until opened) carries it.
  const asked = await readEvents(bridge, 'GET', undefined, headers, (events) => events.some((event) => event.message?.method === 'elicitation/create'), 10_000);
  const request = asked.events.find((event) => event.message?.method === 'elicitation/create')!.message as Json;
  t.match(request.params, { message: 'Your name?' });
  const answered = await raw(bridge, 'POST', { jsonrpc: '2.0', id: request.id, result: { action: 'accept', content: { name: 'Ada' } } }, headers);
  t.equal(answered.status, 202, 'the answer reached the child');
});

t.test('logging goes to the stream of the call that caused it, before its result; levels are the client’s', async (t) => {
  const bridge = await startTestBridge(t, { command: CAPABILITIES_SERVER });
  const { id } = await openRawSession(bridge);
  const headers = sessionHeaders(id!);
  t.match((await raw(bridge, 'POST', { jsonrpc: '2.0', id: 1, method: 'logging/setLevel', params: { level: 'error' } }, headers)).messages.at(-1), { id: 1, result: {} });
  const logged = await raw(bridge, 'POST', toolCall(2, 'log'), headers);
  t.strictSame(
    logged.messages.map((message) => message.method ?? `result ${message.id}`),
    ['notifications/message', 'result 2'],
    'one message at error level, then the result',
  );
  t.match(logged.messages[0], { params: { level: 'error', data: 'at error' } });
});

t.test('a client’s notifications/cancelled reaches the child and closes the request’s stream', async (t) => {
  const bridge = await startTestBridge(t);
  const { id } = await openRawSession(bridge);
  const headers = sessionHeaders(id!);
  const slow = raw(bridge, 'POST', toolCall(7, 'slow', { ms: 10_000 }), headers);
  await new Promise((resolve) => setTimeout(resolve, 100));
  await raw(bridge, 'POST', { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 7, reason: 'changed my mind' } }, headers);
  t.match((await slow).messages.at(-1), { id: 7, error: { code: -32800, data: { reason: 'cancelled' } } });
});

t.test('two calls of one client get their own progress, by token', async (t) => {
  const bridge = await startTestBridge(t);
  const { id } = await openRawSession(bridge);
  const headers = sessionHeaders(id!);
  const [a, b] = await Promise.all([
    raw(bridge, 'POST', toolCall(1, 'slow', { ms: 30, steps: 3 }, { progressToken: 'a' }), headers),
    raw(bridge, 'POST', toolCall(2, 'slow', { ms: 30, steps: 2 }, { progressToken: 'b' }), headers),
  ]);
  const tokens = (messages: Json[]) => messages.filter((m) => m.method === 'notifications/progress').map((m) => m.params.progressToken);
  t.strictSame(tokens(a.messages), ['a', 'a', 'a']);
  t.strictSame(tokens(b.messages), ['b', 'b']);
});
