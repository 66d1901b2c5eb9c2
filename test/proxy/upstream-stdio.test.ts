// The stdio upstream (SPEC §5.5) against a real SDK v1 stdio server, driven both with raw requests and
// with real SDK v1 clients over HTTP (a tiny node:http adapter turns requests into send() calls).
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CreateMessageRequestSchema, ElicitRequestSchema, type ClientCapabilities } from '@modelcontextprotocol/sdk/types.js';
import { Client as ModernClient, StreamableHTTPClientTransport as ModernTransport } from '@modelcontextprotocol/client';
import t from 'tap';
import { createLogger } from '../../src/observability/logger.js';
import { StdioUpstream } from '../../src/proxy/upstream-stdio.js';
import type { UpstreamRequest, UpstreamResponse } from '../../src/proxy/upstream.js';

const FIXTURE = [process.execPath, '--import', 'tsx', fileURLToPath(new URL('../fixtures/stdio-server.ts', import.meta.url))];
// tap's NODE_OPTIONS loads its process-info hook into every child; the fixture does not need it (and starts slower with it).
const CHILD_ENV = { ...process.env, NODE_OPTIONS: '' };
const MODERN_META = {
  'io.modelcontextprotocol/protocolVersion': '2026-07-28',
  'io.modelcontextprotocol/clientCapabilities': {},
  'io.modelcontextprotocol/clientInfo': { name: 'raw', version: '1' },
};

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

function captureLogger(): { logger: ReturnType<typeof createLogger>; lines: Json[] } {
  const lines: Json[] = [];
  const logger = createLogger('debug', { write: (line: string) => void lines.push(JSON.parse(line) as Json) });
  return { logger, lines };
}

async function readText(body: Readable): Promise<string> {
  let text = '';
  for await (const chunk of body) text += String(chunk);
  return text;
}

const sseMessages = (text: string): Json[] =>
  text.split('\n\n').flatMap((event) => event.split('\n').filter((line) => line.startsWith('data: ')).map((line) => JSON.parse(line.slice(6)) as Json));

function post(upstream: StdioUpstream, body: unknown, headers: Record<string, string> = {}, signal = new AbortController().signal): Promise<UpstreamResponse> {
  const request: UpstreamRequest = {
    method: 'POST',
    path: '/mcp',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
    body: JSON.stringify(body),
    signal,
  };
  return upstream.send(request);
}

async function openSession(upstream: StdioUpstream, protocolVersion = '2025-11-25', capabilities: Json = {}): Promise<string> {
  const response = await post(upstream, { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion, capabilities, clientInfo: { name: 'raw', version: '1' } } });
  await readText(response.body);
  return response.headers['mcp-session-id'] as string;
}

const callTool = (id: number | string, name: string, args: Json, meta?: Json): Json => ({
  jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args, ...(meta ? { _meta: meta } : {}) },
});

async function toolText(upstream: StdioUpstream, session: string, name: string, args: Json = {}): Promise<string> {
  const response = await post(upstream, callTool(99, name, args), { 'mcp-session-id': session, accept: 'application/json' });
  const body = JSON.parse(await readText(response.body)) as Json;
  return body.result.content[0].text as string;
}

/** The smallest HTTP server around send(): what the gateway's route does, minus policy. */
async function serveOverHttp(upstream: StdioUpstream): Promise<{ url: URL; server: Server }> {
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const controller = new AbortController();
    res.on('close', () => controller.abort());
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(req.headers)) if (value !== undefined) headers[name] = Array.isArray(value) ? value.join(', ') : value;
    try {
      const reply = await upstream.send({
        method: req.method as 'GET' | 'POST' | 'DELETE',
        path: req.url ?? '/',
        headers,
        body: chunks.length > 0 ? Buffer.concat(chunks).toString('utf8') : undefined,
        signal: controller.signal,
      });
      res.writeHead(reply.status, reply.headers);
      res.flushHeaders();
      reply.body.pipe(res);
    } catch (error) {
      res.writeHead(502, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32603, message: String(error) } }));
    }
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return { url: new URL(`http://127.0.0.1:${port}/mcp`), server };
}

async function connectClient(url: URL, capabilities: ClientCapabilities = {}): Promise<Client> {
  const client = new Client({ name: 'sdk-client', version: '1.0.0' }, { capabilities });
  await client.connect(new StreamableHTTPClientTransport(url));
  return client;
}

