// What SDK clients never send, on the wire (issue 2): a 2025-03-26 client without MCP-Protocol-Version,
// batches, a 2026-07-28 request whose headers disagree with its body, malformed JSON, an oversized body, a
// hostile Origin. Where the request is the upstream's to judge, the gateway's answer must equal the
// upstream's own (sent directly); where the gateway refuses, nothing reaches the upstream.
import { connect } from 'node:net';
import t from 'tap';
import { startTestGateway, testConfig } from '../helpers/gateway.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';

type Json = Record<string, any>;

const upstream = await startPaidUpstream('sessions-sse');
t.teardown(() => upstream.close());
const gateway = await startTestGateway(t, testConfig(upstream.url, { tools: {}, server: { host: '127.0.0.1', port: 0, bodyLimit: '8kb' } }));

interface RawAnswer {
  status: number;
  headers: Headers;
  text: string;
  /** The JSON-RPC messages of the body, JSON or SSE. */
  messages: unknown[];
}

async function send(url: string, body: string, headers: Record<string, string> = {}): Promise<RawAnswer> {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
    body,
  });
  const text = await response.text();
  const messages = (response.headers.get('content-type') ?? '').startsWith('text/event-stream')
    ? text.split('\n').filter((line) => line.startsWith('data:')).map((line) => JSON.parse(line.slice(5)) as unknown)
    : text === '' ? [] : [JSON.parse(text) as unknown];
  return { status: response.status, headers: response.headers, text, messages };
}

const initialize = (protocolVersion: string) =>
  JSON.stringify({ jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion, capabilities: {}, clientInfo: { name: 'raw', version: '1' } } });

/** A 2025-03-26 session opened the way that revision's clients do it: no MCP-Protocol-Version header anywhere. */
async function openLegacySession(url: string): Promise<string> {
  const answer = await send(url, initialize('2025-03-26'));
  const session = answer.headers.get('mcp-session-id');
  if (!session) throw new Error(`no session from ${url}: ${answer.status} ${answer.text}`);
  await send(url, JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }), { 'mcp-session-id': session });
  return session;
}

/** The same raw exchange directly and through the gateway, each on its own session. */
async function both(body: (id: number) => string, withSession: boolean): Promise<{ direct: RawAnswer; through: RawAnswer }> {
  const run = async (url: string) => send(url, body(1), withSession ? { 'mcp-session-id': await openLegacySession(url) } : {});
  return { direct: await run(upstream.url), through: await run(gateway.url) };
}

const shape = (answer: RawAnswer) => ({ status: answer.status, messages: answer.messages });
const reached = (marker: string) => upstream.sawText(marker);

t.test('a 2025-03-26 client that never sends MCP-Protocol-Version is served as directly', async (t) => {
  const { direct, through } = await both(() => JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'echo', arguments: { text: 'no-version-header' } } }), true);
  t.equal(direct.status, 200);
  t.same(shape(through), shape(direct));
  t.match(through.messages.at(-1), { id: 1, result: { content: [{ text: '{"text":"no-version-header"}' }] } });
});

t.test('a 2025-03-26 batch is passed through untouched and answered as the upstream answers it', async (t) => {
  const batch = () => JSON.stringify([
    { jsonrpc: '2.0', id: 'a', method: 'tools/call', params: { name: 'echo', arguments: { text: 'batch-a' } } },
    { jsonrpc: '2.0', id: 'b', method: 'ping' },
  ]);
  const { direct, through } = await both(batch, true);
  t.same(shape(through), shape(direct), `the upstream answered ${direct.status} directly; the gateway relays the same`);
});

t.test('a 2026-07-28 request whose Mcp-Method header disagrees with its body is refused before the upstream', async (t) => {
  const body = JSON.stringify({
    jsonrpc: '2.0', id: 7, method: 'tools/call',
    params: { name: 'echo', arguments: { text: 'mismatch-marker' }, _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28' } },
  });
  const answer = await send(gateway.url, body, { 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/list', 'mcp-name': 'echo' });
  t.equal(answer.status, 400);
  t.match(answer.messages[0], { jsonrpc: '2.0', error: { code: -32020 } });
  t.notOk(reached('mismatch-marker'), 'the upstream never saw it');
});

t.test('a 2026-07-28 request whose MCP-Protocol-Version header is missing is refused with -32020', async (t) => {
  const body = JSON.stringify({
    jsonrpc: '2.0', id: 8, method: 'tools/call',
    params: { name: 'echo', arguments: { text: 'missing-header-marker' }, _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28' } },
  });
  const answer = await send(gateway.url, body, { 'mcp-method': 'tools/call', 'mcp-name': 'echo' });
  t.equal(answer.status, 400);
  t.match(answer.messages[0], { error: { code: -32020 } });
  t.notOk(reached('missing-header-marker'));
});

t.test('malformed JSON gets 400 -32700 with id null and never reaches the upstream', async (t) => {
  const answer = await send(gateway.url, '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"malformed-marker"}');
  t.equal(answer.status, 400);
  t.same(answer.messages[0], { jsonrpc: '2.0', id: null, error: { code: -32700, message: (answer.messages[0] as Json).error.message } });
  t.notOk(reached('malformed-marker'));
});

t.test('a body over bodyLimit gets 413 with a JSON-RPC error and never reaches the upstream', async (t) => {
  const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'echo', arguments: { text: 'oversized-marker' + 'x'.repeat(9 * 1024) } } });
  const answer = await send(gateway.url, body);
  t.equal(answer.status, 413);
  t.match(answer.messages[0], { jsonrpc: '2.0', error: { code: Number } });
  t.notOk(reached('oversized-marker'));
});

t.test('a foreign Origin gets 403 and never reaches the upstream; the gateway\'s own origin passes', async (t) => {
  const body = (marker: string) => JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'echo', arguments: { text: marker } } });
  const hostile = await send(gateway.url, body('hostile-origin-marker'), { origin: 'https://evil.example' });
  t.equal(hostile.status, 403);
  t.match(hostile.messages[0], { jsonrpc: '2.0', id: null, error: { code: Number } });
  t.notOk(reached('hostile-origin-marker'));

  const session = await openLegacySession(gateway.url);
  const own = await send(gateway.url, body('own-origin-marker'), { origin: gateway.origin, 'mcp-session-id': session });
  t.equal(own.status, 200);
  t.ok(reached('own-origin-marker'));
});

// Regression (src/server.ts): a socket that never sent a request (a client's pre-connected socket) held
// the gateway's shutdown drain open until callDeadline + 1 s.
t.test('closing the gateway does not wait for a connection that never sent a request', async (t) => {
  const own = await startTestGateway(t, testConfig(upstream.url, { tools: {} }));
  const socket = connect(Number(new URL(own.url).port), '127.0.0.1');
  await new Promise<void>((resolve) => socket.once('connect', resolve));
  const startedAt = Date.now();
  await own.close();
  t.ok(Date.now() - startedAt < 5_000, `closed in ${Date.now() - startedAt} ms (the call deadline is ${own.config.upstream.callDeadline} ms)`);
  socket.destroy();
});
