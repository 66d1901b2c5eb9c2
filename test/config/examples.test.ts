// config/examples/: every example is accepted by `tollbooth check`; two-servers.yaml runs as written
// (the research server over HTTP at the default endpoint, its stdio build at /local/mcp).
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { loadConfig } from '../../src/config/load.js';
import type { GatewayConfig } from '../../src/config/schema.js';
import { createLogger } from '../../src/observability/logger.js';
import { startResearchHttp } from '../../src/research/http.js';
import { runGateway } from '../../src/start.js';
import { assertBuilt, childEnv, CLI, ROOT } from '../helpers/gateway-process.js';

const EXAMPLES = join(ROOT, 'config', 'examples');
const examples = readdirSync(EXAMPLES).filter((name) => name.endsWith('.yaml'));

t.test('tollbooth check accepts every example', async (t) => {
  assertBuilt();
  t.ok(examples.includes('two-servers.yaml'));
  for (const name of examples) {
    const result = spawnSync(process.execPath, [CLI, 'check', '--config', join(EXAMPLES, name)], { cwd: ROOT, env: childEnv(), encoding: 'utf8' });
    t.equal(result.status, 0, `${name}: ${result.stderr}`);
  }
});

t.test('two-servers.yaml: both endpoints serve their own server, priced as written', async (t) => {
  const research = await startResearchHttp({ port: 0 });
  t.teardown(() => research.close());
  // Port 0: the gateway binds a free port; the public URL written with port 0 names the bound one.
  const loaded = loadConfig(join(EXAMPLES, 'two-servers.yaml'), { RESEARCH_URL: research.url, TOLLBOOTH_PUBLIC_URL: 'http://127.0.0.1:0/mcp' });
  t.equal(loaded.servers.local?.upstream.command?.[1], '../../dist/research/stdio.js', 'relative to the config file (SPEC §22)');
  const config = structuredClone<GatewayConfig>(loaded);
  config.server.port = 0;
  const gateway = await runGateway(config, { logger: createLogger('silent'), configPath: join(EXAMPLES, 'two-servers.yaml') });
  t.teardown(() => gateway.close());
  const { port } = new URL(gateway.url);

  const headers = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18' };
  const init = await fetch(`http://127.0.0.1:${port}/local/mcp`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'examples', version: '1' } } }),
  });
  const session = init.headers.get('mcp-session-id');
  t.equal(init.status, 200);
  await init.text();
  const list = async (path: string, extra: Record<string, string> = {}) => {
    const response = await fetch(`http://127.0.0.1:${port}${path}`, { method: 'POST', headers: { ...headers, ...extra }, body: JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/list', params: {} }) });
    const text = await response.text();
    const message = JSON.parse(/^data: (.*)$/m.exec(text)?.[1] ?? text) as { result: { tools: { name: string; _meta?: Record<string, { cost: number }> }[] } };
    return Object.fromEntries(message.result.tools.map((tool) => [tool.name, tool._meta?.['xyz.tollbooth/price']?.cost ?? 0]));
  };
  t.match(await list('/mcp'), { fetch_readable: 1, extract_tables: 2, inspect_domain: 0 }, 'the default endpoint prices its tools');
  t.match(await list('/local/mcp', session ? { 'mcp-session-id': session } : {}), { fetch_readable: 2, extract_tables: 0, inspect_domain: 1 }, '/local/mcp prices its own');
});