const firstText = (result: Json): string => result.content[0].text as string;

// Two children started side by side (a tsx start costs a second or more): one shared by the routing tests,
// one for the crash, restart and close tests at the end.
const crashLog = captureLogger();
const [upstream, crashy] = await Promise.all([
  StdioUpstream.start(FIXTURE, { logger: captureLogger().logger, env: CHILD_ENV }),
  StdioUpstream.start(FIXTURE, { logger: crashLog.logger, env: CHILD_ENV, restartBackoff: { initialMs: 50, maxMs: 200 } }),
]);
const http = await serveOverHttp(upstream);
t.teardown(async () => {
  http.server.closeAllConnections();
  http.server.close();
  await Promise.all([upstream.close(), crashy.close()]);
});

t.test('initialises the child once and answers legacy initialize itself, with a fresh session id', async (t) => {
  t.match(await upstream.probe(), { ok: true, detail: /^stdio child running/ });
  const first = await post(upstream, { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'a', version: '1' } } });
  t.equal(first.status, 200);
  const body = JSON.parse(await readText(first.body)) as Json;
  t.equal(body.id, 1);
  t.equal(body.result.protocolVersion, '2025-06-18');
  t.equal(body.result.serverInfo.name, 'stdio-fixture');
  t.ok(body.result.capabilities.tools);
  const second = await post(upstream, { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2024-11-05', capabilities: {}, clientInfo: { name: 'b', version: '1' } } });
  t.equal((JSON.parse(await readText(second.body)) as Json).result.protocolVersion, '2025-11-25', 'an unknown revision gets the latest legacy one');
  t.match(first.headers['mcp-session-id'], /^[A-Za-z0-9_-]{22}$/);
  t.not(first.headers['mcp-session-id'], second.headers['mcp-session-id']);
});

t.test('legacy requests need a known session; DELETE ends it', async (t) => {
  const missing = await post(upstream, callTool(1, 'echo', { text: 'x' }));
  t.equal(missing.status, 400);
  t.match(JSON.parse(await readText(missing.body)), { jsonrpc: '2.0', id: null, error: { code: -32000 } });
  const unknown = await post(upstream, callTool(1, 'echo', { text: 'x' }), { 'mcp-session-id': 'nope' });
  t.equal(unknown.status, 404);
  t.same(JSON.parse(await readText(unknown.body)), { jsonrpc: '2.0', id: null, error: { code: -32001, message: 'Session not found' } });

  const session = await openSession(upstream);
  t.equal(await toolText(upstream, session, 'echo', { text: 'hi' }), 'hi');
  const deleted = await upstream.send({ method: 'DELETE', path: '/mcp', headers: { 'mcp-session-id': session }, signal: new AbortController().signal });
  t.equal(deleted.status, 200);
  const after = await post(upstream, callTool(1, 'echo', { text: 'x' }), { 'mcp-session-id': session });
  t.equal(after.status, 404);
});

t.test('notifications and responses from a client get 202', async (t) => {
  const session = await openSession(upstream);
  const initialized = await post(upstream, { jsonrpc: '2.0', method: 'notifications/initialized' }, { 'mcp-session-id': session });
  t.equal(initialized.status, 202);
  const stray = await post(upstream, { jsonrpc: '2.0', id: 12345, result: {} }, { 'mcp-session-id': session });
  t.equal(stray.status, 202);
});

t.test('an SDK client lists tools and calls echo over HTTP', async (t) => {
  const client = await connectClient(http.url);
  t.teardown(() => client.close());
  const tools = await client.listTools();
  t.ok(tools.tools.some((tool) => tool.name === 'echo'));
  t.equal(firstText(await client.callTool({ name: 'echo', arguments: { text: 'over http' } })), 'over http');
  t.equal(client.getServerVersion()?.name, 'stdio-fixture');
});

