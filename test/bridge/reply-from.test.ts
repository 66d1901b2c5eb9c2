// The gateway will proxy to the bridge like to any HTTP upstream (SPEC §16): fastify + @fastify/reply-from
// (what @fastify/http-proxy is built on) with the bridge's undici dispatcher as its `undici` option reaches
// the private Unix socket; a real SDK client works end to end through it, streams included.
import replyFrom from '@fastify/reply-from';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import Fastify from 'fastify';
import t from 'tap';
import { startTestBridge } from './helpers.js';

t.test('reply-from with { undici: bridge.dispatcher } reaches the bridge on its socket', async (t) => {
  const bridge = await startTestBridge(t);
  t.match(bridge.url, /^http:\/\/bridge\.local\/mcp$/);
  const app = Fastify();
  await app.register(replyFrom, { base: new URL(bridge.url).origin, undici: bridge.dispatcher as never });
  // fastify's own JSON parser: reply-from re-serialises a parsed JSON body (a string body would be encoded twice).
  app.all('/mcp', (request, reply) => reply.from('/mcp'));
  await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(() => app.close());
  const address = app.server.address() as { port: number };

  const client = new Client({ name: 'through-a-proxy', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${address.port}/mcp`));
  await client.connect(transport);
  t.match(await client.callTool({ name: 'echo', arguments: { text: 'proxied' } }), { content: [{ text: 'proxied' }] });
  const steps: number[] = [];
  await client.callTool({ name: 'slow', arguments: { ms: 20, steps: 2 } }, CallToolResultSchema, { onprogress: (p) => void steps.push(p.progress) });
  t.strictSame(steps, [1, 2], 'SSE streamed through the proxy');
  await transport.terminateSession();
  t.equal(transport.sessionId, undefined, 'DELETE went through');
  await client.close();
});

t.test('the socket lives in a private (0700) directory that close() removes', async (t) => {
  const { mkdtemp, readdir, rm, stat } = await import('node:fs/promises');
  const { tmpdir } = await import('node:os');
  // A temporary directory of this test's own (os.tmpdir() follows TMPDIR), so other bridges running in parallel do not count.
  const parent = await mkdtemp(`${tmpdir()}/bridge-test-`);
  t.teardown(() => rm(parent, { recursive: true, force: true }));
  const saved = process.env.TMPDIR;
  process.env.TMPDIR = parent;
  const bridge = await startTestBridge(t).finally(() => {
    if (saved === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = saved;
  });
  const created = await readdir(parent);
  t.equal(created.length, 1, 'one directory');
  t.match(created[0], /^tollbooth-bridge-/);
  const dir = `${parent}/${created[0]}`;
  t.equal((await stat(dir)).mode & 0o777, 0o700, 'only this user can enter it');
  t.strictSame(await readdir(dir), ['mcp.sock']);
  await bridge.close();
  await t.rejects(stat(dir), { code: 'ENOENT' }, 'gone after close()');
});
