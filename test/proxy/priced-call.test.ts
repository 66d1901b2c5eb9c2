// A priced call through the proxy (SPEC §5.4, §6.2 step 7, §6.5, §16), a real gateway with a funded
// handle in front of a scripted upstream: the token stripped from what is forwarded; events before the
// result streamed, the result with its receipt; every way the upstream can fail concluded by the
// tool's charge policy — `success` releases on anything but a result, `attempt` keeps the credit only
// once the upstream answered HTTP 2xx (a 4xx, 5xx, refused or reset connection spends nothing); a
// client that leaves does not stop the call; the deadline does.
import { setTimeout as sleep } from 'node:timers/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import t, { type Test } from 'tap';
import { fundedHandle, researchBalance, startTestGateway, testConfig, type TestGateway } from '../helpers/gateway.js';
import { deadPort, metricValue, startScriptedUpstream, type ScriptedHandler } from '../helpers/scripted-upstream.js';

type Json = Record<string, any>;

const upstream = await startScriptedUpstream();
t.teardown(() => upstream.close());

const REFUSAL = 'xyz.tollbooth/refusal';
const RECEIPT = 'xyz.tollbooth/receipt';
const sse = { 'content-type': 'text/event-stream' };

/** `fetch_readable` is charged on success, `costly` (cost 1 here) on attempt. */
async function setUp(t: Test, options: { url?: string; callDeadline?: string; maxResponseBytes?: string } = {}): Promise<{ gateway: TestGateway; handle: string }> {
  const url = options.url ?? upstream.url;
  const base = testConfig(url);
  const gateway = await startTestGateway(t, {
    ...base,
    upstream: { url, callDeadline: options.callDeadline ?? '5s', maxResponseBytes: options.maxResponseBytes ?? '1mb' },
    tools: { fetch_readable: { sku: 'research', cost: 1 }, costly: { sku: 'research', cost: 1, charge: 'attempt' } },
  });
  return { gateway, handle: await fundedHandle(gateway) };
}

interface Reply {
  status: number;
  text: string;
  /** The JSON body, or the last JSON event of a stream. */
  message: Json | undefined;
}

async function paidCall(gateway: TestGateway, tool: string, handle: string, id: unknown = 1): Promise<Reply> {
  const response = await fetch(gateway.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: tool, arguments: { url: 'u', tollboothToken: handle } } }),
  });
  const text = await response.text().catch(() => '<cut>');
  return { status: response.status, text, message: lastMessage(text) };
}

function lastMessage(text: string): Json | undefined {
  try {
    return JSON.parse(text) as Json;
  } catch {
    const data = text.split('\n\n').map((event) => event.split('\n').filter((line) => line.startsWith('data:')).map((line) => line.slice(5).trim()).join('\n')).filter((d) => d.startsWith('{'));
    return data.length > 0 ? (JSON.parse(data[data.length - 1] as string) as Json) : undefined;
  }
}

const json = (body: string) => (_req: IncomingMessage, res: ServerResponse) => res.writeHead(200, { 'content-type': 'application/json' }).end(body);
const RESULT = '{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"the answer"}]}}';

t.test('the upstream gets the call with the token stripped and nothing else changed; the result comes back with its receipt', async (t) => {
  const { gateway, handle } = await setUp(t);
  upstream.respond(json(RESULT));
  const next = upstream.next();
  const reply = await paidCall(gateway, 'fetch_readable', handle);
  t.same(JSON.parse((await next).body), { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'fetch_readable', arguments: { url: 'u' } } });
  t.equal(reply.message?.result?.content?.[0]?.text, 'the answer');
  t.same(reply.message?.result?._meta?.[RECEIPT], { sku: 'research', cost: 1, remaining: 2 });
  t.equal(await researchBalance(gateway, handle), 2);
  t.equal(await metricValue(gateway.origin, 'tollbooth_upstream_duration_seconds_count', { method: 'tools/call', outcome: 'answered' }), 1);
});

