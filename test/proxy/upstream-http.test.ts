// The undici HTTP upstream: send() error mapping and the /readyz probe (SPEC §4: any HTTP answer within 1 s).
import t, { type Test } from 'tap';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { HttpUpstream } from '../../src/proxy/upstream-http.js';
import { GatewayError } from '../../src/errors.js';

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

function upstreamFor(t: Test, url: string): HttpUpstream {
  const upstream = new HttpUpstream(url);
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
  t.ok(took >= 900 && took < 2500, `took ${took} ms`);
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

t.test('send returns status, lower-case headers and the body stream', async (t) => {
  const { url } = await serve(t, (_req, res) => res.writeHead(201, { 'X-Thing': 'a', 'content-type': 'application/json' }).end('{"ok":true}'));
  const response = await upstreamFor(t, url).send({ method: 'POST', path: '/mcp', headers: { 'content-type': 'application/json' }, body: '{}', signal: new AbortController().signal });
  t.equal(response.status, 201);
  t.equal(response.headers['x-thing'], 'a');
  let text = '';
  for await (const chunk of response.body) text += String(chunk);
  t.equal(text, '{"ok":true}');
});

t.test("send keeps the upstream URL's path and appends the client's query", async (t) => {
  let seen = '';
  const { url } = await serve(t, (req, res) => {
    seen = req.url ?? '';
    res.end();
  });
  const response = await upstreamFor(t, url.replace('/mcp', '/deep/mcp')).send({ method: 'GET', path: '/gateway-path?x=1&y=2', headers: {}, signal: new AbortController().signal });
  await response.body.dump();
  t.equal(seen, '/deep/mcp?x=1&y=2');
});

t.test('send to a dead port rejects with TB_ERR_UPSTREAM_UNAVAILABLE and the cause attached', async (t) => {
  const error = await upstreamFor(t, await deadUrl())
    .send({ method: 'POST', path: '/mcp', headers: {}, body: '{}', signal: new AbortController().signal })
    .catch((e: unknown) => e);
  t.ok(error instanceof GatewayError);
  t.equal((error as GatewayError).code, 'TB_ERR_UPSTREAM_UNAVAILABLE');
  t.ok((error as GatewayError).cause, 'cause kept');
  t.same(JSON.parse(JSON.stringify(error)), { code: 'TB_ERR_UPSTREAM_UNAVAILABLE', message: (error as GatewayError).message }, 'the cause is not serialised');
});

t.test('an aborted send rejects with TB_ERR_UPSTREAM_TIMEOUT', async (t) => {
  const { url } = await serve(t, () => undefined);
  const error = await upstreamFor(t, url)
    .send({ method: 'POST', path: '/mcp', headers: {}, body: '{}', signal: AbortSignal.timeout(100) })
    .catch((e: unknown) => e);
  t.match(error, { code: 'TB_ERR_UPSTREAM_TIMEOUT' });
});

t.test('close() returns even with a stream still open', async (t) => {
  const { url } = await serve(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(': open\n\n');
  });
  const upstream = new HttpUpstream(url);
  const controller = new AbortController();
  const response = await upstream.send({ method: 'GET', path: '/mcp', headers: {}, signal: controller.signal });
  response.body.on('error', () => undefined);
  controller.abort();
  const closed = await Promise.race([upstream.close().then(() => 'closed'), sleep(3000).then(() => 'stuck')]);
  t.equal(closed, 'closed');
});
