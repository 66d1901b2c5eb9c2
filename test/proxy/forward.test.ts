// forwardAndRelay (the free path, SPEC §5.2/§5.3) between a real HTTP client and a tiny real node:http upstream.
import t, { type Test } from 'tap';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { once } from 'node:events';
import { forwardAndRelay, type ForwardOptions } from '../../src/proxy/forward.js';
import { upstreamRequestHeaders } from '../../src/proxy/headers.js';
import { HttpUpstream } from '../../src/proxy/upstream-http.js';
import type { PriceTag, ToolPricing } from '../../src/mcp/tools-list.js';

type Handler = (req: IncomingMessage, res: ServerResponse, body: string) => void;

const price: PriceTag = { sku: 'research', cost: 1, amount: '5.00', currency: 'USDC', credits: 3, label: 'Research tools', charge: 'success' };
const pricing: ToolPricing = { argumentName: 'tollboothToken', priceOf: (tool) => (tool === 'fetch_readable' ? price : undefined) };
const toolsListReply = (id: number) => ({ jsonrpc: '2.0', id, result: { tools: [{ name: 'echo', inputSchema: { type: 'object' } }, { name: 'fetch_readable', inputSchema: { type: 'object', properties: { url: { type: 'string' } } } }] } });

async function listen(server: Server): Promise<string> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => resolve(body));
  });
}

interface Rig {
  gateway: string;
  upstreamUrl: string;
  setUpstream(handler: Handler): void;
  statuses: number[];
}

/** A tiny upstream and a gateway-shaped server that relays every request with forwardAndRelay. */
async function rig(t: Test, options: Partial<ForwardOptions> = {}, upstreamUrl?: string): Promise<Rig> {
  let handler: Handler = (_req, res) => res.writeHead(404).end();
  const upstreamServer = createServer((req, res) => void readBody(req).then((body) => handler(req, res, body)));
  const realUpstreamUrl = `${await listen(upstreamServer)}/mcp`;
  const upstream = new HttpUpstream(upstreamUrl ?? realUpstreamUrl);
  const statuses: number[] = [];
  const gatewayServer = createServer((req, res) => {
    void readBody(req).then(async (body) => {
      const controller = new AbortController();
      res.once('close', () => {
        if (!res.writableFinished) controller.abort();
      });
      const method = req.method as 'GET' | 'POST' | 'DELETE';
      const status = await forwardAndRelay(
        upstream,
        { method, path: req.url ?? '/', headers: upstreamRequestHeaders(req.headers, { upstreamHeaders: {} }, true), body: method === 'POST' ? body : undefined, signal: controller.signal },
        res,
        { expectsToolsList: false, pricing: null, maxResponseBytes: 1024 * 1024, requestId: 1, ...options },
      );
      statuses.push(status);
    });
  });
  const gateway = `${await listen(gatewayServer)}/mcp`;
  t.teardown(async () => {
    upstreamServer.closeAllConnections();
    gatewayServer.closeAllConnections();
    upstreamServer.close();
    gatewayServer.close();
    await upstream.close();
  });
  return { gateway, upstreamUrl: realUpstreamUrl, setUpstream: (h) => (handler = h), statuses };
}

const post = (url: string, body: unknown, init: RequestInit = {}) =>
  fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, body: JSON.stringify(body), ...init });

/** Reads an SSE body until `count` complete events arrived (or the stream ends). */
async function readEvents(reader: ReadableStreamDefaultReader<Uint8Array>, count: number, carry = { text: '' }): Promise<string[]> {
  const decoder = new TextDecoder();
  for (;;) {
    const events = carry.text.split('\n\n');
    if (events.length - 1 >= count) {
      carry.text = events.slice(count).join('\n\n');
      return events.slice(0, count);
    }
    const { done, value } = await reader.read();
    if (done) return events.slice(0, -1);
    carry.text += decoder.decode(value, { stream: true });
  }
}

