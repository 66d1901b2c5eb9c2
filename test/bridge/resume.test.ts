// Last-Event-ID (SPEC §5.5): a session's events are kept (bounded) with event ids, so a client that lost a
// stream resumes it — a POST's stream (2025-11-25 priming event) and the GET stream.
import t from 'tap';
import { request } from 'undici';
import { openRawSession, readEvents, sessionHeaders, startTestBridge, toolCall, type SseEvent } from './helpers.js';

/** GET with Last-Event-ID the way a client reconnects: again after a pause while the old stream is still being torn down (409). */
async function resume(bridge: Parameters<typeof readEvents>[0], headers: Record<string, string>, lastEventId: string, until: (events: SseEvent[]) => boolean) {
  for (let attempt = 0; ; attempt++) {
    const answer = await readEvents(bridge, 'GET', undefined, { ...headers, 'last-event-id': lastEventId }, until);
    if (answer.status !== 409 || attempt === 40) return answer;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

t.test('a POST stream dropped after its first event is resumed with Last-Event-ID: progress and the result', async (t) => {
  const bridge = await startTestBridge(t);
  const { id } = await openRawSession(bridge);
  const headers = sessionHeaders(id!);
  const first = await readEvents(bridge, 'POST', toolCall(1, 'slow', { ms: 100, steps: 3 }, { progressToken: 'tok' }), headers, (events) => events.length >= 1);
  t.equal(first.status, 200);
  const priming = first.events[0]!;
  t.ok(priming.id, 'the stream starts with an event id (priming event, 2025-11-25)');
  t.equal(priming.data, '', 'and no data');
  // The call goes on without its client; everything it produced is kept.
  const resumed = await resume(bridge, headers, priming.id!, (events) => events.some((event) => event.message?.id === 1));
  t.equal(resumed.status, 200);
  const messages = resumed.events.map((event) => event.message);
  t.same(
    messages.filter((message) => message?.method === 'notifications/progress').map((message) => message?.params.progress),
    [1, 2, 3],
    'every progress notification, with the client’s token',
  );
  t.ok(messages.every((message) => message?.method !== 'notifications/progress' || message.params.progressToken === 'tok'));
  t.match(messages.at(-1), { jsonrpc: '2.0', id: 1, result: { content: [{ text: 'slow done' }] } }, 'and the result');
  t.ok(resumed.events.every((event) => event.id?.startsWith(priming.id!.split('.')[0]!)), 'all from the same stream');
});

t.test('the GET stream is resumed after the last event the client saw', async (t) => {
  const bridge = await startTestBridge(t);
  const { id } = await openRawSession(bridge);
  const headers = sessionHeaders(id!);
  const listening = readEvents(bridge, 'GET', undefined, headers, (events) => events.filter((event) => event.message).length >= 3);
  await new Promise((resolve) => setTimeout(resolve, 100)); // the GET stream is open
  const call = await readEvents(bridge, 'POST', toolCall(1, 'later', { ms: 20, count: 3 }), headers, (events) => events.some((event) => event.message?.id === 1));
  t.match(call.events.at(-1)?.message, { id: 1, result: { content: [{ text: 'answered' }] } });
  const seen = (await listening).events.filter((event) => event.message);
  t.same(seen.map((event) => event.message?.params.data), ['later 1', 'later 2', 'later 3'], 'notifications after the call went to the GET stream');
  // The client processed only the first one before its connection broke.
  const resumed = await resume(bridge, headers, seen[0]!.id!, (events) => events.filter((event) => event.message).length >= 2);
  t.same(resumed.events.map((event) => event.message?.params.data), ['later 2', 'later 3'], 'replayed from after the last event seen');
});

t.test('a GET stream is answered at once: its headers come before any event, not with a keep-alive', async (t) => {
  const bridge = await startTestBridge(t);
  const { id } = await openRawSession(bridge);
  const headers = sessionHeaders(id!);
  // Without a flush the status line waits for the first bytes of the body: the transport's keep-alive comment 15 s later.
  const stream = await request(bridge.url, { method: 'GET', dispatcher: bridge.dispatcher, headers: { accept: 'text/event-stream', ...headers } });
  t.equal(stream.statusCode, 200);
  t.equal(stream.headers['content-type'], 'text/event-stream');
  // Only now is anything sent on it: a call whose notification goes to the GET stream.
  const call = readEvents(bridge, 'POST', toolCall(1, 'later', { ms: 20, count: 1 }), headers, (events) => events.some((event) => event.message?.id === 1));
  let first = '';
  for await (const chunk of stream.body) {
    first = String(chunk);
    break;
  }
  t.match(first, /^event: message\nid: .+\ndata: .*"later 1"/, 'the first bytes on the stream are the notification sent after it opened');
  t.match((await call).events.at(-1)?.message, { id: 1, result: { content: [{ text: 'answered' }] } });
});

t.test('messages for the GET stream wait for it when the client has none open', async (t) => {
  const bridge = await startTestBridge(t);
  const { id } = await openRawSession(bridge);
  const headers = sessionHeaders(id!);
  await readEvents(bridge, 'POST', toolCall(1, 'later', { ms: 10, count: 2 }), headers, (events) => events.some((event) => event.message?.id === 1));
  await new Promise((resolve) => setTimeout(resolve, 200)); // both notifications were sent while no GET stream was open
  const late = await readEvents(bridge, 'GET', undefined, headers, (events) => events.filter((event) => event.message).length >= 2);
  t.same(late.events.map((event) => event.message?.params.data), ['later 1', 'later 2'], 'delivered when the GET stream opened');
});

t.test('an unknown event id is refused', async (t) => {
  const bridge = await startTestBridge(t);
  const { id } = await openRawSession(bridge);
  const answer = await readEvents(bridge, 'GET', undefined, { ...sessionHeaders(id!), 'last-event-id': 'garbage' }, () => true);
  t.equal(answer.status, 400);
});
