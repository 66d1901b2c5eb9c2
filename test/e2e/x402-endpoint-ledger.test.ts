// Regression (issue 27): an x402 payment at an endpoint of `servers` must be exported under the
// tool's name at that endpoint, `<server>/<tool>`, as that endpoint's credit spends are — before the
// fix it read bare `fetch_readable`, the same as the default endpoint's tool at another price.
// Black box: a real gateway with `servers.b`, a real SDK client paying through the x402 client
// library, the fake facilitator over HTTP, and the operator's `ledger export` over the gateway's store.
import t from 'tap';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ledgerExport } from '../../src/admin.js';
import { createLogger } from '../../src/observability/logger.js';
import { fundedHandle, rawToolCall, startTestGateway, testConfig } from '../helpers/gateway.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';
import { startFakeFacilitator } from '../helpers/x402-facilitator.js';
import { paymentMeta, paymentRequiredOf, withX402 } from '../helpers/x402-gateway.js';
import { newPayer } from '../helpers/x402-payer.js';

type Json = Record<string, any>;

const upstream = await startPaidUpstream('stateless-json');
t.teardown(() => upstream.close());
const fake = await startFakeFacilitator();
t.teardown(() => fake.close());
const base = testConfig(upstream.url);
const gateway = await startTestGateway(
  t,
  withX402(
    {
      ...base,
      server: { host: '127.0.0.1', port: 0, publicUrl: 'http://127.0.0.1:0/mcp' },
      servers: { b: { path: '/mcp/b', upstream: { url: upstream.url }, tools: { fetch_readable: { sku: 'research', cost: 2 } } } },
    },
    fake.url,
  ),
);
const endpointB = `${gateway.origin}/mcp/b`;

/** Pays one call to fetch_readable by x402 at `url`; resolves once the paid result is in. */
async function payByX402(url: string, args: Json): Promise<void> {
  const client = new Client({ name: 'x402-endpoint-ledger', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  try {
    const challenge = (await client.callTool({ name: 'fetch_readable', arguments: args })) as Json;
    const payload = await newPayer().pay(paymentRequiredOf(challenge));
    const paid = (await client.callTool({ name: 'fetch_readable', arguments: args, _meta: paymentMeta(payload) })) as Json;
    if (paid.isError) throw new Error(`the paid call failed: ${JSON.stringify(paid).slice(0, 300)}`);
  } finally {
    await client.close();
  }
}

async function exportedRows(): Promise<Json[]> {
  const lines: string[] = [];
  await ledgerExport({ store: gateway.store, config: gateway.config, out: (line) => lines.push(line), logger: createLogger('silent') }, { format: 'jsonl' });
  return lines.filter((line) => !line.startsWith('{"trailer":')).map((line) => JSON.parse(line) as Json);
}

t.test('an x402 payment at servers.b is exported as b/<tool>, like a credit spend at b; one at the default endpoint stays bare', async (t) => {
  await payByX402(endpointB, { url: 'https://example.com/at-b' });
  await payByX402(gateway.url, { url: 'https://example.com/at-default' });
  const handle = await fundedHandle({ url: endpointB });
  const spent = await rawToolCall({ url: endpointB }, 'fetch_readable', { url: 'https://example.com/credits-at-b', tollboothToken: handle });
  t.not(spent.result?.isError, true, 'a credit spend at b');

  const rows = await exportedRows();
  const x402 = rows.filter((row) => row.kind === 'x402_settle');
  t.equal(x402.length, 2, 'both x402 payments are in the ledger');
  t.same(x402.map((row) => row.tool).sort(), ['b/fetch_readable', 'fetch_readable'], 'named by endpoint');
  t.match(rows.find((row) => row.kind === 'spend'), { tool: 'b/fetch_readable' }, 'the same name a credit spend at b carries');
});