t.test('progress reaches the right client when two clients use the same request id and token', async (t) => {
  const [a, b] = [await openSession(upstream), await openSession(upstream)];
  const call = (session: string, tag: string) => post(upstream, callTool(1, 'progress', { steps: 3, tag }, { progressToken: 'tok' }), { 'mcp-session-id': session });
  const [ra, rb] = await Promise.all([call(a, 'A'), call(b, 'B')]);
  for (const [response, tag] of [[ra, 'A'], [rb, 'B']] as const) {
    t.equal(response.headers['content-type'], 'text/event-stream');
    t.equal(response.headers['x-accel-buffering'], 'no');
    const messages = sseMessages(await readText(response.body));
    const progress = messages.filter((m) => m.method === 'notifications/progress');
    t.same(progress.map((m) => m.params.message), [`${tag} 1`, `${tag} 2`, `${tag} 3`], `client ${tag} sees only its own progress`);
    t.ok(progress.every((m) => m.params.progressToken === 'tok'), 'the client token is restored');
    t.match(messages.at(-1), { id: 1, result: { content: [{ text: `${tag} done` }] } });
  }
});

t.test('two SDK clients with colliding ids each get their own progress callbacks', async (t) => {
  const [a, b] = [await connectClient(http.url), await connectClient(http.url)];
  t.teardown(async () => { await a.close(); await b.close(); });
  const seen: Record<string, string[]> = { A: [], B: [] };
  const run = (client: Client, tag: 'A' | 'B') =>
    client.callTool({ name: 'progress', arguments: { steps: 4, tag } }, undefined, { onprogress: (p) => void seen[tag]!.push(p.message ?? '') });
  const [resultA, resultB] = await Promise.all([run(a, 'A'), run(b, 'B')]);
  t.equal(firstText(resultA), 'A done');
  t.equal(firstText(resultB), 'B done');
  t.same(seen.A, ['A 1', 'A 2', 'A 3', 'A 4']);
  t.same(seen.B, ['B 1', 'B 2', 'B 3', 'B 4']);
});

t.test('a request without event-stream Accept gets JSON; notifications before the result are dropped', async (t) => {
  const session = await openSession(upstream);
  const response = await post(upstream, callTool(5, 'progress', { steps: 2, tag: 'J' }, { progressToken: 9 }), { 'mcp-session-id': session, accept: 'application/json' });
  t.equal(response.headers['content-type'], 'application/json');
  t.match(JSON.parse(await readText(response.body)), { id: 5, result: { content: [{ text: 'J done' }] } });
});

t.test('server→client requests reach the client whose call is running, and the answers get back', async (t) => {
  const eliciting = await connectClient(http.url, { elicitation: {} });
  const sampling = await connectClient(http.url, { sampling: {} });
  t.teardown(async () => { await eliciting.close(); await sampling.close(); });
  eliciting.setRequestHandler(ElicitRequestSchema, async () => ({ action: 'accept', content: { name: 'Ada' } }));
  sampling.setRequestHandler(CreateMessageRequestSchema, async () => ({ role: 'assistant', model: 'm', content: { type: 'text', text: 'hi from B' } }));
  const [elicited, sampled] = await Promise.all([
    eliciting.callTool({ name: 'ask', arguments: { via: 'elicit' } }),
    sampling.callTool({ name: 'ask', arguments: { via: 'sample' } }),
  ]);
  t.equal(firstText(elicited), 'elicited accept {"name":"Ada"}');
  t.equal(firstText(sampled), 'sampled hi from B');
});

t.test('a server→client request is refused when calls of several capable clients are running', async (t) => {
  const asker = await connectClient(http.url, { elicitation: {} });
  const bystander = await connectClient(http.url, { elicitation: {} });
  t.teardown(async () => { await asker.close(); await bystander.close(); });
  let asked = 0;
  for (const client of [asker, bystander]) client.setRequestHandler(ElicitRequestSchema, async () => { asked += 1; return { action: 'decline' }; });
  const slow = bystander.callTool({ name: 'slow', arguments: { ms: 400 } });
  await new Promise((resolve) => setTimeout(resolve, 50));
  const result = await asker.callTool({ name: 'ask', arguments: { via: 'elicit' } });
  t.equal(result.isError, true, 'the child hears the refusal and its tool fails');
  t.equal(asked, 0, 'neither client was shown the request');
  t.equal(firstText(await slow), 'slow done');
});

