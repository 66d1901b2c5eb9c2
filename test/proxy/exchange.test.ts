// PricedExchange (SPEC §5.4, §6.2 step 7, §6.5): one forwarded priced call against a real node:http upstream.
import t, { type Test } from 'tap';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { PricedExchange, type ExchangeOutcome } from '../../src/proxy/exchange.js';
import { HttpUpstream } from '../../src/proxy/upstream-http.js';
import type { JsonRpcResponse } from '../../src/mcp/jsonrpc.js';

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

async function listen(server: Server): Promise<string> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

interface Rig {
  gateway: string;
  setUpstream(handler: Handler): void;
  /** Resolves with the outcome of the next exchange, before finish() runs. */
  nextOutcome(): Promise<ExchangeOutcome>;
  /** Lets the waiting exchange finish with this message. */
  finish(message: JsonRpcResponse): void;
}

/** A gateway-shaped server that runs one PricedExchange per request and waits for the test to conclude it. */
async function rig(t: Test, options: { deadlineMs?: number; maxResponseBytes?: number } = {}): Promise<Rig> {
  let handler: Handler = (_req, res) => res.writeHead(404).end();
  const upstreamServer = createServer((req, res) => {
    req.resume();
    req.on('end', () => handler(req, res));
  });
  const upstream = new HttpUpstream(`${await listen(upstreamServer)}/mcp`);
  let outcomeWaiter: (o: ExchangeOutcome) => void = () => undefined;
  let outcomePromise = new Promise<ExchangeOutcome>((resolve) => (outcomeWaiter = resolve));
  let finisher: (m: JsonRpcResponse) => void = () => undefined;
  const gatewayServer = createServer((req, res) => {
    req.resume();
    req.on('end', async () => {
      const deadline = AbortSignal.timeout(options.deadlineMs ?? 10_000);
      const exchange = new PricedExchange(res, 1, { maxResponseBytes: options.maxResponseBytes ?? 1024 * 1024 });
      const finalMessage = new Promise<JsonRpcResponse>((resolve) => (finisher = resolve));
      const outcome = await exchange.run(
        upstream,
        { method: 'POST', path: '/mcp', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}', signal: deadline },
        () => (deadline.aborted ? 'deadline' : 'client_gone'),
      );
      outcomeWaiter(outcome);
      if (outcome.kind === 'http_refusal') return;
      await exchange.finish(await finalMessage);
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
  return {
    gateway,
    setUpstream: (h) => (handler = h),
    nextOutcome: async () => {
      const outcome = await outcomePromise;
      outcomePromise = new Promise<ExchangeOutcome>((resolve) => (outcomeWaiter = resolve));
      return outcome;
    },
    finish: (m) => finisher(m),
  };
}

const call = (url: string) => fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
const withReceipt: JsonRpcResponse = { jsonrpc: '2.0', id: 1, result: { content: [], _meta: { 'xyz.tollbooth/receipt': { sku: 's', cost: 1, remaining: 2 } } } };
const sseHeaders = { 'content-type': 'text/event-stream' };

t.test('a JSON reply for this id is answered; the client gets the final message from finish()', async (t) => {
  const r = await rig(t);
  r.setUpstream((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"jsonrpc":"2.0","id":1,"result":{"content":[]}}'));
  const reply = call(r.gateway);
  const outcome = await r.nextOutcome();
  t.match(outcome, { kind: 'answered', message: { id: 1, result: { content: [] } } });
  r.finish(withReceipt);
  const response = await reply;
  t.equal(response.status, 200);
  t.same(await response.json(), withReceipt);
});

t.test('a JSON-RPC error for this id is answered too', async (t) => {
  const r = await rig(t);
  r.setUpstream((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"boom"}}'));
  const reply = call(r.gateway);
  t.match(await r.nextOutcome(), { kind: 'answered', message: { error: { code: -32603 } } });
  r.finish({ jsonrpc: '2.0', id: 1, error: { code: -32603, message: 'boom' } });
  await (await reply).text();
});

t.test('SSE: events before the result stream at once; the result waits for finish()', async (t) => {
  const r = await rig(t);
  r.setUpstream((_req, res) => {
    res.writeHead(200, sseHeaders);
    res.write('id: a\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}\n\n');
    res.end('id: b\ndata: {"jsonrpc":"2.0","id":1,"result":{"content":[]}}\n\n');
  });
  const response = await call(r.gateway);
  t.equal(response.headers.get('x-accel-buffering'), 'no');
  const outcome = await r.nextOutcome();
  t.equal(outcome.kind, 'answered');
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  let text = '';
  const firstEvent = (async () => {
    while (!text.includes('\n\n')) text += decoder.decode((await reader.read()).value, { stream: true });
  })();
  t.equal(await Promise.race([firstEvent.then(() => 'arrived'), sleep(3000).then(() => 'held')]), 'arrived');
  t.match(text, /^id: a\ndata: .*notifications\/progress/, 'the progress event arrived before finish()');
  let next = reader.read();
  const early = await Promise.race([next.then(() => 'more'), sleep(150).then(() => 'nothing')]);
  t.equal(early, 'nothing', 'the result is held');
  r.finish(withReceipt);
  for (;;) {
    const { done, value } = await next;
    if (done) break;
    text += decoder.decode(value, { stream: true });
    next = reader.read();
  }
  t.match(text, /\n\nid: b\ndata: (.*)\n\n$/, 'the result keeps its event id');
  t.same(JSON.parse(/id: b\ndata: (.*)\n\n$/.exec(text)![1]!), withReceipt);
});

t.test('SSE: a result for another id is not taken for ours', async (t) => {
  const r = await rig(t);
  r.setUpstream((_req, res) => {
    res.writeHead(200, sseHeaders);
    res.end('data: {"jsonrpc":"2.0","id":2,"result":{}}\n\ndata: {"jsonrpc":"2.0","id":"1","result":{}}\n\n');
  });
  const reply = call(r.gateway);
  t.match(await r.nextOutcome(), { kind: 'failed', accepted: true, error: { code: 'TB_ERR_UPSTREAM_BAD_RESPONSE' } });
  r.finish(withReceipt);
  await (await reply).text();
});

t.test('SSE: a stream that ends without the result fails, and finish() sends the answer as one more event', async (t) => {
  const r = await rig(t);
  r.setUpstream((_req, res) => {
    res.writeHead(200, sseHeaders);
    res.end('data: {"jsonrpc":"2.0","method":"notifications/progress","params":{}}\n\n');
  });
  const reply = call(r.gateway);
  t.match(await r.nextOutcome(), { kind: 'failed', accepted: true, error: { message: /ended without the result/ } });
  const refusal: JsonRpcResponse = { jsonrpc: '2.0', id: 1, result: { isError: true, content: [{ type: 'text', text: 'upstream unavailable' }] } };
  r.finish(refusal);
  const text = await (await reply).text();
  t.match(text, /notifications\/progress/);
  t.ok(text.endsWith(`event: message\ndata: ${JSON.stringify(refusal)}\n\n`));
});

t.test('an upstream 4xx is relayed unchanged as an http_refusal', async (t) => {
  const r = await rig(t);
  r.setUpstream((_req, res) => res.writeHead(404, { 'content-type': 'application/json', 'mcp-session-id': 'x' }).end('{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found"}}'));
  const response = await call(r.gateway);
  t.match(await r.nextOutcome(), { kind: 'http_refusal', status: 404 });
  t.equal(response.status, 404);
  t.equal(await response.text(), '{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found"}}');
});

t.test('an upstream 4xx whose body breaks off does not crash the process', async (t) => {
  const r = await rig(t);
  r.setUpstream((_req, res) => {
    res.writeHead(400, { 'content-type': 'application/json', 'content-length': '1000' });
    res.write('{"jsonrpc":"2.0",');
    setTimeout(() => res.socket?.destroy(), 20);
  });
  const response = await call(r.gateway);
  t.match(await r.nextOutcome(), { kind: 'http_refusal', status: 400 });
  t.equal(response.status, 400);
  const body = await Promise.race([response.text().then(() => 'ended', () => 'cut off'), sleep(3000).then(() => 'hung')]);
  t.equal(body, 'cut off', 'the client sees the body break off instead of waiting forever');
  await sleep(50);
  t.pass('still alive');
});

for (const [label, handler] of [
  ['a 5xx', (_req: IncomingMessage, res: ServerResponse) => res.writeHead(503).end('down')],
  ['garbage JSON', (_req: IncomingMessage, res: ServerResponse) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"jsonrpc":"2.0","id":1,"res')],
  ['a non-JSON, non-SSE reply', (_req: IncomingMessage, res: ServerResponse) => res.writeHead(200, { 'content-type': 'text/html' }).end('<html>')],
  ['a JSON reply for another id', (_req: IncomingMessage, res: ServerResponse) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"jsonrpc":"2.0","id":7,"result":{}}')],
  ['a 202 with no body', (_req: IncomingMessage, res: ServerResponse) => res.writeHead(202).end()],
] as const) {
  t.test(`${label} from the upstream is a failure after acceptance`, async (t) => {
    const r = await rig(t);
    r.setUpstream(handler);
    const reply = call(r.gateway);
    t.match(await r.nextOutcome(), { kind: 'failed', accepted: true });
    r.finish({ jsonrpc: '2.0', id: 1, result: { isError: true, content: [] } });
    t.equal((await reply).status, 200);
  });
}

t.test('an upstream reset mid-stream is a failure', async (t) => {
  const r = await rig(t);
  r.setUpstream((_req, res) => {
    res.writeHead(200, sseHeaders);
    res.write('data: {"jsonrpc":"2.0","method":"notifications/progress","params":{}}\n\n');
    setTimeout(() => res.socket?.destroy(), 20);
  });
  const reply = call(r.gateway);
  t.match(await r.nextOutcome(), { kind: 'failed', accepted: true });
  r.finish({ jsonrpc: '2.0', id: 1, result: { isError: true, content: [] } });
  await (await reply).text().catch(() => undefined);
});

t.test('an unreachable upstream is a failure before acceptance', async (t) => {
  const r = await rig(t);
  r.setUpstream((_req, res) => res.socket?.destroy());
  const reply = call(r.gateway);
  t.match(await r.nextOutcome(), { kind: 'failed', accepted: false, error: { code: 'TB_ERR_UPSTREAM_UNAVAILABLE' } });
  r.finish({ jsonrpc: '2.0', id: 1, result: { isError: true, content: [] } });
  t.equal((await reply).status, 200);
});

t.test('a JSON reply over maxResponseBytes is a failure', async (t) => {
  const r = await rig(t, { maxResponseBytes: 1024 });
  r.setUpstream((_req, res) => {
    res.on('error', () => undefined);
    res.writeHead(200, { 'content-type': 'application/json' }).end(`{"jsonrpc":"2.0","id":1,"result":{"pad":"${'x'.repeat(8192)}"}}`);
  });
  const reply = call(r.gateway);
  t.match(await r.nextOutcome(), { kind: 'failed', accepted: true, error: { code: 'TB_ERR_UPSTREAM_RESPONSE_TOO_LARGE' } });
  r.finish({ jsonrpc: '2.0', id: 1, result: { isError: true, content: [] } });
  await (await reply).text();
});

t.test('the deadline while waiting for headers aborts, not accepted', async (t) => {
  const r = await rig(t, { deadlineMs: 150 });
  r.setUpstream(() => undefined); // never answers
  const reply = call(r.gateway);
  t.match(await r.nextOutcome(), { kind: 'aborted', accepted: false, reason: 'deadline' });
  r.finish({ jsonrpc: '2.0', id: 1, result: { isError: true, content: [] } });
  t.equal((await reply).status, 200);
});

t.test('the deadline during an open event stream aborts after acceptance', async (t) => {
  const r = await rig(t, { deadlineMs: 200 });
  r.setUpstream((_req, res) => {
    res.writeHead(200, sseHeaders);
    res.write(': working\n\n');
  });
  const reply = call(r.gateway);
  t.match(await r.nextOutcome(), { kind: 'aborted', accepted: true, reason: 'deadline' });
  r.finish({ jsonrpc: '2.0', id: 1, result: { isError: true, content: [] } });
  await (await reply).text().catch(() => undefined);
});
