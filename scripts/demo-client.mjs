#!/usr/bin/env node
// The README's demo: a real MCP client (official SDK) that meets the paywall the way an agent would.
//   node scripts/demo-client.mjs [--url http://127.0.0.1:8080/mcp] [--tool fetch_readable] [--arg url=https://example.com/] [--pay] (--help)
// Without --pay it prints the checkout link and waits for you to pay in a browser, then press Enter.
// With --pay it pays the dev checkout itself (POST {link}/pay), for scripted demos and tests.
import { createInterface } from 'node:readline/promises';
import { parseArgs } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const USAGE = `usage: node scripts/demo-client.mjs [--url URL] [--tool NAME] [--arg KEY=VALUE]... [--pay]

A real MCP client (the official SDK) meeting the paywall as an agent would: tools/list, a priced call
without a handle (the challenge), payment, and the retry with the handle.

  --url URL         the gateway's MCP endpoint (default http://127.0.0.1:8080/mcp; with
                    npm start -- --port N use http://127.0.0.1:N/mcp, a servers entry its path)
  --tool NAME       the tool to call (default fetch_readable)
  --arg KEY=VALUE   an argument of the call, repeatable (default url=https://example.com/)
  --pay             pay the dev checkout itself instead of waiting for you to pay in a browser
  -h, --help        this help
`;

let values;
try {
  ({ values } = parseArgs({
    options: {
      url: { type: 'string', default: 'http://127.0.0.1:8080/mcp' },
      tool: { type: 'string', default: 'fetch_readable' },
      arg: { type: 'string', multiple: true, default: ['url=https://example.com/'] },
      pay: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
  }));
} catch (error) {
  process.stderr.write(`demo-client: ${error.message}\n\n${USAGE}`);
  process.exit(2);
}
if (values.help) {
  process.stdout.write(USAGE);
  process.exit(0);
}
const args = Object.fromEntries(values.arg.map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)]));
const textOf = (result) => result.content?.filter((c) => c.type === 'text').map((c) => c.text).join('\n') ?? '';

const client = new Client({ name: 'tollbooth-demo', version: '1.0.0' });
try {
  await client.connect(new StreamableHTTPClientTransport(new URL(values.url)));
} catch (error) {
  // A gateway that is not there fails as a bare "fetch failed": say what to check instead.
  const cause = error?.cause?.code ?? error?.cause?.cause?.code ?? error?.code;
  process.stderr.write(`demo-client: cannot reach ${values.url}${cause ? ` (${cause})` : ''}: is the gateway running on ${values.url}? Start it with npm start (another port: npm start -- --port N, then --url http://127.0.0.1:N/mcp).\n`);
  process.exit(1);
}
const { tools } = await client.listTools();
console.log('tools/list:');
for (const tool of tools) {
  const price = tool._meta?.['xyz.tollbooth/price'];
  console.log(`  ${tool.name}${price ? `  — ${price.cost} credit(s) from "${price.label}" (${price.amount} ${price.currency} / ${price.credits} credits)` : '  — free'}`);
}

console.log(`\n1. ${values.tool}(${JSON.stringify(args)}) without a handle:`);
const first = await client.callTool({ name: values.tool, arguments: args });
console.log(textOf(first).replace(/^/gm, '   | '));
const challenge = first._meta?.['xyz.tollbooth/challenge'];
if (!challenge) {
  console.log('\nNo challenge: this tool is free.');
  await client.close();
  process.exit(0);
}

if (values.pay) {
  const res = await fetch(`${challenge.checkoutUrl}/pay`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: '', redirect: 'manual' });
  console.log(`\n2. Paid the dev checkout (HTTP ${res.status}).`);
} else {
  console.log(`\n2. Open ${challenge.checkoutUrl} in a browser, press Pay, then come back here.`);
  const prompt = createInterface({ input: process.stdin, output: process.stdout });
  await prompt.question('   Press Enter once you have paid… ');
  prompt.close();
}

console.log(`\n3. Retry: same tool, same arguments, plus ${challenge.retry.argument}="${challenge.retry.value.slice(0, 9)}…":`);
const paid = await client.callTool({ name: values.tool, arguments: { ...args, [challenge.retry.argument]: challenge.retry.value } });
console.log(textOf(paid).slice(0, 600).replace(/^/gm, '   | '));
console.log(`   receipt: ${JSON.stringify(paid._meta?.['xyz.tollbooth/receipt'] ?? null)}${paid.isError ? '  (the tool failed, so no credit was spent)' : ''}`);
await client.close();