t.test('a 2026-07-28 request is served statelessly with resultType "complete"', async (t) => {
  const response = await post(upstream, callTool('m-1', 'echo', { text: 'modern' }, MODERN_META), { 'mcp-protocol-version': '2026-07-28' });
  t.equal(response.status, 200);
  t.equal(response.headers['mcp-session-id'], undefined);
  const body = JSON.parse(await readText(response.body)) as Json;
  t.match(body, { id: 'm-1', result: { resultType: 'complete', content: [{ text: 'modern' }] } });
  t.equal(body.result._meta['io.modelcontextprotocol/serverInfo'].name, 'stdio-fixture');

  const listed = JSON.parse(await readText((await post(upstream, { jsonrpc: '2.0', id: 2, method: 'tools/list', params: { _meta: MODERN_META } })).body)) as Json;
  t.match(listed.result, { resultType: 'complete', ttlMs: 0, cacheScope: 'private' });

  const discover = JSON.parse(await readText((await post(upstream, { jsonrpc: '2.0', id: 3, method: 'server/discover', params: { _meta: MODERN_META } })).body)) as Json;
  t.match(discover.result, { supportedVersions: ['2026-07-28'], capabilities: { tools: {} }, serverInfo: { name: 'stdio-fixture' }, resultType: 'complete' });

  const wrong = await post(upstream, callTool(4, 'echo', { text: 'x' }, { ...MODERN_META, 'io.modelcontextprotocol/protocolVersion': '2027-01-01' }));
  t.equal(wrong.status, 400);
  t.match(JSON.parse(await readText(wrong.body)), { id: 4, error: { code: -32022, data: { supported: ['2026-07-28'] } } });
});

t.test('a v2 SDK client negotiates 2026-07-28 (discover, no session) and calls tools', async (t) => {
  for (const mode of ['auto', { pin: '2026-07-28' }] as const) {
    const client = new ModernClient({ name: 'modern', version: '1' }, { versionNegotiation: { mode } });
    await client.connect(new ModernTransport(http.url));
    t.teardown(() => client.close());
    t.equal(client.getNegotiatedProtocolVersion(), '2026-07-28');
    t.equal(client.getProtocolEra(), 'modern');
    const tools = await client.listTools();
    t.ok(tools.tools.some((tool) => tool.name === 'echo'));
    const seen: string[] = [];
    const result = await client.callTool({ name: 'progress', arguments: { steps: 2, tag: 'V2' } }, { onprogress: (p) => void seen.push(p.message ?? '') });
    t.equal(firstText(result as Json), 'V2 done');
    t.same(seen, ['V2 1', 'V2 2']);
  }
});

t.test('modern progress streams on the request with the client token restored', async (t) => {
  const response = await post(upstream, callTool(1, 'progress', { steps: 2, tag: 'M' }, { ...MODERN_META, progressToken: 'p' }));
  const messages = sseMessages(await readText(response.body));
  t.same(messages.filter((m) => m.method).map((m) => [m.params.progressToken, m.params.message]), [['p', 'M 1'], ['p', 'M 2']]);
  t.match(messages.at(-1), { id: 1, result: { resultType: 'complete' } });
});

t.test('a client disconnect sends notifications/cancelled to the child', async (t) => {
  const session = await openSession(upstream);
  const before = JSON.parse(await toolText(upstream, session, 'stats')) as Json;
  const controller = new AbortController();
  const pending = post(upstream, callTool(1, 'slow', { ms: 5_000 }), { 'mcp-session-id': session }, controller.signal);
  setTimeout(() => controller.abort(), 100);
  await t.rejects(pending, { code: 'TB_ERR_UPSTREAM_TIMEOUT' });
  await new Promise((resolve) => setTimeout(resolve, 50));
  const after = JSON.parse(await toolText(upstream, session, 'stats')) as Json;
  t.equal(after.cancelledCalls, before.cancelledCalls + 1);
});

t.test('a client notifications/cancelled is mapped to the child id and closes the call', async (t) => {
  const session = await openSession(upstream);
  const before = JSON.parse(await toolText(upstream, session, 'stats')) as Json;
  const pending = post(upstream, callTool('mine', 'slow', { ms: 5_000 }), { 'mcp-session-id': session });
  await new Promise((resolve) => setTimeout(resolve, 100));
  const cancel = await post(upstream, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'mine', reason: 'changed my mind' } }, { 'mcp-session-id': session });
  t.equal(cancel.status, 202);
  t.match(JSON.parse(await readText((await pending).body)), { id: 'mine', error: { code: -32800 } });
  await new Promise((resolve) => setTimeout(resolve, 50));
  t.equal((JSON.parse(await toolText(upstream, session, 'stats')) as Json).cancelledCalls, before.cancelledCalls + 1);
});

