// The HTTP upstream target: the dispatcher the proxy forwards through, and the /readyz probe (SPEC §4:
// any HTTP answer within 1 s).
import t, { type Test } from 'tap';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from 'undici';
import { httpUpstreamTarget, type UpstreamTarget } from '../../src/proxy/upstream-target.js';

async function serve(t: Test, handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<{ url: string; server: Server }> {
  const server = createServer(handler);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`, server };
}

async function deadUrl(): Promise<string> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`;
  server.close();
  await once(server, 'close');
  return url;
}

function upstreamFor(t: Test, url: string): UpstreamTarget {
  const upstream = httpUpstreamTarget(url);
  t.teardown(() => upstream.close());
  return upstream;
}

t.test('probe on a dead port answers ok:false within about a second', async (t) => {
  const upstream = upstreamFor(t, await deadUrl());
  const started = Date.now();
  const result = await upstream.probe();
  t.equal(result.ok, false);
  t.ok(Date.now() - started < 1500, `took ${Date.now() - started} ms`);
});

t.test('probe on a server that never answers gives up after about a second', async (t) => {
  const { url } = await serve(t, () => undefined);
  const upstream = upstreamFor(t, url);
  const started = Date.now();
  const result = await upstream.probe();
  const took = Date.now() - started;
  t.equal(result.ok, false);
  // A server that never answers would hold an unbounded probe forever: generous for a loaded machine (quiet: ~1 s).
  t.ok(took >= 900 && took < 10_000, `took ${took} ms`);
});

t.test('probe: any HTTP status counts as an answer', async (t) => {
  const { url } = await serve(t, (_req, res) => res.writeHead(405).end());
  t.match(await upstreamFor(t, url).probe(), { ok: true, detail: /405/ });
});

t.test('probe on a server that streams forever is ok, and the process survives the later abort', async (t) => {
  // Regression: the probe's 1 s timeout signal aborts the body it no longer reads; without an error
  // listener on that body the abort was an uncaught exception that killed the gateway.
  let streamClosed = false;
  const { url } = await serve(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const timer = setInterval(() => res.write(': tick\n\n'), 50);
    res.on('close', () => {
      clearInterval(timer);
      streamClosed = true;
    });
  });
  const upstream = upstreamFor(t, url);
  const result = await upstream.probe();
  t.equal(result.ok, true);
  await sleep(1300); // past the probe's timeout
  t.ok(streamClosed, 'the probe does not keep the stream open');
  t.pass('still alive after the abort');
});

t.test('the dispatcher reaches the upstream URL (the proxy and the catalog send through it)', async (t) => {
  const { url } = await serve(t, (_req, res) => res.writeHead(201, { 'X-Thing': 'a', 'content-type': 'application/json' }).end('{"ok":true}'));
  const target = upstreamFor(t, url);
  const response = await request(target.url, { method: 'POST', dispatcher: target.dispatcher, body: '{}' });
  t.equal(response.statusCode, 201);
  t.equal(response.headers['x-thing'], 'a');
  t.equal(await response.body.text(), '{"ok":true}');
});

t.test('no idle timeouts on the dispatcher: a stream quiet for longer than a test timeout stays open', async (t) => {
  const { url } = await serve(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.flushHeaders();
    setTimeout(() => res.end('data: late\n\n'), 1_500);
  });
  const target = upstreamFor(t, url);
  const response = await request(target.url, { dispatcher: target.dispatcher });
  t.equal(await response.body.text(), 'data: late\n\n');
});

t.test('close() returns even with a stream still open', async (t) => {
  const { url } = await serve(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(': open\n\n');
  });
  const target = httpUpstreamTarget(url);
  const response = await request(target.url, { dispatcher: target.dispatcher });
  response.body.on('error', () => undefined);
  const closed = await Promise.race([target.close().then(() => 'closed'), sleep(3000).then(() => 'stuck')]);
  t.equal(closed, 'closed');
});