t.test('a JSON-RPC error for this id is relayed and the credit released', async (t) => {
  const { gateway, handle } = await setUp(t);
  upstream.respond(json('{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"boom"}}'));
  const reply = await paidCall(gateway, 'fetch_readable', handle);
  t.same(reply.message?.error, { code: -32603, message: 'boom' });
  t.equal(await researchBalance(gateway, handle), 3);
});

t.test('SSE: events before the result reach the client while the upstream works; the result keeps its event id and gains the receipt', async (t) => {
  const { gateway, handle } = await setUp(t);
  let clientGotFirst: () => void = () => undefined;
  const gotFirst = new Promise<void>((resolve) => (clientGotFirst = resolve));
  upstream.respond((_req, res) => {
    res.writeHead(200, sse);
    res.write('id: a\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}\n\n');
    void gotFirst.then(() => res.end('id: b\ndata: {"jsonrpc":"2.0","id":1,"result":{"content":[]}}\n\n'));
  });
  const response = await fetch(gateway.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'fetch_readable', arguments: { tollboothToken: handle } } }),
  });
  t.equal(response.headers.get('x-accel-buffering'), 'no');
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  let text = '';
  while (!text.includes('\n\n')) text += decoder.decode((await reader.read()).value, { stream: true });
  t.match(text, /^id: a\ndata: .*notifications\/progress/, 'the progress event arrived before the upstream sent the result');
  clientGotFirst();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
  }
  const final = /\n\nid: b\ndata: (.*)\n\n$/.exec(text);
  t.ok(final, 'the result keeps its event id');
  t.same(JSON.parse(final![1]!).result._meta[RECEIPT], { sku: 'research', cost: 1, remaining: 2 });
});

t.test('SSE: a stream that ends without the result is refused upstream_unavailable as one more event, the credit released', async (t) => {
  const { gateway, handle } = await setUp(t);
  upstream.respond((_req, res) => res.writeHead(200, sse).end('data: {"jsonrpc":"2.0","method":"notifications/progress","params":{}}\n\n'));
  const reply = await paidCall(gateway, 'fetch_readable', handle);
  t.match(reply.text, /notifications\/progress/);
  t.equal(reply.message?.result?._meta?.[REFUSAL]?.reason, 'upstream_unavailable');
  t.equal(await researchBalance(gateway, handle), 3);
});

t.test('an upstream 4xx is relayed unchanged and the credit released, on either charge policy', async (t) => {
  const { gateway, handle } = await setUp(t);
  const body = '{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found"}}';
  upstream.respond((_req, res) => res.writeHead(404, { 'content-type': 'application/json' }).end(body));
  for (const tool of ['fetch_readable', 'costly']) {
    const reply = await paidCall(gateway, tool, handle);
    t.equal(reply.status, 404);
    t.equal(reply.text, body);
  }
  t.equal(await researchBalance(gateway, handle), 3, 'no credit spent: the tool never ran');
});

t.test('an upstream 4xx whose JSON body breaks off (held whole for the namespace screen) is a 502 JSON-RPC error and does not crash the gateway', async (t) => {
  const { gateway, handle } = await setUp(t);
  upstream.respond((_req, res) => {
    res.writeHead(400, { 'content-type': 'application/json', 'content-length': '1000' });
    res.write('{"jsonrpc":"2.0",');
    setTimeout(() => res.socket?.destroy(), 20);
  });
  const reply = await paidCall(gateway, 'fetch_readable', handle);
  t.equal(reply.status, 502);
  t.match(JSON.parse(reply.text), { jsonrpc: '2.0', error: { code: -32603 } });
  t.equal(await researchBalance(gateway, handle), 3);
  t.equal((await fetch(`${gateway.origin}/healthz`)).status, 200);
});