t.test('a batch is answered as one JSON array in order', async (t) => {
  const session = await openSession(upstream, '2025-03-26');
  const response = await post(upstream, [
    callTool('a', 'echo', { text: 'one' }),
    { jsonrpc: '2.0', method: 'notifications/roots/list_changed' },
    callTool('b', 'echo', { text: 'two' }),
    { jsonrpc: '2.0', id: 'c', method: 'ping' },
  ], { 'mcp-session-id': session });
  t.equal(response.headers['content-type'], 'application/json');
  const body = JSON.parse(await readText(response.body)) as Json[];
  t.same(body.map((m) => m.id), ['a', 'b', 'c']);
  t.same(body.slice(0, 2).map((m) => m.result.content[0].text), ['one', 'two']);
});

t.test('the GET stream carries notifications not tied to a request', async (t) => {
  const session = await openSession(upstream);
  const controller = new AbortController();
  const stream = await upstream.send({ method: 'GET', path: '/mcp', headers: { accept: 'text/event-stream', 'mcp-session-id': session }, signal: controller.signal });
  t.equal(stream.status, 200);
  t.equal(stream.headers['content-type'], 'text/event-stream');
  const second = await upstream.send({ method: 'GET', path: '/mcp', headers: { accept: 'text/event-stream', 'mcp-session-id': session }, signal: controller.signal });
  t.equal(second.status, 409, 'one stream per session');
  const received = new Promise<Json>((resolve) => {
    let text = '';
    stream.body.on('data', (chunk) => {
      text += String(chunk);
      const found = sseMessages(text).find((m) => m.method === 'notifications/tools/list_changed');
      if (found) resolve(found);
    });
  });
  t.equal(await toolText(upstream, session, 'add_tool', { name: 'added_later' }), 'added added_later');
  t.match(await received, { jsonrpc: '2.0', method: 'notifications/tools/list_changed' });
  controller.abort();
});

t.test('a dead child fails calls in flight, restarts with backoff and keeps sessions', async (t) => {
  const { lines } = crashLog;
  const session = await openSession(crashy);
  const firstPid = (JSON.parse(await toolText(crashy, session, 'stats')) as Json).pid as number;

  const inFlight = post(crashy, callTool(1, 'slow', { ms: 10_000 }), { 'mcp-session-id': session, accept: 'application/json' });
  await new Promise((resolve) => setTimeout(resolve, 50));
  const crash = await post(crashy, callTool(2, 'crash', {}), { 'mcp-session-id': session, accept: 'application/json' });
  t.same(JSON.parse(await readText(crash.body)), { jsonrpc: '2.0', id: 2, error: { code: -32603, message: 'upstream process exited' } });
  t.same(JSON.parse(await readText((await inFlight).body)), { jsonrpc: '2.0', id: 1, error: { code: -32603, message: 'upstream process exited' } });
  t.same(await crashy.probe(), { ok: false, detail: 'stdio child not running' });

  const deadline = Date.now() + 15_000;
  while (!(await crashy.probe()).ok && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
  t.equal((await crashy.probe()).ok, true, 'a new child is live and initialised');
  const second = JSON.parse(await toolText(crashy, session, 'stats')) as Json;
  t.not(second.pid, firstPid, 'the session survived into the new child');
  t.ok(lines.some((line) => line.evt === 'upstream_stderr' && line.line === 'crashing on purpose' && line.level === 'debug'), 'stderr reaches the debug log');
  t.ok(lines.some((line) => line.evt === 'upstream_exit'));
});

t.test('close() stops the child and probe says so', async (t) => {
  const session = await openSession(crashy);
  const pid = (JSON.parse(await toolText(crashy, session, 'stats')) as Json).pid as number;
  await crashy.close();
  t.same(await crashy.probe(), { ok: false, detail: 'stdio child not running' });
  t.throws(() => process.kill(pid, 0), { code: 'ESRCH' });
  await t.rejects(post(crashy, callTool(1, 'echo', { text: 'x' }), { 'mcp-session-id': session }), { code: 'TB_ERR_UPSTREAM_UNAVAILABLE' });
});

t.test('a command that cannot start is reported, not retried forever', async (t) => {
  const { logger } = captureLogger();
  await t.rejects(StdioUpstream.start(['/nonexistent/mcp-server'], { logger }), { code: 'TB_ERR_UPSTREAM_UNAVAILABLE' });
});
