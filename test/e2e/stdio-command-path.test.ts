// SPEC §22: relative paths in upstream.command resolve against the config file's directory, not the
// gateway's working directory: a server script beside the config file runs as ["node", "server.mjs"].
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import t from 'tap';
import { loadConfig } from '../../src/config/load.js';
import { createLogger } from '../../src/observability/logger.js';
import { runGateway } from '../../src/start.js';

t.test('["node", "server.mjs"] runs the server.mjs beside the config file', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tb-cmd-path-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'server.mjs'), `await import(${JSON.stringify(new URL('../fixtures/bridge/raw-server.mjs', import.meta.url).href)});\n`);
  const file = join(dir, 'tollbooth.yaml');
  writeFileSync(file, `server: { host: 127.0.0.1, port: 0 }\nupstream: { command: ["${process.execPath}", "server.mjs"] }\nlogging: { level: silent }\n`);
  t.not(process.cwd(), dir, 'the gateway runs elsewhere');
  const gateway = await runGateway(loadConfig(file), { logger: createLogger('silent'), configPath: file });
  t.teardown(() => gateway.close());
  const client = new Client({ name: 'path-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(gateway.url)));
  t.teardown(() => client.close());
  t.match(await client.callTool({ name: 'echo', arguments: { text: 'beside the config' } }), { content: [{ text: 'beside the config' }] });
});
