import { Client } from '@modelcontextprotocol/client';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { Client as V1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as V1T } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { configSchema } from '../src/config/schema.ts';
import { runGateway } from '../src/start.ts';
import { createLogger } from '../src/observability/logger.ts';
import { testConfig, freePort } from '../test/helpers/gateway.ts';
import { startPaidUpstream } from '../test/helpers/paid-upstream.ts';
const up = await startPaidUpstream('stateless-json');
const cfg = configSchema.parse({ ...testConfig(up.url, { tools: {}, logging: { level: 'warn' } }), server: { host: '127.0.0.1', port: await freePort() } });
const gw = await runGateway(cfg, { logger: createLogger('error') });
const runs = process.argv.slice(2).map(async (mode) => {
  let c: any;
  const caps = { capabilities: { sampling: {}, elicitation: { form: {}, url: {} }, roots: { listChanged: true } } };
  if (mode === 'v1') { c = new V1({ name: 'x', version: '1' }, caps); await c.connect(new V1T(new URL(gw.url))); }
  else { const o: any = { ...caps }; if (mode === 'auto') o.versionNegotiation = { mode: 'auto' }; else o.supportedProtocolVersions=[mode]; c = new Client({ name: 'x', version: '1' }, o); await c.connect(new StreamableHTTPClientTransport(new URL(gw.url))); }
  await c.listTools();
  if (mode === 'v1') await c.callTool({ name: 'progress', arguments: { steps: 2 } }, CallToolResultSchema, { onprogress: () => {} });
  else await c.callTool({ name: 'progress', arguments: { steps: 2 } }, { onprogress: () => {} });
  await c.close();
});
await Promise.all(runs);
const s = Date.now();
await gw.close();
console.log(process.argv.slice(2), 'gateway close took', Date.now() - s);
await up.close();
