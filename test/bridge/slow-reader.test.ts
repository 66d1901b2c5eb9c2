// A client that stops reading must not grow the bridge's memory: a per-client child is paused until the
// client reads again (nothing lost, as on a pipe nobody reads); on a shared child, whose other clients must
// not wait, the lagging stream is cut instead (the client may resume it).
import t from 'tap';
import { request } from 'undici';
import { LEGACY_ACCEPT, MiB, openRawSession, retainedBytes, sessionHeaders, startTestBridge, toolCall, waitFor } from './helpers.js';

async function floodWithoutReading(bridge: Parameters<typeof openRawSession>[0], headers: Record<string, string>, count: number, kb: number) {
  const response = await request(bridge.url, {
    method: 'POST',
    dispatcher: bridge.dispatcher,
    headers: { accept: LEGACY_ACCEPT, 'content-type': 'application/json', ...headers },
    body: JSON.stringify(toolCall(1, 'flood', { count, kb })),
  });
  const chunks = response.body[Symbol.asyncIterator]();
  await chunks.next(); // the stream began; now the client stops reading
  return {
    async readRest(): Promise<{ notifications: number; text: string }> {
      let text = '';
      for (let next = await chunks.next(); !next.done; next = await chunks.next()) text += String(next.value);
      return { notifications: text.split('notifications/message').length - 1, text };
    },
  };
}

t.test('perClient: the child is paused while its client does not read; nothing is lost', async (t) => {
  const bridge = await startTestBridge(t, { maxLineBytes: MiB });
  const { id } = await openRawSession(bridge);
  const before = retainedBytes();
  const flood = await floodWithoutReading(bridge, sessionHeaders(id!), 256, 256); // 64 MiB
  await new Promise((resolve) => setTimeout(resolve, 1_500));
  const grown = retainedBytes() - before;
  t.comment(`64 MiB produced for a client that stopped reading: retained growth ${(grown / MiB).toFixed(1)} MiB`);
  t.ok(grown < 16 * MiB, `the bridge holds ${(grown / MiB).toFixed(1)} MiB, not 64`);
  const rest = await flood.readRest();
  t.ok(rest.notifications >= 255, `every notification arrived once the client read again (${rest.notifications} after the first chunk)`);
  t.match(rest.text, /"flooded"/, 'and the result');
});

t.test('shared: a stream lagging past the bound is cut, memory stays bounded, other clients go on', async (t) => {
  const bridge = await startTestBridge(t, { sessions: 'shared', maxLineBytes: MiB });
  const slow = await openRawSession(bridge);
  const other = await openRawSession(bridge);
  const before = retainedBytes();
  const flood = await floodWithoutReading(bridge, sessionHeaders(slow.id!), 256, 256);
  await waitFor(() => bridge.log.lines.some((line) => line.evt === 'bridge_slow_reader'), 'the slow stream to be cut');
  const grown = retainedBytes() - before;
  t.comment(`shared child, 64 MiB for a client that stopped reading: stream cut, retained growth ${(grown / MiB).toFixed(1)} MiB`);
  t.ok(grown < 24 * MiB, `the bridge holds ${(grown / MiB).toFixed(1)} MiB`);
  const { raw } = await import('./helpers.js');
  t.match((await raw(bridge, 'POST', toolCall(2, 'echo', { text: 'unaffected' }), sessionHeaders(other.id!))).messages.at(-1), { result: { content: [{ text: 'unaffected' }] } });
  await flood.readRest().catch(() => undefined);
});
