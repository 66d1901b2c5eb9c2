// The free path through @fastify/http-proxy (SPEC §5.2, §5.3, §16), a real gateway in front of a
// scripted node:http upstream: bytes, statuses and headers relayed; the body re-serialised; client
// secrets kept back; tools/list rewritten in JSON and SSE; SSE streamed event by event; a client that
// leaves aborts the upstream request (before its headers too); upstream failures told apart.
import { setTimeout as sleep } from 'node:timers/promises';
import t, { type Test } from 'tap';
import { startTestGateway, testConfig, type TestGateway } from '../helpers/gateway.js';
import { deadPort, metricValue, startScriptedUpstream } from '../helpers/scripted-upstream.js';
import { waitFor } from '../helpers/clock.js';

type Json = Record<string, any>;

const upstream = await startScriptedUpstream();
t.teardown(() => upstream.close());

/** A gateway with priced tools (every reply that may hold tools/list is parsed) or with none (bytes piped). */
async function gatewayFor(t: Test, options: { priced?: boolean; maxResponseBytes?: string; url?: string } = {}): Promise<TestGateway> {
  const url = options.url ?? upstream.url;
  const base = testConfig(url);
  return startTestGateway(t, { ...base, upstream: { url, maxResponseBytes: options.maxResponseBytes ?? '1mb' }, ...(options.priced === false ? { tools: {} } : {}) });
}

const post = (url: string, body: unknown, headers: Record<string, string> = {}, signal?: AbortSignal) =>
  fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers }, body: JSON.stringify(body), signal });

const toolsListReply = (id: number) => ({ jsonrpc: '2.0', id, result: { tools: [{ name: 'echo', inputSchema: { type: 'object' } }, { name: 'fetch_readable', inputSchema: { type: 'object', properties: { url: { type: 'string' } } } }] } });

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
  const gateway = await gatewayFor(t);
  const payload = '{"jsonrpc":"2.0","id":1,"result":{"x":1}}';
  upstream.respond((_req, res) => res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': 'sess-1', 'content-length': Buffer.byteLength(payload), 'set-cookie': 'a=b' }).end(payload));
  const reply = await post(gateway.url, { jsonrpc: '2.0', id: 1, method: 'ping' });
  t.equal(reply.status, 200);
  t.equal(reply.headers.get('mcp-session-id'), 'sess-1', 'session headers pass back');
  t.equal(reply.headers.get('set-cookie'), null, "the upstream's cookies stay with the gateway");
  t.equal(await reply.text(), payload);
});

t.test('the upstream gets the re-serialised body, path and query, upstream.headers, Mcp-* and Last-Event-ID, but not Authorization or Cookie', async (t) => {
  const base = testConfig(upstream.url);
  const gateway = await startTestGateway(t, { ...base, upstream: { url: upstream.url, headers: { 'X-Upstream-Key': 'k1' } } });
  upstream.respond((_req, res) => res.writeHead(202).end());
  const next = upstream.next();
  const reply = await fetch(`${gateway.url}?tenant=a`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer secret', cookie: 'c=1', 'mcp-session-id': 's-9', 'mcp-param-x': 'y', 'last-event-id': 'e-1', 'proxy-authorization': 'p' },
    body: '{ "jsonrpc" : "2.0", "method" : "notifications/initialized" }',
  });
  t.equal(reply.status, 202);
  const seen = await next;
  t.equal(seen.url, '/mcp?tenant=a');
  t.equal(seen.body, '{"jsonrpc":"2.0","method":"notifications/initialized"}', 'the parsed body, re-serialised');
  t.same([seen.headers.authorization, seen.headers.cookie, seen.headers['proxy-authorization']], [undefined, undefined, undefined]);
  t.same([seen.headers['x-upstream-key'], seen.headers['mcp-session-id'], seen.headers['mcp-param-x'], seen.headers['last-event-id']], ['k1', 's-9', 'y', 'e-1']);
});

t.test('a body with a +json content type is re-serialised once, not JSON-encoded twice', async (t) => {
  const gateway = await gatewayFor(t);
  upstream.respond((_req, res) => res.writeHead(202).end());
  const next = upstream.next();
  await fetch(gateway.url, { method: 'POST', headers: { 'content-type': 'application/vnd.example+json' }, body: '{"jsonrpc":"2.0","method":"notifications/initialized"}' });
  t.equal((await next).body, '{"jsonrpc":"2.0","method":"notifications/initialized"}');
});

