import { Client } from '@modelcontextprotocol/client';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { Client as V1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as V1T } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { configSchema } from '../src/config/schema.ts';
import { runGateway } from '../src/start.ts';
import { createLogger } from '../src/observability/logger.ts';
import { testConfig, freePort } from '../test/helpers/gateway.ts';
import { startPaidUpstream } from '../test/helpers/paid-upstream.ts';
const up = await startPaidUpstream('stateless-json');
for (const mode of process.argv.slice(2)) {
  const cfg = configSchema.parse({ ...testConfig(up.url, { tools: {}, logging: { level: 'warn' } }), server: { host: '127.0.0.1', port: await freePort() } });
  const gw = await runGateway(cfg, { logger: createLogger('error') });
  let c: any;
  if (mode === 'v1') { c = new V1({ name: 'x', version: '1' }); await c.connect(new V1T(new URL(gw.url))); }
  else { const o: any = {}; if (mode === 'auto') o.versionNegotiation = { mode: 'auto' }; else if (mode==='pin') o.versionNegotiation = { mode: { pin: '2026-07-28' } }; else o.supportedProtocolVersions=[mode]; c = new Client({ name: 'x', version: '1' }, o); try { await c.connect(new StreamableHTTPClientTransport(new URL(gw.url))); } catch (e) { console.log('connect failed'); } }
  try { await c.listTools(); await c.callTool({ name: 'echo', arguments: { text: 'x' } }); await c.callTool({ name: 'progress', arguments: { steps: 2 } }, undefined, { onprogress: () => {} }); } catch (e) { console.log('ERR', e.message); }
  if (!process.env.NOCLOSE) await c.close();
  const s = Date.now();
  await gw.close();
  console.log(mode, 'gateway close took', Date.now() - s);
}
await up.close();