t.test('a JSON reply is relayed with its status, headers and bytes', async (t) => {
  const r = await rig(t);
  const payload = '{"jsonrpc":"2.0","id":1,"result":{"x":1}}';
  r.setUpstream((_req, res) => res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': 'sess-1', 'content-length': Buffer.byteLength(payload) }).end(payload));
  const reply = await post(r.gateway, { jsonrpc: '2.0', id: 1, method: 'ping' });
  t.equal(reply.status, 200);
  t.equal(reply.headers.get('mcp-session-id'), 'sess-1');
  t.equal(reply.headers.get('content-length'), String(payload.length));
  t.equal(await reply.text(), payload);
});

t.test('the upstream gets the body, path and query, but not the client Authorization', async (t) => {
  const r = await rig(t);
  let seen: { url?: string; body?: string; authorization?: string } = {};
  r.setUpstream((req, res, body) => {
    seen = { url: req.url, body, authorization: req.headers.authorization };
    res.writeHead(202).end();
  });
  const reply = await post(`${r.gateway}?tenant=a`, { jsonrpc: '2.0', method: 'notifications/initialized' }, { headers: { 'content-type': 'application/json', authorization: 'Bearer secret' } });
  t.equal(reply.status, 202);
  t.same(seen, { url: '/mcp?tenant=a', body: '{"jsonrpc":"2.0","method":"notifications/initialized"}', authorization: undefined });
});

t.test('an upstream 4xx is relayed unchanged', async (t) => {
  const r = await rig(t);
  r.setUpstream((_req, res) => res.writeHead(404, { 'content-type': 'application/json' }).end('{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found"}}'));
  const reply = await post(r.gateway, { jsonrpc: '2.0', id: 1, method: 'ping' });
  t.equal(reply.status, 404);
  t.equal(await reply.text(), '{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found"}}');
});

t.test("an upstream 500 on a free call is the upstream's, relayed as is", async (t) => {
  const r = await rig(t);
  r.setUpstream((_req, res) => res.writeHead(500, { 'content-type': 'text/plain' }).end('upstream broke'));
  const reply = await post(r.gateway, { jsonrpc: '2.0', id: 1, method: 'ping' });
  t.equal(reply.status, 500);
  t.equal(await reply.text(), 'upstream broke');
});

t.test('a tools/list JSON reply is rewritten for priced tools', async (t) => {
  const r = await rig(t, { expectsToolsList: true, pricing });
  r.setUpstream((_req, res) => {
    const text = JSON.stringify(toolsListReply(1));
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) }).end(text);
  });
  const reply = await post(r.gateway, { jsonrpc: '2.0', id: 1, method: 'tools/list' });
  const text = await reply.text();
  t.equal(reply.headers.get('content-length'), String(Buffer.byteLength(text)), 'the length follows the rewritten body');
  const tools = (JSON.parse(text) as ReturnType<typeof toolsListReply>).result.tools as Record<string, any>[];
  t.same(tools[0], { name: 'echo', inputSchema: { type: 'object' } }, 'the free tool is untouched');
  t.ok(tools[1]!.inputSchema.properties.tollboothToken, 'the priced tool takes the token');
  t.same(tools[1]!._meta['xyz.tollbooth/price'].sku, 'research');
});

t.test('a JSON reply is not parsed when no tools/list was asked for', async (t) => {
  const r = await rig(t, { expectsToolsList: false, pricing });
  const payload = JSON.stringify(toolsListReply(1)) + '   ';
  r.setUpstream((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(payload));
  t.equal(await (await post(r.gateway, { jsonrpc: '2.0', id: 1, method: 'ping' })).text(), payload);
});

for (const withPricing of [false, true]) {
  t.test(`SSE is relayed event by event with X-Accel-Buffering: no and no content-length (${withPricing ? 'rewriting' : 'plain'} path)`, async (t) => {
    const r = await rig(t, { pricing: withPricing ? pricing : null });
    let clientGotFirst: () => void = () => undefined;
    const gotFirst = new Promise<void>((resolve) => (clientGotFirst = resolve));
    r.setUpstream((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('id: 1\nretry: 500\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}\n\n');
      // The second event is only written once the client holds the first: a buffering relay never gets here.
      const timer = setTimeout(() => res.end('event: message\ndata: "too late: the first event was buffered"\n\n'), 3000);
      void gotFirst.then(() => {
        clearTimeout(timer);
        res.end('id: 2\ndata: {"jsonrpc":"2.0","id":1,"result":{}}\n\n');
      });
    });
    const reply = await post(r.gateway, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'echo' } });
    t.equal(reply.headers.get('content-type'), 'text/event-stream');
    t.equal(reply.headers.get('x-accel-buffering'), 'no');
    t.equal(reply.headers.get('content-length'), null);
    const reader = reply.body!.getReader();
    const carry = { text: '' };
    const [first] = await readEvents(reader, 1, carry);
    t.equal(first, 'id: 1\nretry: 500\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}');
    clientGotFirst();
    const [second] = await readEvents(reader, 1, carry);
    t.equal(second, 'id: 2\ndata: {"jsonrpc":"2.0","id":1,"result":{}}');
  });
}