// How each reply ends on each policy: `accepted` = the upstream answered HTTP 2xx, so `charge: attempt` keeps the credit.
const FAILURES: [string, ScriptedHandler, { accepted: boolean; outcome: string }][] = [
  ['a 5xx', (_req, res) => res.writeHead(503).end('down'), { accepted: false, outcome: 'http_5xx' }],
  ['a reset before any answer', (req) => req.socket.destroy(), { accepted: false, outcome: 'reset' }],
  ['garbage JSON', json('{"jsonrpc":"2.0","id":1,"res'), { accepted: true, outcome: 'bad_response' }],
  ['a non-JSON, non-SSE reply', (_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end('<html>'), { accepted: true, outcome: 'bad_response' }],
  ['a JSON reply for another id', json('{"jsonrpc":"2.0","id":7,"result":{}}'), { accepted: true, outcome: 'bad_response' }],
  ['a JSON reply under the id "1" for 1', json('{"jsonrpc":"2.0","id":"1","result":{}}'), { accepted: true, outcome: 'bad_response' }],
  ['a 202 with no body', (_req, res) => res.writeHead(202).end(), { accepted: true, outcome: 'bad_response' }],
  [
    'a reset mid-stream',
    (_req, res) => {
      res.writeHead(200, sse);
      res.write('data: {"jsonrpc":"2.0","method":"notifications/progress","params":{}}\n\n');
      setTimeout(() => res.socket?.destroy(), 20);
    },
    { accepted: true, outcome: 'reset' },
  ],
];

for (const [label, handler, { accepted, outcome }] of FAILURES) {
  t.test(`${label}: refused upstream_unavailable; charge success releases; charge attempt ${accepted ? 'keeps the credit (HTTP 2xx)' : 'releases and says no credit was spent'}`, async (t) => {
    const { gateway, handle } = await setUp(t);
    upstream.respond(handler);
    const success = await paidCall(gateway, 'fetch_readable', handle);
    t.equal(success.status, 200);
    t.equal(success.message?.result?._meta?.[REFUSAL]?.reason, 'upstream_unavailable');
    t.match(success.message?.result?.content?.[0]?.text, /no credit was spent/);
    t.equal(await researchBalance(gateway, handle), 3, 'charge success: released');
    const attempt = await paidCall(gateway, 'costly', handle, 2);
    t.equal(attempt.message?.result?._meta?.[REFUSAL]?.reason, 'upstream_unavailable');
    t.equal(await researchBalance(gateway, handle), accepted ? 2 : 3, accepted ? 'charge attempt: spent' : 'charge attempt: released');
    t.match(attempt.message?.result?.content?.[0]?.text, accepted ? /credit was spent/ : /no credit was spent/);
    t.equal(await metricValue(gateway.origin, 'tollbooth_upstream_duration_seconds_count', { method: 'tools/call', outcome }), 2, `counted as ${outcome}`);
  });
}

t.test('a refused connection and an unresolvable host: released on either policy, told apart in the metric', async (t) => {
  for (const [url, outcome] of [
    [`http://127.0.0.1:${await deadPort()}/mcp`, 'connect_refused'],
    ['http://tollbooth-test.invalid/mcp', 'name_resolution'],
  ] as const) {
    const { gateway, handle } = await setUp(t, { url });
    for (const tool of ['fetch_readable', 'costly']) {
      const reply = await paidCall(gateway, tool, handle);
      t.equal(reply.message?.result?._meta?.[REFUSAL]?.reason, 'upstream_unavailable', `${outcome}, ${tool}`);
      t.match(reply.message?.result?.content?.[0]?.text, /no credit was spent/);
    }
    t.equal(await researchBalance(gateway, handle), 3);
    t.equal(await metricValue(gateway.origin, 'tollbooth_upstream_duration_seconds_count', { method: 'tools/call', outcome }), 2);
  }
});

t.test('a JSON reply over maxResponseBytes is refused upstream_unavailable (body_too_large), the credit released', async (t) => {
  const { gateway, handle } = await setUp(t, { maxResponseBytes: '1kb' });
  upstream.respond(json(`{"jsonrpc":"2.0","id":1,"result":{"pad":"${'x'.repeat(8192)}"}}`));
  const reply = await paidCall(gateway, 'fetch_readable', handle);
  t.equal(reply.message?.result?._meta?.[REFUSAL]?.reason, 'upstream_unavailable');
  t.equal(await researchBalance(gateway, handle), 3);
  t.equal(await metricValue(gateway.origin, 'tollbooth_upstream_duration_seconds_count', { method: 'tools/call', outcome: 'body_too_large' }), 1);
});

t.test('the deadline while waiting for headers: deadline_exceeded, released on either policy (never accepted), counted as headers_timeout', async (t) => {
  const { gateway, handle } = await setUp(t, { callDeadline: '300ms' });
  upstream.respond(() => undefined); // never answers
  for (const tool of ['fetch_readable', 'costly']) {
    const next = upstream.next();
    const started = Date.now();
    const reply = await paidCall(gateway, tool, handle);
    t.ok(Date.now() - started < 3_000, 'answered at the deadline');
    t.equal(reply.message?.result?._meta?.[REFUSAL]?.reason, 'deadline_exceeded');
    t.same(await Promise.race([(await next).closed, sleep(3_000).then(() => 'still open')]), { finished: false }, 'the upstream request was aborted');
  }
  t.equal(await researchBalance(gateway, handle), 3);
  t.equal(await metricValue(gateway.origin, 'tollbooth_upstream_duration_seconds_count', { method: 'tools/call', outcome: 'headers_timeout' }), 2);
});

t.test('the deadline during an open event stream: deadline_exceeded; charge attempt keeps the credit (the upstream had accepted)', async (t) => {
  const { gateway, handle } = await setUp(t, { callDeadline: '300ms' });
  upstream.respond((_req, res) => {
    res.writeHead(200, sse);
    res.write(': working\n\n');
  });
  const success = await paidCall(gateway, 'fetch_readable', handle);
  t.equal(success.message?.result?._meta?.[REFUSAL]?.reason, 'deadline_exceeded');
  t.match(success.message?.result?.content?.[0]?.text, /refunded/);
  t.equal(await researchBalance(gateway, handle), 3);
  const attempt = await paidCall(gateway, 'costly', handle, 2);
  t.equal(attempt.message?.result?._meta?.[REFUSAL]?.reason, 'deadline_exceeded');
  t.match(attempt.message?.result?.content?.[0]?.text, /credit was spent/);
  t.equal(await researchBalance(gateway, handle), 2);
});

t.test('a client that leaves mid-call does not stop it: the upstream reply is read to its end and the credit committed', async (t) => {
  const { gateway, handle } = await setUp(t);
  let finish: () => void = () => undefined;
  const finished = new Promise<void>((resolve) => (finish = resolve));
  upstream.respond((_req, res) => {
    res.writeHead(200, sse);
    res.write('data: {"jsonrpc":"2.0","method":"notifications/progress","params":{}}\n\n');
    void finished.then(() => res.end('data: {"jsonrpc":"2.0","id":1,"result":{"content":[]}}\n\n'));
  });
  const next = upstream.next();
  const controller = new AbortController();
  const response = await fetch(gateway.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'fetch_readable', arguments: { tollboothToken: handle } } }),
    signal: controller.signal,
  });
  await response.body!.getReader().read();
  controller.abort();
  await sleep(100);
  finish();
  t.same(await (await next).closed, { finished: true }, 'the upstream finished its reply');
  for (let i = 0; i < 50 && (await researchBalance(gateway, handle)) !== 2; i++) await sleep(20);
  t.equal(await researchBalance(gateway, handle), 2, 'charged for the result the upstream delivered');
});
