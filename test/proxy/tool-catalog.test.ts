// The tool catalog learns outputSchema declarations from the upstream itself (SPEC §5.4), with a short cache.
import t from 'tap';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { once } from 'node:events';
import { ToolCatalog } from '../../src/proxy/tool-catalog.js';
import { httpUpstreamTarget } from '../../src/proxy/upstream-target.js';
import { startPaidUpstream, type UpstreamMode } from '../helpers/paid-upstream.js';

for (const mode of ['stateless-json', 'sessions-sse', 'sessions-resumable'] as UpstreamMode[]) {
  t.test(`learns which tools declare an outputSchema from a ${mode} upstream`, async (t) => {
    const paid = await startPaidUpstream(mode);
    const upstream = httpUpstreamTarget(paid.url);
    t.teardown(async () => {
      await upstream.close();
      await paid.close();
    });
    const catalog = new ToolCatalog(upstream, { upstreamHeaders: {} });
    t.equal(await catalog.declaresOutputSchema('with_schema'), true);
    t.equal(await catalog.declaresOutputSchema('fetch_readable'), false);
    t.equal(await catalog.declaresOutputSchema('no_such_tool'), undefined);
  });
}

t.test('the answer is cached for 30 s, then fetched again; concurrent askers share one fetch', async (t) => {
  let lists = 0;
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      const message = body ? (JSON.parse(body) as { id?: string; method: string }) : { method: 'DELETE' };
      if (message.id === undefined) return void res.writeHead(202).end();
      if (message.method === 'tools/list') lists++;
      const result = message.method === 'initialize' ? { protocolVersion: '2025-11-25', capabilities: {}, serverInfo: { name: 's', version: '1' } } : { tools: [{ name: 'a', inputSchema: { type: 'object' } }] };
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', id: message.id, result }));
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const upstream = httpUpstreamTarget(`http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`);
  t.teardown(async () => {
    await upstream.close();
    server.close();
  });
  let now = 1_000_000;
  const catalog = new ToolCatalog(upstream, { upstreamHeaders: { 'x-key': 'k' }, now: () => now });
  t.same(await Promise.all([catalog.declaresOutputSchema('a'), catalog.declaresOutputSchema('a'), catalog.declaresOutputSchema('b')]), [false, false, undefined]);
  t.equal(lists, 1, 'one fetch for three concurrent askers');
  now += 29_000;
  await catalog.declaresOutputSchema('a');
  t.equal(lists, 1, 'cached');
  now += 2_000;
  t.equal(await catalog.declaresOutputSchema('a'), false, 'a stale answer is served at once…');
  for (let i = 0; i < 100 && lists < 2; i++) await new Promise((resolve) => setTimeout(resolve, 20));
  t.equal(lists, 2, '…while it is refreshed in the background after 30 s');
});

t.test('an unreachable upstream means unknown, retried after 5 s rather than on every call', async (t) => {
  const dead = createServer();
  dead.listen(0, '127.0.0.1');
  await once(dead, 'listening');
  const url = `http://127.0.0.1:${(dead.address() as AddressInfo).port}/mcp`;
  dead.close();
  await once(dead, 'close');
  let attempts = 0;
  const upstream = httpUpstreamTarget(url);
  const dispatcher = upstream.dispatcher;
  // Counts the requests the catalog sends (each one fails: nothing listens).
  const counting = { url, dispatcher: new Proxy(dispatcher, { get: (target, key) => (key === 'dispatch' ? (...args: unknown[]) => (attempts++, (target.dispatch as (...a: unknown[]) => boolean).apply(target, args)) : Reflect.get(target, key)) }) };
  t.teardown(() => upstream.close());
  let now = 5_000_000;
  const catalog = new ToolCatalog(counting, { upstreamHeaders: {}, now: () => now });
  t.equal(await catalog.declaresOutputSchema('with_schema'), undefined);
  const afterFirst = attempts;
  t.ok(afterFirst >= 1);
  now += 1_000;
  t.equal(await catalog.declaresOutputSchema('with_schema'), undefined);
  t.equal(attempts, afterFirst, 'no new attempt within 5 s');
  now += 5_000;
  await catalog.declaresOutputSchema('with_schema');
  t.ok(attempts > afterFirst, 'retried after 5 s');
});

t.test('an event-stream reply whose JSON spans several data: lines is read whole (SSE joins them with newlines)', async (t) => {
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      const message = body ? (JSON.parse(body) as { id?: string; method: string }) : { method: 'DELETE' };
      if (message.id === undefined) return void res.writeHead(202).end();
      const result = message.method === 'initialize' ? { protocolVersion: '2025-11-25', capabilities: {}, serverInfo: { name: 's', version: '1' } } : { tools: [{ name: 'a', inputSchema: { type: 'object' }, outputSchema: { type: 'object' } }] };
      // Pretty-printed JSON, one data: line per line of it.
      const lines = JSON.stringify({ jsonrpc: '2.0', id: message.id, result }, null, 2).split('\n');
      res.writeHead(200, { 'content-type': 'text/event-stream' }).end(`event: message\n${lines.map((line) => `data: ${line}`).join('\n')}\n\n`);
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const upstream = httpUpstreamTarget(`http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`);
  t.teardown(async () => {
    await upstream.close();
    server.close();
  });
  const catalog = new ToolCatalog(upstream, { upstreamHeaders: {} });
  t.equal(await catalog.declaresOutputSchema('a'), true, 'the declaration was read from the multi-line event');
});