t.test('a tools/list result inside an SSE event is rewritten; id and retry lines stay', async (t) => {
  const r = await rig(t, { pricing, expectsToolsList: true });
  r.setUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.end(`: comment\n\nid: ev-7\nretry: 1000\nevent: message\ndata: ${JSON.stringify(toolsListReply(3))}\n\n`);
  });
  const reply = await post(r.gateway, { jsonrpc: '2.0', id: 3, method: 'tools/list' });
  const events = (await reply.text()).split('\n\n');
  t.equal(events[0], ': comment');
  const lines = events[1]!.split('\n');
  t.same(lines.slice(0, 3), ['id: ev-7', 'retry: 1000', 'event: message']);
  const message = JSON.parse(lines[3]!.slice('data: '.length)) as ReturnType<typeof toolsListReply>;
  t.ok((message.result.tools[1] as Record<string, any>).inputSchema.properties.tollboothToken);
});

t.test('an unreachable upstream is a 502 JSON-RPC error with the request id, never a 500', async (t) => {
  const dead = createServer();
  const deadUrl = `${await listen(dead)}/mcp`;
  dead.close();
  await once(dead, 'close');
  const r = await rig(t, { requestId: 'req-9' }, deadUrl);
  const reply = await post(r.gateway, { jsonrpc: '2.0', id: 'req-9', method: 'ping' });
  t.equal(reply.status, 502);
  t.equal(reply.headers.get('content-type'), 'application/json');
  t.match(await reply.json(), { jsonrpc: '2.0', id: 'req-9', error: { code: -32603, message: /could not be reached/ } });
});

t.test('an upstream reply over maxResponseBytes on a parsed reply is an error, and the relay keeps serving', async (t) => {
  const r = await rig(t, { pricing, expectsToolsList: true, maxResponseBytes: 64 * 1024 });
  let huge = true;
  r.setUpstream((_req, res) => {
    if (!huge) return void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(toolsListReply(1)));
    res.writeHead(200, { 'content-type': 'application/json' });
    res.write('{"jsonrpc":"2.0","id":1,"result":{"tools":[],"pad":"');
    const filler = 'x'.repeat(16 * 1024);
    let sent = 0;
    const pump = (): void => {
      while (sent < 1024 && !res.destroyed) {
        sent++;
        if (!res.write(filler)) return void res.once('drain', pump);
      }
      res.end('"}}');
    };
    res.on('error', () => undefined);
    pump();
  });
  const reply = await post(r.gateway, { jsonrpc: '2.0', id: 1, method: 'tools/list' });
  t.equal(reply.status, 502);
  t.match(await reply.json(), { jsonrpc: '2.0', id: 1, error: { code: -32603, message: /maxResponseBytes/ } });
  huge = false;
  const next = await post(r.gateway, { jsonrpc: '2.0', id: 1, method: 'tools/list' });
  t.equal(next.status, 200, 'the next request is served normally');
  await next.text();
});

t.test('an SSE event over maxResponseBytes ends the stream without crashing', async (t) => {
  const r = await rig(t, { pricing, maxResponseBytes: 1024 });
  r.setUpstream((_req, res) => {
    res.on('error', () => undefined);
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.end(`data: ok\n\ndata: ${'x'.repeat(4096)}\n\n`);
  });
  const reply = await post(r.gateway, { jsonrpc: '2.0', id: 1, method: 'ping' });
  const text = await reply.text().catch(() => 'stream cut');
  t.notMatch(text, /xxxx/, 'the oversized event is not relayed');
});

t.test('a client disconnect aborts the upstream request', async (t) => {
  const r = await rig(t);
  let upstreamClosed: () => void = () => undefined;
  const closed = new Promise<void>((resolve) => (upstreamClosed = resolve));
  r.setUpstream((_req, res) => {
    res.on('close', () => upstreamClosed());
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(': open\n\n'); // then never ends on its own
  });
  const controller = new AbortController();
  const reply = await fetch(r.gateway, { method: 'GET', headers: { accept: 'text/event-stream' }, signal: controller.signal });
  const reader = reply.body!.getReader();
  await reader.read();
  controller.abort();
  const timeout = setTimeout(() => upstreamClosed(), 5000);
  const started = Date.now();
  await closed;
  clearTimeout(timeout);
  t.ok(Date.now() - started < 4000, 'the upstream saw its request end soon after the client left');
});
