import { Client } from '@modelcontextprotocol/client';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { everythingEntry, childEnv } from '../test/helpers/interop-upstreams.ts';
import { configSchema } from '../src/config/schema.ts';
import { runGateway } from '../src/start.ts';
import { createLogger } from '../src/observability/logger.ts';
import { testConfig, freePort } from '../test/helpers/gateway.ts';
const command = [process.execPath, everythingEntry(), 'stdio'];
const cfg = configSchema.parse({ ...testConfig('http://127.0.0.1:9/mcp', { tools: {} }), server: { host: '127.0.0.1', port: await freePort() }, upstream: { command } });
const gw = await runGateway(cfg, { logger: createLogger('warn') });
const mode = process.argv[2];
for (const target of ['direct', 'gw']) {
  const s = Date.now();
  const opts: any = { capabilities: { sampling: {}, elicitation: { form: {}, url: {} }, roots: { listChanged: true } } };
  if (mode === 'pin') opts.versionNegotiation = { mode: { pin: '2026-07-28' } };
  else if (mode === 'auto') opts.versionNegotiation = { mode: 'auto' };
  else opts.supportedProtocolVersions = [mode];
  const c = new Client({ name: 'x', version: '1' }, opts);
  c.setRequestHandler('sampling/createMessage', async () => ({ role: 'assistant', content: { type: 'text', text: 'hi' }, model: 'm' }));
  c.setRequestHandler('roots/list', async () => ({ roots: [] }));
  try {
    await c.connect(target === 'gw' ? new StreamableHTTPClientTransport(new URL(gw.url)) : new StdioClientTransport({ command: command[0], args: command.slice(1), env: childEnv() as any, stderr: 'ignore' }));
    console.log(target, 'connected', c.getNegotiatedProtocolVersion(), Date.now() - s);
    const tools = await c.listTools(); console.log(target, tools.tools.map((t) => t.name).join(','));
    console.log(target, JSON.stringify(await c.callTool({ name: 'trigger-long-running-operation', arguments: { duration: 0.1, steps: 2 } }, { onprogress: (p) => console.log('progress', p) })));
    console.log(target, JSON.stringify(await c.callTool({ name: 'trigger-sampling-request', arguments: { prompt: 'x', maxTokens: 5 } }, { timeout: 5000 })).slice(0, 300));
  } catch (e: any) { console.log(target, 'ERR', e.message); }
  await c.close();
  console.log(target, 'done', Date.now() - s);
}
await gw.close();
