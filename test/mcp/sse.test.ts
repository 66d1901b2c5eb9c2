// The incremental SSE parser/rewriter (SPEC §5.2 streaming, §5.3 ids and retry lines kept).
import t from 'tap';
import { DROP_DATA, readSseEvents, rewriteSse, SseEventTooLargeError, type SseEvent, type SseHook } from '../../src/mcp/sse.js';

const identity: SseHook = () => undefined;
const limits = { maxEventBytes: 1024 * 1024 };

async function* chunksOf(...chunks: (string | Buffer)[]): AsyncGenerator<Buffer | string> {
  for (const chunk of chunks) yield chunk;
}

async function collect(source: AsyncIterable<Buffer | string>, hook: SseHook = identity, max = limits): Promise<string> {
  let out = '';
  for await (const text of rewriteSse(source, hook, max)) out += text;
  return out;
}

t.test('events pass through with ids, event names, retry lines and comments kept', async (t) => {
  const input = ': hello\n\nretry: 3000\nid: 1\nevent: message\ndata: {"a":1}\n\nid: 2\ndata: x\n\n';
  t.equal(await collect(chunksOf(input)), input);
});

t.test('CRLF and CR line endings are recognised (output uses LF)', async (t) => {
  t.equal(await collect(chunksOf('id: 1\r\ndata: a\r\n\r\n')), 'id: 1\ndata: a\n\n');
  t.equal(await collect(chunksOf('id: 1\rdata: a\r\r')), 'id: 1\ndata: a\n\n');
});

t.test('a CRLF split across chunks is one line ending, not two', async (t) => {
  t.equal(await collect(chunksOf('data: a\r', '\ndata: b\r', '\n\r', '\n')), 'data: a\ndata: b\n\n');
});

t.test('an empty chunk between \\r and \\n does not split an event', async (t) => {
  // Regression: the "previous chunk ended with \r" flag was reset by an empty chunk, so the \n that
  // completed the CRLF was taken for a blank line and dispatched the event early.
  const events: SseEvent[] = [];
  const out = await collect(chunksOf('id: 1\r', Buffer.alloc(0), '\ndata: a\r\n\r\n'), (event) => {
    events.push(event);
    return undefined;
  });
  t.equal(out, 'id: 1\ndata: a\n\n');
  t.same(events.map((e) => e.lines), [['id: 1', 'data: a']]);
});

t.test('a multi-byte character split across chunks is decoded whole', async (t) => {
  const bytes = Buffer.from('data: ☀️ é\n\n', 'utf8');
  const parts = [...bytes].map((byte) => Buffer.from([byte]));
  t.equal(await collect(chunksOf(...parts)), 'data: ☀️ é\n\n');
});

t.test('the hook sees data lines joined with \\n and one leading space removed', async (t) => {
  const seen: (string | null)[] = [];
  await collect(chunksOf('data: a\ndata:b\ndata\ndata:  c\n\n'), (event) => {
    seen.push(event.data);
    return undefined;
  });
  t.same(seen, ['a\nb\n\n c']);
});

t.test('events without data are not shown to the hook', async (t) => {
  let calls = 0;
  const input = ': keep-alive\n\nid: 9\nretry: 10\n\n';
  const out = await collect(chunksOf(input), () => {
    calls++;
    return 'changed';
  });
  t.equal(calls, 0);
  t.equal(out, input);
});

t.test('an empty data line (priming event) is kept', async (t) => {
  t.equal(await collect(chunksOf('id: p1\ndata:\n\n')), 'id: p1\ndata:\n\n');
});

t.test('a replacement changes only the data lines; id, event and retry stay', async (t) => {
  const out = await collect(chunksOf('id: 5\ndata: old1\nevent: message\ndata: old2\nretry: 7\n\n'), () => 'new');
  t.equal(out, 'id: 5\nevent: message\nretry: 7\ndata: new\n\n');
});

t.test('a multi-line replacement becomes several data lines', async (t) => {
  t.equal(await collect(chunksOf('data: x\n\n'), () => 'a\nb'), 'data: a\ndata: b\n\n');
});

t.test('an async hook is awaited before the event is yielded', async (t) => {
  const out = await collect(chunksOf('data: 1\n\ndata: 2\n\n'), async (event) => {
    await new Promise((resolve) => setTimeout(resolve, 5));
    return `${event.data}!`;
  });
  t.equal(out, 'data: 1!\n\ndata: 2!\n\n');
});

