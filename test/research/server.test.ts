import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import t from 'tap';
import { startResearchHttp } from '../../src/research/http.js';
import { html, localDeps, startOrigin, tableResolver } from './helpers.js';

const TOOL_NAMES = ['extract_tables', 'fetch_readable', 'inspect_domain'];

const origin = await startOrigin({
  '/tables': html('<table><tr><th>k</th><th>v</th></tr><tr><td>a</td><td>1</td></tr></table>'),
});
t.teardown(() => origin.close());

// The injected resolver maps private.test to 10.0.0.7 and public.test to a public address; the
// test-only override sends approved connections to the local origin.
const research = await startResearchHttp({
  port: 0,
  host: '127.0.0.1',
  deps: localDeps(origin.port, tableResolver({ 'private.test': [{ address: '10.0.0.7', family: 4 }], 'public.test': [{ address: '93.184.216.34', family: 4 }] })),
});
t.teardown(() => research.close());

async function connectHttp(): Promise<Client> {
  const client = new Client({ name: 'research-test', version: '0.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(research.url)));
  return client;
}

const textOf = (result: CallToolResult): string => result.content.map((part) => (part.type === 'text' ? part.text : '')).join('');

t.test('an SDK client over Streamable HTTP lists the three tools with their schemas', async (t) => {
  const client = await connectHttp();
  t.teardown(() => client.close());
  const { tools } = await client.listTools();
  t.same(tools.map((tool) => tool.name).sort(), TOOL_NAMES);
  const byName = Object.fromEntries(tools.map((tool) => [tool.name, tool]));
  t.same(byName.fetch_readable?.inputSchema.required, ['url']);
  t.same(byName.inspect_domain?.inputSchema.required, ['domain']);
  t.ok(byName.extract_tables?.outputSchema, 'extract_tables declares an output schema');
  t.ok(byName.inspect_domain?.outputSchema, 'inspect_domain declares an output schema');
});

t.test('a URL on a name resolving to a private address comes back as a tool error', async (t) => {
  const client = await connectHttp();
  t.teardown(() => client.close());
  const result = (await client.callTool({ name: 'fetch_readable', arguments: { url: 'http://private.test/' } })) as CallToolResult;
  t.equal(result.isError, true);
  t.equal(textOf(result), 'Refused: private.test resolves to 10.0.0.7, a private address; only public hosts can be fetched.');
});

t.test('localhost is a tool error for every tool', async (t) => {
  const client = await connectHttp();
  t.teardown(() => client.close());
  for (const [name, args] of [
    ['fetch_readable', { url: 'http://localhost:8080/' }],
    ['extract_tables', { url: 'http://127.0.0.1/' }],
    ['inspect_domain', { domain: 'localhost' }],
  ] as const) {
    const result = (await client.callTool({ name, arguments: args })) as CallToolResult;
    t.equal(result.isError, true, name);
    t.match(textOf(result), /^Refused: /, name);
  }
});

t.test('extract_tables answers with structured content matching its text', async (t) => {
  const client = await connectHttp();
  t.teardown(() => client.close());
  const result = (await client.callTool({ name: 'extract_tables', arguments: { url: 'http://public.test/tables' } })) as CallToolResult;
  t.notOk(result.isError);
  const expected = { url: 'http://public.test/tables', tables: [{ headers: ['k', 'v'], rows: [['a', '1']] }] };
  t.same(result.structuredContent, expected);
  t.same(JSON.parse(textOf(result)), expected);
});

t.test('the HTTP entrypoint answers only POST on /mcp, and only to localhost Host headers', async (t) => {
  const base = new URL(research.url);
  const get = await fetch(research.url);
  t.equal(get.status, 405);
  t.equal(get.headers.get('allow'), 'POST');
  t.equal((await fetch(new URL('/elsewhere', base))).status, 404);
  t.equal((await fetch(new URL('/healthz', base))).status, 200);
  // fetch() will not let us set Host; a raw request can.
  const { request } = await import('node:http');
  const status = await new Promise<number>((resolve, reject) => {
    const req = request({ host: base.hostname, port: base.port, path: '/mcp', method: 'POST', headers: { host: 'attacker.example', 'content-type': 'application/json' } }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    req.end('{}');
  });
  t.equal(status, 403, 'rebinding Host refused');
});

t.test('the stdio entrypoint serves the same tools to an SDK client', async (t) => {
  const client = new Client({ name: 'research-test', version: '0.0.0' });
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: ['--import', 'tsx', fileURLToPath(new URL('../../src/research/stdio.ts', import.meta.url))],
    stderr: 'pipe',
  });
  await client.connect(transport);
  t.teardown(() => client.close());
  const { tools } = await client.listTools();
  t.same(tools.map((tool) => tool.name).sort(), TOOL_NAMES);
  // No injected resolver here: a literal private address needs no DNS to be refused.
  const result = (await client.callTool({ name: 'fetch_readable', arguments: { url: 'http://169.254.169.254/latest/meta-data/' } })) as CallToolResult;
  t.equal(result.isError, true);
  t.equal(textOf(result), 'Refused: 169.254.169.254 is a link-local address; only public hosts can be fetched.');
});
