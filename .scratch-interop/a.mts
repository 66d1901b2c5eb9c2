import { Client } from '@modelcontextprotocol/client';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { Client as V1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as V1T } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { startDualEraServer, startServerEverything } from '../test/helpers/interop-upstreams.ts';
import { startPaidUpstream } from '../test/helpers/paid-upstream.ts';
const t0 = Date.now();
const ups = { everything: await startServerEverything(), dual: await startDualEraServer(), v1: await startPaidUpstream('stateless-json') };
console.log('started in', Date.now() - t0);
for (const [name, up] of Object.entries(ups)) {
  for (const mode of ['v1', '2025-03-26', '2025-06-18', '2025-11-25', 'pin', 'auto']) {
    const s = Date.now();
    try {
      let c: any;
      if (mode === 'v1') { c = new V1({ name: 'x', version: '1' }, { capabilities: { sampling: {}, elicitation: {} } }); await c.connect(new V1T(new URL(up.url))); }
      else {
        const opts: any = { capabilities: { sampling: {}, elicitation: {} } };
        if (mode === 'pin') opts.versionNegotiation = { mode: { pin: '2026-07-28' } };
        else if (mode === 'auto') opts.versionNegotiation = { mode: 'auto' };
        else opts.supportedProtocolVersions = [mode];
        c = new Client({ name: 'x', version: '1' }, opts);
        c.setRequestHandler('elicitation/create', async () => ({ action: 'accept', content: { name: 'Ada' } }));
        c.setRequestHandler('sampling/createMessage', async () => ({ role: 'assistant', content: { type: 'text', text: 'hi' }, model: 'm' }));
        await c.connect(new StreamableHTTPClientTransport(new URL(up.url)));
      }
      const v = c.getNegotiatedProtocolVersion?.() ?? c.transport?.protocolVersion;
      const tools = await c.listTools();
      console.log(name, mode, 'OK', v, tools.tools.length, Date.now() - s);
      await c.close();
    } catch (e: any) { console.log(name, mode, 'FAIL', String(e.message).slice(0, 200), Date.now() - s); }
  }
}
for (const u of Object.values(ups)) await u.close();
