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
  const { readdir, stat } = await import('node:fs/promises');
  const { tmpdir } = await import('node:os');
  const bridgeDirs = async (): Promise<string[]> => (await readdir(tmpdir())).filter((name) => name.startsWith('tollbooth-bridge-'));
  const before = new Set(await bridgeDirs());
  const bridge = await startTestBridge(t);
  const created = (await bridgeDirs()).filter((name) => !before.has(name));
  t.ok(created.length >= 1, 'a directory of its own');
  const ours = [];
  for (const dir of created) {
    const entries = await readdir(`${tmpdir()}/${dir}`).catch(() => []);
    if (entries.includes('mcp.sock')) ours.push(dir);
    t.equal((await stat(`${tmpdir()}/${dir}`)).mode & 0o777, 0o700, `${dir} is 0700`);
  }
  await bridge.close();
  for (const dir of ours) await t.rejects(stat(`${tmpdir()}/${dir}`), { code: 'ENOENT' }, `${dir} is gone after close()`);
});