t.test('an upstream 4xx is relayed unchanged', async (t) => {
  const gateway = await gatewayFor(t);
  const body = '{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found"}}';
  upstream.respond((_req, res) => res.writeHead(404, { 'content-type': 'application/json' }).end(body));
  const reply = await post(gateway.url, { jsonrpc: '2.0', id: 1, method: 'ping' });
  t.equal(reply.status, 404);
  t.equal(await reply.text(), body);
});

t.test("an upstream 500 on a free call is the upstream's, relayed as is", async (t) => {
  const gateway = await gatewayFor(t);
  upstream.respond((_req, res) => res.writeHead(500, { 'content-type': 'text/plain' }).end('upstream broke'));
  const reply = await post(gateway.url, { jsonrpc: '2.0', id: 1, method: 'ping' });
  t.equal(reply.status, 500);
  t.equal(await reply.text(), 'upstream broke');
});

t.test('a tools/list JSON reply is rewritten for priced tools; the free tool is untouched', async (t) => {
  const gateway = await gatewayFor(t);
  upstream.respond((_req, res) => {
    const text = JSON.stringify(toolsListReply(1));
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) }).end(text);
  });
  const next = upstream.next();
  const reply = await post(gateway.url, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, { 'accept-encoding': 'gzip' });
  const text = await reply.text();
  t.equal((await next).headers['accept-encoding'], undefined, 'Accept-Encoding is not forwarded when the reply must be parsed');
  t.equal(reply.headers.get('content-length'), String(Buffer.byteLength(text)), 'the length follows the rewritten body');
  const tools = (JSON.parse(text) as Json).result.tools as Json[];
  t.same(tools[0], { name: 'echo', inputSchema: { type: 'object' } });
  t.ok(tools[1]!.inputSchema.properties.tollboothToken, 'the priced tool takes the token');
  t.equal(tools[1]!._meta['xyz.tollbooth/price'].sku, 'research');
});

t.test('a JSON reply is not parsed when no tools/list was asked for', async (t) => {
  const gateway = await gatewayFor(t);
  const payload = JSON.stringify(toolsListReply(1)) + '   ';
  upstream.respond((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(payload));
  t.equal(await (await post(gateway.url, { jsonrpc: '2.0', id: 1, method: 'ping' })).text(), payload);
});

for (const priced of [false, true]) {
  t.test(`SSE is relayed event by event with X-Accel-Buffering: no, no content-length, no compression (${priced ? 'parsed per event' : 'piped'})`, async (t) => {
    const gateway = await gatewayFor(t, { priced });
    let clientGotFirst: () => void = () => undefined;
    const gotFirst = new Promise<void>((resolve) => (clientGotFirst = resolve));
    upstream.respond((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('id: 1\nretry: 500\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}\n\n');
      // The second event is only written once the client holds the first: a buffering relay never gets here.
      const timer = setTimeout(() => res.end('event: message\ndata: "too late: the first event was buffered"\n\n'), 3000);
      void gotFirst.then(() => {
        clearTimeout(timer);
        res.end('id: 2\ndata: {"jsonrpc":"2.0","id":1,"result":{}}\n\n');
      });
    });
    const reply = await post(gateway.url, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'echo' } }, { 'accept-encoding': 'gzip, br' });
    t.equal(reply.headers.get('content-type'), 'text/event-stream');
    t.equal(reply.headers.get('x-accel-buffering'), 'no');
    t.equal(reply.headers.get('content-length'), null);
    t.equal(reply.headers.get('content-encoding'), null);
    const reader = reply.body!.getReader();
    const carry = { text: '' };
    const [first] = await readEvents(reader, 1, carry);
    t.equal(first, 'id: 1\nretry: 500\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}');
    clientGotFirst();
    const [second] = await readEvents(reader, 1, carry);
    t.equal(second, 'id: 2\ndata: {"jsonrpc":"2.0","id":1,"result":{}}');
  });
}

t.test('a tools/list result inside an SSE event is rewritten; id and retry lines stay (POST and GET streams)', async (t) => {
  const gateway = await gatewayFor(t);
  upstream.respond((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.end(`: comment\n\nid: ev-7\nretry: 1000\nevent: message\ndata: ${JSON.stringify(toolsListReply(3))}\n\n`);
  });
  for (const reply of [await post(gateway.url, { jsonrpc: '2.0', id: 3, method: 'tools/list' }), await fetch(gateway.url, { headers: { accept: 'text/event-stream' } })]) {
    const events = (await reply.text()).split('\n\n');
    t.equal(events[0], ': comment');
    const lines = events[1]!.split('\n');
    t.same(lines.slice(0, 3), ['id: ev-7', 'retry: 1000', 'event: message']);
    const message = JSON.parse(lines[3]!.slice('data: '.length)) as Json;
    t.ok(message.result.tools[1].inputSchema.properties.tollboothToken);
  }
});

