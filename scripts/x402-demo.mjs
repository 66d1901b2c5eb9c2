#!/usr/bin/env node
// The README's x402 demo (docs/reference/wire.md, "x402"): both rails of one challenge, end to end, on this machine alone.
//   node --import tsx scripts/x402-demo.mjs
// It starts, in this process: the fake x402 facilitator the tests use (test/helpers/x402-facilitator.ts:
// real HTTP, real EIP-712 signature checks, a made-up transaction hash instead of a chain), a stand-in
// MCP server (test/helpers/paid-upstream.ts: its fetch_readable answers `ok:<arguments>`, no network
// needed), and a gateway with `payments.x402` on (Base Sepolia USDC, memory store, dev checkout).
// Then a real MCP client (the official SDK) meets the challenge and pays it twice: once as an agent
// with a wallet (a throwaway key signing through @x402/core and @x402/evm), once through the checkout
// link like a human payer. Nothing leaves the machine; no real money moves.
import { Writable } from 'node:stream';
import { createServer } from 'node:net';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { x402Client } from '@x402/core/client';
import { registerExactEvmScheme } from '@x402/evm/exact/client';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { configSchema } from '../src/config/schema.ts';
import { createLogger } from '../src/observability/logger.ts';
import { runGateway } from '../src/start.ts';
import { startPaidUpstream } from '../test/helpers/paid-upstream.ts';
import { startFakeFacilitator } from '../test/helpers/x402-facilitator.ts';

const freePort = () =>
  new Promise((resolve) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });

const facilitator = await startFakeFacilitator();
const upstream = await startPaidUpstream('stateless-json');
const port = await freePort();
const logLines = [];
const logger = createLogger('info', new Writable({ write: (chunk, _encoding, done) => (logLines.push(...chunk.toString().split('\n').filter(Boolean)), done()) }));
const config = configSchema.parse({
  server: { host: '127.0.0.1', port },
  upstream: { url: upstream.url },
  store: { type: 'memory' },
  payments: {
    provider: 'dev',
    x402: {
      facilitatorUrl: facilitator.url,
      network: 'eip155:84532', // Base Sepolia
      asset: '0x036CbD53842c5426634e7929541eC2318f3dCF7e', // its USDC (EIP-712 domain from @x402/evm's table)
      assetDecimals: 6,
      currency: 'USDC',
      payTo: '0x209693Bc6afc0C5328bA36FaF03C514EF312287C',
    },
  },
  skus: { research: { label: 'Research tools', amount: '5.00', currency: 'USDC', credits: 250 } },
  tools: { fetch_readable: { sku: 'research', cost: 1 } },
});
const gateway = await runGateway(config, { logger });

const client = new Client({ name: 'x402-demo', version: '1.0.0' });
await client.connect(new StreamableHTTPClientTransport(new URL(gateway.url)));
const args = { url: 'https://example.com/' };
const indent = (text) => text.replace(/^/gm, '   | ');

console.log(`gateway ${gateway.url}, x402 facilitator ${facilitator.url}\n`);
console.log(`1. fetch_readable(${JSON.stringify(args)}), unpaid. The challenge offers both rails:`);
const challenge = await client.callTool({ name: 'fetch_readable', arguments: args });
console.log('   content[0], for people and LLM hosts (the checkout link):');
console.log(indent(challenge.content[0].text.split('\n').slice(0, 9).join('\n')));
const paymentRequired = challenge._meta['x402/payment-required'];
console.log('   _meta["x402/payment-required"] (also content[1] and structuredContent), for agents with a wallet:');
console.log(indent(JSON.stringify(paymentRequired, null, 1).replace(/\n\s*/g, ' ')));

console.log('\n2. Rail one, x402: a throwaway wallet signs the requirements and retries with _meta["x402/payment"]:');
const account = privateKeyToAccount(generatePrivateKey());
const wallet = new x402Client();
registerExactEvmScheme(wallet, { signer: account });
const payment = await wallet.createPaymentPayload(paymentRequired);
const paid = await client.callTool({ name: 'fetch_readable', arguments: args, _meta: { 'x402/payment': payment } });
console.log(indent(paid.content[0].text));
console.log(`   _meta["x402/payment-response"]: ${JSON.stringify(paid._meta['x402/payment-response'])}`);
console.log(`   receipt: ${JSON.stringify(paid._meta['xyz.tollbooth/receipt'] ?? null)} (no handle, no credits)`);

console.log('\n3. The same payment again:');
const replay = await client.callTool({ name: 'fetch_readable', arguments: args, _meta: { 'x402/payment': payment } });
console.log(indent(replay.content[0].text));
console.log(`   _meta["xyz.tollbooth/refusal"]: ${JSON.stringify(replay._meta['xyz.tollbooth/refusal'])}`);

console.log('\n4. Rail two, the checkout link: a person pays it (here: the dev checkout\'s Pay button), the agent retries with the handle:');
const link = challenge._meta['xyz.tollbooth/challenge'];
const pay = await fetch(`${link.checkoutUrl}/pay`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: '', redirect: 'manual' });
console.log(`   POST ${new URL(link.checkoutUrl).pathname.replace(/[^/]+$/, '…')}/pay → HTTP ${pay.status}`);
const withHandle = await client.callTool({ name: 'fetch_readable', arguments: { ...args, [link.retry.argument]: link.retry.value } });
console.log(indent(withHandle.content[0].text));
console.log(`   receipt: ${JSON.stringify(withHandle._meta['xyz.tollbooth/receipt'])}`);

console.log(`\nThe tool ran ${upstream.callsOf('fetch_readable').length} times; the facilitator verified ${facilitator.calls.verify} and settled ${facilitator.calls.settle} payment(s).`);
console.log('The gateway\'s call log lines (evt:"call"):');
for (const line of logLines.map((l) => JSON.parse(l)).filter((l) => l.evt === 'call')) {
  const { tool, outcome, rail, cost, settled, payer, amount, tokenFingerprint } = line;
  console.log(`   ${JSON.stringify({ tool, rail, outcome, cost, ...(rail === 'x402' ? { payer, amount, settled } : { tokenFingerprint }) })}`);
}

await client.close();
await gateway.close();
await upstream.close();
await facilitator.close();
