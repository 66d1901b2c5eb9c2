// SSE through the gateway (SPEC §5.2): events are passed on as the upstream writes them (no buffering, so a
// client sees the first event while the upstream is still working), and a client that goes away closes the
// upstream request. Checked on both relay paths: a gateway with no priced tools (bytes piped as they come)
// and one with priced tools (every event parsed, tools/list results rewritten).
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { startTestGateway, testConfig, type TestGateway } from '../helpers/gateway.js';

type Json = Record<string, any>;

/** One held SSE reply: its first event is written at once, the result only when the test says so. */
interface Held {
  release(): void;
  /** Resolves when the upstream's request is closed (finished or aborted), with whether it had finished. */
  closed: Promise<{ finished: boolean }>;
  finished: boolean;
}

/** An upstream that answers every tools/call with an SSE stream it holds open until released. */
async function startHoldingUpstream(): Promise<{ url: string; held: Held[]; nextHeld(): Promise<Held>; close(): Promise<void> }> {
  const held: Held[] = [];
  const waiters: ((h: Held) => void)[] = [];
  // The handler is async: its promise goes to a catch that fails the response (never an unhandled rejection).
  const serve = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    let raw = '';
    for await (const chunk of req) raw += String(chunk);
    const message = JSON.parse(raw) as Json;
    if (message.method !== 'tools/call') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', id: message.id, result: { tools: [] } }));
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    res.write(`event: message\nid: e1\ndata: ${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: 't', progress: 1 } })}\n\n`);
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const entry: Held = { release, finished: false, closed: new Promise((resolve) => res.once('close', () => resolve({ finished: entry.finished }))) };
    held.push(entry);
    waiters.shift()?.(entry);
    await released;
    if (res.destroyed) return;
    entry.finished = true;
    res.end(`event: message\nid: e2\ndata: ${JSON.stringify({ jsonrpc: '2.0', id: message.id, result: { content: [{ type: 'text', text: 'done' }] } })}\n\n`);
  };
  const server = createServer((req, res) => {
    serve(req, res).catch((error: unknown) => res.destroy(error as Error));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    held,
    nextHeld: () => new Promise((resolve) => waiters.push(resolve)),
    async close() {
      for (const h of held) h.release();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

const upstream = await startHoldingUpstream();
t.teardown(() => upstream.close());

const gateways: [string, TestGateway][] = [
  ['no priced tools (piped)', await startTestGateway(t, testConfig(upstream.url, { tools: {} }))],
  ['priced tools configured (parsed per event)', await startTestGateway(t, testConfig(upstream.url))],
];

const callBody = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'hold', arguments: {}, _meta: { progressToken: 't' } } });

async function openCall(gateway: TestGateway, signal?: AbortSignal): Promise<{ response: Response; reader: ReadableStreamDefaultReader<Uint8Array> }> {
  const response = await fetch(gateway.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'accept-encoding': 'gzip, br' },
    body: callBody,
    signal,
  });
  if (!response.body) throw new Error('no body');
  return { response, reader: response.body.getReader() };
}

/** Reads until one whole SSE event (blank line) has arrived; returns its data lines. */
async function readEvent(reader: ReadableStreamDefaultReader<Uint8Array>, buffer: { text: string }): Promise<string> {
  const decoder = new TextDecoder();
  while (!buffer.text.includes('\n\n')) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`stream ended before an event: ${buffer.text}`);
    buffer.text += decoder.decode(value, { stream: true });
  }
  const end = buffer.text.indexOf('\n\n');
  const event = buffer.text.slice(0, end);
  buffer.text = buffer.text.slice(end + 2);
  return event;
}

for (const [label, gateway] of gateways) {
  t.test(`${label}: the first event reaches the client while the upstream is still working`, async (t) => {
    const heldNext = upstream.nextHeld();
    const { response, reader } = await openCall(gateway);
    t.match(response.headers.get('content-type'), /^text\/event-stream/);
    t.equal(response.headers.get('x-accel-buffering'), 'no');
    t.equal(response.headers.get('content-encoding'), null, 'event streams are never compressed');
    const held = await heldNext;
    const buffer = { text: '' };
    const first = await readEvent(reader, buffer);
    t.match(first, /notifications\/progress/);
    t.match(first, /^id: e1$/m, 'the event id is kept');
    t.equal(held.finished, false, 'the upstream has not finished its reply yet');

    held.release();
    const second = await readEvent(reader, buffer);
    t.match(second, /"text":"done"/);
    t.same(await held.closed, { finished: true });
  });

  t.test(`${label}: a client that goes away closes the upstream request`, async (t) => {
    const heldNext = upstream.nextHeld();
    const controller = new AbortController();
    const { reader } = await openCall(gateway, controller.signal);
    const held = await heldNext;
    await readEvent(reader, { text: '' });
    controller.abort();
    const timeout = new Promise<'still open'>((resolve) => setTimeout(() => resolve('still open'), 5_000).unref());
    t.same(await Promise.race([held.closed, timeout]), { finished: false }, 'the upstream saw its request closed before it finished');
    held.release();
  });
}