t.test('a JSON tools/list reply over maxResponseBytes is a 502 JSON-RPC error (body_too_large), and the next request is served', async (t) => {
  const gateway = await gatewayFor(t, { maxResponseBytes: '64kb' });
  let huge = true;
  upstream.respond((_req, res) => {
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
    pump();
  });
  const reply = await post(gateway.url, { jsonrpc: '2.0', id: 1, method: 'tools/list' });
  t.equal(reply.status, 502);
  t.match(await reply.json(), { jsonrpc: '2.0', id: 1, error: { code: -32603, message: /maxResponseBytes/ } });
  t.ok(gateway.logs().some((line) => line.evt === 'upstream_failed' && line.outcome === 'body_too_large'), 'logged as body_too_large');
  huge = false;
  const next = await post(gateway.url, { jsonrpc: '2.0', id: 1, method: 'tools/list' });
  t.equal(next.status, 200, 'the next request is served normally');
  await next.text();
});

t.test('an SSE event over maxResponseBytes ends the stream without crashing', async (t) => {
  const gateway = await gatewayFor(t, { maxResponseBytes: '1kb' });
  upstream.respond((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.end(`data: ok\n\ndata: ${'x'.repeat(4096)}\n\n`);
  });
  const reply = await post(gateway.url, { jsonrpc: '2.0', id: 1, method: 'ping' });
  const text = await reply.text().catch(() => 'stream cut');
  t.notMatch(text, /xxxx/, 'the oversized event is not relayed');
  t.equal((await fetch(`${gateway.origin}/healthz`)).status, 200);
});

t.test('a client that leaves a GET stream aborts the upstream request', async (t) => {
  const gateway = await gatewayFor(t);
  upstream.respond((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(': open\n\n'); // then never ends on its own
  });
  const next = upstream.next();
  const controller = new AbortController();
  const reply = await fetch(gateway.url, { method: 'GET', headers: { accept: 'text/event-stream' }, signal: controller.signal });
  await reply.body!.getReader().read();
  controller.abort();
  const closed = await Promise.race([(await next).closed, sleep(4_000).then(() => 'still open' as const)]);
  t.same(closed, { finished: false }, 'the upstream saw its request end soon after the client left');
});

t.test('a GET stream the gateway ends (shutdown, reload) ends upstream too, not only towards the client', async (t) => {
  const gateway = await gatewayFor(t);
  upstream.respond((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(': open\n\n'); // then never ends on its own
  });
  const next = upstream.next();
  const reply = await fetch(gateway.url, { method: 'GET', headers: { accept: 'text/event-stream' } });
  const reader = reply.body!.getReader();
  await reader.read();
  gateway.gateway.endStreams(); // what a reload's drain does; the upstream agent stays
  t.same(await reader.read(), { done: true, value: undefined }, 'the client sees its stream end');
  const closed = await Promise.race([(await next).closed, sleep(4_000).then(() => 'still open' as const)]);
  t.same(closed, { finished: false }, 'the upstream saw its request cut (it would otherwise stay open on the agent)');
});

t.test('a client that leaves a free call before the upstream answered aborts the upstream request', async (t) => {
  const gateway = await gatewayFor(t);
  upstream.respond(() => undefined); // never answers
  const next = upstream.next();
  const controller = new AbortController();
  const reply = post(gateway.url, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'echo', arguments: {} } }, {}, controller.signal).catch(() => 'aborted');
  const seen = await next;
  controller.abort();
  await reply;
  const closed = await Promise.race([seen.closed, sleep(4_000).then(() => 'still open' as const)]);
  t.same(closed, { finished: false }, 'aborted before any header came back');
});