t.test('each event is yielded as soon as its blank line arrives', async (t) => {
  let release: () => void = () => undefined;
  const gate = new Promise<void>((resolve) => (release = resolve));
  async function* source(): AsyncGenerator<string> {
    yield 'data: first\n\ndata: sec';
    await gate;
    yield 'ond\n\n';
  }
  const iterator = rewriteSse(source(), identity, limits);
  const first = await iterator.next();
  t.same(first, { done: false, value: 'data: first\n\n' }, 'the first event arrives while the second is incomplete');
  release();
  t.same(await iterator.next(), { done: false, value: 'data: second\n\n' });
  t.same(await iterator.next(), { done: true, value: undefined });
});

t.test('a final event without its blank line is passed on at the end of the stream', async (t) => {
  t.equal(await collect(chunksOf('data: a\n\ndata: tail')), 'data: a\n\ndata: tail\n\n');
});

t.test('stray blank lines are kept as bytes and make no event', async (t) => {
  let calls = 0;
  const out = await collect(chunksOf('\n\ndata: a\n\n\n'), () => {
    calls++;
    return undefined;
  });
  t.equal(out, '\n\ndata: a\n\n\n');
  t.equal(calls, 1);
});

t.test('an event bigger than maxEventBytes ends the stream with SseEventTooLargeError', async (t) => {
  const big = `data: ${'x'.repeat(200)}\n\n`;
  await t.rejects(collect(chunksOf('data: ok\n\n', big), identity, { maxEventBytes: 100 }), SseEventTooLargeError);
});

t.test('a huge line with no line ending is refused before it is buffered whole', async (t) => {
  let supplied = 0;
  async function* endless(): AsyncGenerator<string> {
    for (let i = 0; i < 1000; i++) {
      supplied++;
      yield 'x'.repeat(100);
    }
  }
  await t.rejects(collect(endless(), identity, { maxEventBytes: 1000 }), SseEventTooLargeError);
  t.ok(supplied < 20, `stopped after ${supplied} chunks`);
});

t.test('many events within the limit each pass even when the stream is larger than it', async (t) => {
  const input = 'data: 0123456789\n\n'.repeat(50);
  t.equal(await collect(chunksOf(input), identity, { maxEventBytes: 40 }), input);
});

t.test('events before a held (async) event in the same chunk are yielded before the hook settles', async (t) => {
  // Regression: a paid call's progress event and its result arriving in one chunk were both held until
  // the paywall concluded, because finished events were only yielded once the whole chunk was done.
  let release: (data: string) => void = () => undefined;
  const hook: SseHook = (event) => (event.data === 'result' ? new Promise<string>((resolve) => (release = resolve)) : undefined);
  const iterator = rewriteSse(chunksOf('data: progress\n\ndata: result\n\n'), hook, limits);
  const first = await Promise.race([iterator.next(), new Promise((resolve) => setTimeout(() => resolve('held'), 500))]);
  t.same(first, { done: false, value: 'data: progress\n\n' });
  const second = iterator.next();
  release('final');
  t.same(await second, { done: false, value: 'data: final\n\n' });
});

t.test('readSseEvents yields each event once complete, a final one without its blank line too, and no stray blank lines', async (t) => {
  const events: SseEvent[] = [];
  for await (const event of readSseEvents(chunksOf('\n\nid: 1\ndata: a\n', 'data: b\n\n', 'data: tail'), limits)) events.push(event);
  t.same(events, [
    { lines: ['id: 1', 'data: a', 'data: b'], data: 'a\nb' },
    { lines: ['data: tail'], data: 'tail' },
  ]);
});

t.test('a hook answering DROP_DATA removes the data lines and keeps the id (the client dispatches nothing)', async (t) => {
  t.equal(await collect(chunksOf('id: 7\nevent: message\ndata: {"secret":1}\n\ndata: kept\n\n'), (event) => (event.data?.includes('secret') ? DROP_DATA : undefined)), 'id: 7\nevent: message\n\ndata: kept\n\n');
});

t.test('a long line arriving in many small chunks is one line (only the new text of each chunk is scanned)', async (t) => {
  const line = `data: ${'x'.repeat(200_000)}`;
  const chunks = Array.from({ length: Math.ceil(line.length / 100) }, (_, i) => line.slice(i * 100, i * 100 + 100));
  t.equal(await collect(chunksOf(...chunks, '\r', '\n\n')), `${line}\n\n`);
});
