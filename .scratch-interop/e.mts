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
const open = new Map();
let n = 0;
const log = [];
const socks = new Set<any>();
gw.gateway.app.server.on('connection', (s) => { socks.add(s); s.on('close', () => socks.delete(s)); });
gw.gateway.app.server.on('request', (req, res) => { const e = { m: req.method, a: req.headers.accept, ended: false, fin: false, closed: false, status: 0, sock: (req.socket as any)._tid ??= ++n }; log.push(e); req.on('end', () => e.ended = true); res.on('finish', () => { e.fin = true; e.status = res.statusCode; }); res.on('close', () => e.closed = true); });
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
await new Promise((r) => setTimeout(r, 500));
const count = () => new Promise((r) => gw.gateway.app.server.getConnections((e, n) => r(n)));
console.log('gateway connections', await count(), [...open.values()]);
gw.gateway.app.server.closeIdleConnections();
await new Promise((r) => setTimeout(r, 200));
console.log('after closeIdle', await count()); for (const e of log) console.log(JSON.stringify(e));
for (const s of socks) console.log('open socket', (s as any)._tid, s.bytesRead, s.bytesWritten, s.destroyed, !!(s as any)._httpMessage, (s as any).parser ? 'parser' : 'noparser');
const t1 = Date.now();

console.log('app.close resolved/raced in', Date.now() - t1, 'connections', await count());


const s = Date.now();
await gw.close();
console.log(process.argv.slice(2), 'gateway close took', Date.now() - s);
await up.close();
