// Issue 4's demo, end to end: `npm start`'s own config (memory store, dev checkout, the research
// server as a stdio child), a real SDK client, the checkout page in headless Chromium, the retry.
import { readFileSync, existsSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { parse } from 'yaml';
import { chromium } from 'playwright-core';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { ConfigInput } from '../../src/config/schema.js';
import { startTestGateway } from '../helpers/gateway.js';
import { skipUnlessInstalled } from '../helpers/required-tool.js';

const CHROMIUM = '/usr/bin/chromium';
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];

t.test('the default config: challenge, pay on the checkout page in Chromium, the retry reaches the research server', { skip: skipUnlessInstalled(t, !existsSync(CHROMIUM) ? 'no /usr/bin/chromium (install Debian chromium)' : false) }, async (t) => {
  t.ok(existsSync('dist/research/stdio.js'), 'the build holds the research server the default config runs');
  delete process.env.NODE_OPTIONS; // tap's hooks would load into the research child and slow it down
  const shipped = parse(readFileSync('config/tollbooth.yaml', 'utf8')) as ConfigInput;
  // No internet here: the research child gets RESEARCH_OFFLINE_ORIGIN, so a public URL it fetches is
  // dialled to this local page (its SSRF guard still refuses loopback and private URLs, below).
  const page = createServer((_request, response) => {
    response.writeHead(200, { 'content-type': 'text/html' });
    response.end('<html><head><title>Offline example</title></head><body><p>A page read by a paid call.</p></body></html>');
  });
  await new Promise<void>((resolve) => page.listen(0, '127.0.0.1', resolve));
  t.teardown(() => page.close());
  const upstream = { ...shipped.upstream, env: { RESEARCH_OFFLINE_ORIGIN: `127.0.0.1:${(page.address() as AddressInfo).port}` } } as ConfigInput['upstream'];
  // Port 0: the gateway binds a free port and its public URL names it.
  const gateway = await startTestGateway(t, { ...shipped, upstream, server: { ...shipped.server, port: 0, publicUrl: 'http://127.0.0.1:0/mcp' } }, { configPath: 'config/tollbooth.yaml' });

  const client = new Client({ name: 'demo-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(gateway.url)));
  t.teardown(() => client.close());
  const { tools } = await client.listTools();
  t.same(tools.map((tool) => tool.name).sort(), ['extract_tables', 'fetch_readable', 'inspect_domain'], 'the research tools');
  t.ok(tools.every((tool) => tool.inputSchema.properties?.tollboothToken), 'each is priced and takes tollboothToken');

  // 127.0.0.1 is refused by the research server's own SSRF guard: proof that the paid retry ran the
  // real tool, with no internet needed.
  const args = { url: 'http://127.0.0.1/' };
  const first = await client.callTool({ name: 'fetch_readable', arguments: args });
  const challenge = (first._meta as Record<string, { checkoutUrl: string; retry: { value: string }; credits: number }>)['xyz.tollbooth/challenge'];
  t.equal(first.isError, true, 'the first call is a challenge');
  t.equal(challenge?.credits, 250, 'the shipped research SKU: 250 credits');

  const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
  t.teardown(() => browser.close());
  const checkout = await browser.newPage();
  await checkout.goto(challenge!.checkoutUrl);
  t.match(await checkout.textContent('main'), /Research tools[\s\S]*5\.00 USDC[\s\S]*250/, 'the page shows label, amount and credits');
  await checkout.getByRole('button', { name: /Pay/ }).click();
  await checkout.waitForSelector('#status');
  t.match(await checkout.textContent('#status'), /Paid/, 'the page confirms the payment');

  const retry = await client.callTool({ name: 'fetch_readable', arguments: { ...args, tollboothToken: challenge!.retry.value } });
  const text = (retry.content as { type: string; text: string }[])[0]?.text ?? '';
  t.notMatch(text, /PAYMENT_REQUIRED/, 'the retry is not challenged');
  t.match(text, /Refused/, "the research server's own answer (its SSRF guard refused loopback)");
  t.equal(retry.isError, true, 'the tool reported an error…');

  const ok = await client.callTool({ name: 'extract_tables', arguments: { url: 'http://10.0.0.1/', tollboothToken: challenge!.retry.value } });
  t.notMatch((ok.content as { text: string }[])[0]?.text ?? '', /PAYMENT_REQUIRED/, 'the same handle pays for every tool of the SKU');
  const state = await gateway.store.getHandle((await import('../../src/paywall/handles.js')).hashHandle(challenge!.retry.value, ''));
  t.equal(state?.balances.research, 250, '…so with charge: success no credit was spent');

  // A call that succeeds: the page is read, the credit is spent, the receipt says what is left.
  const paid = await client.callTool({ name: 'fetch_readable', arguments: { url: 'http://example.com/', tollboothToken: challenge!.retry.value } });
  t.notOk(paid.isError, 'the paid call succeeded');
  t.match((paid.content as { text: string }[])[0]?.text ?? '', /# Offline example[\s\S]*A page read by a paid call/, 'the research server read the page');
  t.same((paid._meta as Record<string, unknown>)['xyz.tollbooth/receipt'], { sku: 'research', cost: 1, remaining: 249 }, 'its receipt');
  const after = await gateway.store.getHandle((await import('../../src/paywall/handles.js')).hashHandle(challenge!.retry.value, ''));
  t.equal(after?.balances.research, 249, 'one credit spent');
});