t.test('upstream failures on a free call are told apart: a JSON-RPC error with 502/503, the outcome in the metric and the log', async (t) => {
  const refused = await gatewayFor(t, { url: `http://127.0.0.1:${await deadPort()}/mcp` });
  const refusedReply = await post(refused.url, { jsonrpc: '2.0', id: 'req-9', method: 'ping' });
  t.equal(refusedReply.status, 503, 'connection refused: 503');
  t.match(await refusedReply.json(), { jsonrpc: '2.0', id: 'req-9', error: { code: -32603, message: /refused/ } });
  t.equal(await metricValue(refused.origin, 'tollbooth_upstream_duration_seconds_count', { method: 'ping', outcome: 'connect_refused' }), 1);
  t.ok(refused.logs().some((line) => line.evt === 'upstream_failed' && line.outcome === 'connect_refused' && line.cause === 'ECONNREFUSED'));

  const unresolvable = await gatewayFor(t, { url: 'http://tollbooth-test.invalid/mcp' });
  const dnsReply = await post(unresolvable.url, { jsonrpc: '2.0', id: 2, method: 'ping' });
  t.equal(dnsReply.status, 502, 'name resolution: 502');
  t.match(await dnsReply.json(), { id: 2, error: { message: /resolved/ } });
  t.equal(await metricValue(unresolvable.origin, 'tollbooth_upstream_duration_seconds_count', { method: 'ping', outcome: 'name_resolution' }), 1);

  const reset = await gatewayFor(t);
  upstream.respond((req) => req.socket.destroy());
  const resetReply = await post(reset.url, { jsonrpc: '2.0', id: 3, method: 'ping' });
  t.equal(resetReply.status, 502, 'reset before the answer: 502');
  t.equal(await metricValue(reset.origin, 'tollbooth_upstream_duration_seconds_count', { method: 'ping', outcome: 'reset' }), 1);
  t.not(refusedReply.status, 500);
});

t.test('a reset mid-body of a free JSON reply (held whole for the namespace screen) is a 502 JSON-RPC error, logged as reset', async (t) => {
  const gateway = await gatewayFor(t, { priced: false });
  upstream.respond((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' });
    res.write('{"jsonrpc":"2.0","id":1,');
    setTimeout(() => res.destroy(), 20);
  });
  const reply = await post(gateway.url, { jsonrpc: '2.0', id: 1, method: 'ping' });
  t.equal(reply.status, 502);
  t.match(await reply.json(), { jsonrpc: '2.0', id: 1, error: { code: -32603 } });
  await waitFor(() => gateway.logs().some((line) => line.evt === 'upstream_failed'), 'the failure log line');
  t.ok(gateway.logs().some((line) => line.evt === 'upstream_failed' && line.outcome === 'reset'), 'logged');
  t.equal((await fetch(`${gateway.origin}/healthz`)).status, 200);
});

t.test('a reset mid-stream of a free event stream cuts the client reply and is logged as reset', async (t) => {
  const gateway = await gatewayFor(t, { priced: false });
  upstream.respond((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write('data: {"jsonrpc":"2.0","method":"notifications/progress","params":{}}\n\n');
    setTimeout(() => res.destroy(), 20);
  });
  const reply = await post(gateway.url, { jsonrpc: '2.0', id: 1, method: 'ping' });
  t.equal(await reply.text().then(() => 'complete', () => 'cut'), 'cut');
  await waitFor(() => gateway.logs().some((line) => line.evt === 'upstream_failed'), 'the failure log line');
  t.ok(gateway.logs().some((line) => line.evt === 'upstream_failed' && line.outcome === 'reset'), 'logged');
  t.equal((await fetch(`${gateway.origin}/healthz`)).status, 200);
});

t.test('request metrics are recorded once per request, including a client that left', async (t) => {
  const gateway = await gatewayFor(t);
  upstream.respond((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"jsonrpc":"2.0","id":1,"result":{}}'));
  await (await post(gateway.url, { jsonrpc: '2.0', id: 1, method: 'ping' })).text();
  t.equal(await metricValue(gateway.origin, 'tollbooth_mcp_requests_total', { method: 'ping', status: '2xx' }), 1);
  upstream.respond(() => undefined);
  const controller = new AbortController();
  const pending = post(gateway.url, { jsonrpc: '2.0', id: 2, method: 'ping' }, {}, controller.signal).catch(() => undefined);
  await upstream.next();
  controller.abort();
  await pending;
  await waitFor(async () => (await metricValue(gateway.origin, 'tollbooth_mcp_requests_total', { method: 'ping', status: '4xx' })) > 0, 'the cut request recorded');
  t.equal(await metricValue(gateway.origin, 'tollbooth_mcp_requests_total', { method: 'ping', status: '4xx' }), 1, 'the cut request counted (as 499, class 4xx)');
});
