// src/http/listen.ts: port 0 binds a free port at bind time and reports it; a public URL derived from
// port 0 names the bound port; a port in use fails, it is never silently replaced.
import { createServer } from 'node:http';
import t from 'tap';
import { configSchema } from '../../src/config/schema.js';
import { listen, withBoundPort } from '../../src/http/listen.js';

t.test('port 0 binds a free port and reports the bound address', async (t) => {
  const server = createServer((_request, response) => response.end('here'));
  t.teardown(() => server.close());
  const bound = await listen(server, '127.0.0.1', 0);
  t.ok(bound.port > 0);
  t.equal(bound.origin, `http://127.0.0.1:${bound.port}`);
  t.equal(await (await fetch(bound.origin)).text(), 'here', 'the reported origin reaches the server');
});

t.test('two servers on port 0 at once get different ports (no pick-then-bind race)', async (t) => {
  const servers = [createServer(), createServer()];
  t.teardown(() => servers.forEach((server) => server.close()));
  const [a, b] = await Promise.all(servers.map((server) => listen(server, '127.0.0.1', 0)));
  t.not(a?.port, b?.port);
});

t.test('a port in use rejects with EADDRINUSE', async (t) => {
  const first = createServer();
  const second = createServer();
  t.teardown(() => {
    first.close();
    second.close();
  });
  const { port } = await listen(first, '127.0.0.1', 0);
  await t.rejects(listen(second, '127.0.0.1', port), { code: 'EADDRINUSE' });
});

t.test('an IPv6 host is bracketed in the origin', async (t) => {
  const server = createServer();
  t.teardown(() => server.close());
  const bound = await listen(server, '::1', 0).catch(() => null);
  if (!bound) {
    t.pass('no IPv6 loopback here');
    return;
  }
  t.equal(bound.origin, `http://[::1]:${bound.port}`);
});

const base = { upstream: { url: 'http://127.0.0.1:9/mcp' }, payments: { provider: 'dev' as const }, skus: {}, tools: {} };

t.test('a public URL derived from port 0 names the bound port, and so does the audience derived from it', async (t) => {
  const config = configSchema.parse({ ...base, server: { host: '127.0.0.1', port: 0 } });
  t.equal(config.server.publicUrl, 'http://127.0.0.1:0/mcp', 'the schema derives it from the port it was given');
  const bound = withBoundPort(config, 4321);
  t.equal(bound.server.publicUrl, 'http://127.0.0.1:4321/mcp');
  t.equal(bound.auth.audience, 'http://127.0.0.1:4321/mcp');
  t.equal(bound.server.port, 0, 'the configured port stays as written (a reload compares it)');
});

t.test('a public URL written with port 0 keeps its exact form with the bound port (no slash added)', async (t) => {
  const config = configSchema.parse({ ...base, server: { host: '127.0.0.1', port: 0, publicUrl: 'http://127.0.0.1:0' } });
  t.equal(withBoundPort(config, 4321).server.publicUrl, 'http://127.0.0.1:4321');
});

t.test('a configured public URL is left as it is', async (t) => {
  const config = configSchema.parse({ ...base, server: { host: '127.0.0.1', port: 0, publicUrl: 'https://mcp.example.com/mcp' } });
  t.equal(withBoundPort(config, 4321), config);
});

t.test('runGateway on port 0 reports the bound URL, and its derived public URL names the same port', async (t) => {
  const { runGateway } = await import('../../src/start.js');
  const { createLogger } = await import('../../src/observability/logger.js');
  const config = configSchema.parse({ ...base, server: { host: '127.0.0.1', port: 0 } });
  const running = await runGateway(config, { logger: createLogger('silent') });
  t.teardown(() => running.close());
  const { port } = new URL(running.url);
  t.not(port, '0');
  t.equal(running.url, `http://127.0.0.1:${port}/mcp`);
  t.equal(running.config.server.publicUrl, running.url, 'checkout links and PRM name the port clients reach');
  t.equal((await fetch(new URL('/healthz', running.url))).status, 200, 'and the gateway answers there');
});
