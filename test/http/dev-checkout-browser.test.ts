// The dev checkout page in a real headless Chromium (SPEC §7.3, §15): the payer opens the challenge's
// link, sees label, amount and credits, finds the controls by their accessible names, pays, and the
// agent's retry then runs. The amount field drives underpayment: 0.40 of 5.00 → underpaid (new link),
// 2.50 → pro rata 1 credit of 3 (partial); the page then says what was received, what was granted, what
// is still due and how to pay it, while the agent's challenge text stays the template.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import t, { type Test } from 'tap';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { startPaidUpstream, type PaidUpstream } from '../helpers/paid-upstream.js';
import { startTestGateway, testConfig } from '../helpers/gateway.js';

type Json = Record<string, any>;

let browser: Browser;
// One context for the file: contexts are the expensive part on a loaded machine; each test opens its own pages.
let context: BrowserContext;
let upstream: PaidUpstream;
t.before(async () => {
  upstream = await startPaidUpstream('stateless-json');
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  context = await browser.newContext();
});
t.teardown(async () => {
  await browser?.close();
  await upstream?.close();
});

async function agent(t: Test): Promise<{ call: (args: Json) => Promise<Json>; metrics: () => Promise<string> }> {
  const gateway = await startTestGateway(t, testConfig(upstream.url));
  const client = new Client({ name: 'browser-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(gateway.url)));
  t.teardown(() => client.close());
  return {
    call: async (args) => (client.callTool({ name: 'fetch_readable', arguments: args })),
    metrics: async () => (await gateway.gateway.app.inject({ method: 'GET', url: '/metrics' })).body,
  };
}

const challengeOf = (result: Json): Json => result._meta['xyz.tollbooth/challenge'] as Json;

async function openPage(t: Test, url: string): Promise<Page> {
  const page = await context.newPage();
  t.teardown(() => page.close());
  const response = await page.goto(url);
  t.equal(response?.status(), 200, 'the checkout page loads');
  return page;
}

/** Pays on the page, optionally typing an amount first, and waits for the paid confirmation. */
async function payOnPage(page: Page, received?: string): Promise<void> {
  if (received !== undefined) await page.getByLabel(/Amount to send/).fill(received);
  await Promise.all([page.waitForURL((url) => !url.pathname.endsWith('/pay')), page.getByRole('button', { name: /^Pay / }).click()]);
  await page.getByRole('status').waitFor();
}

t.test('the payer sees label, amount and credits, pays with the labelled button, and the retry runs', async (t) => {
  const { call } = await agent(t);
  const challenge = challengeOf(await call({ url: 'https://example.com/browser' }));
  const page = await openPage(t, challenge.checkoutUrl);

  t.equal(await page.title(), 'Pay 5.00 USDC · Tollbooth checkout');
  t.equal(await page.getByRole('heading', { level: 1 }).textContent(), 'Pay 5.00 USDC');
  t.ok(await page.locator('#label').isVisible());
  t.equal(await page.locator('#label').textContent(), 'Research tools');
  t.equal(await page.locator('#amount').textContent(), '5.00 USDC');
  t.equal(await page.locator('#credits').textContent(), '3');

  // Accessibility: the amount input has a label, the button an accessible name, and both take focus.
  const input = page.getByLabel(/Amount to send \(USDC\)/);
  t.equal(await input.count(), 1, 'the input is labelled');
  t.equal(await input.inputValue(), '5.00', 'prefilled with the full price');
  const button = page.getByRole('button', { name: 'Pay 5.00 USDC' });
  t.equal(await button.count(), 1, 'the button has an accessible name');
  await page.keyboard.press('Tab');
  t.equal(await page.evaluate(() => (globalThis as unknown as { document: { activeElement: { id: string } | null } }).document.activeElement?.id), 'received', 'the input is reachable by keyboard');
  await page.keyboard.press('Tab');
  t.equal(await page.evaluate(() => (globalThis as unknown as { document: { activeElement: { id: string } | null } }).document.activeElement?.id), 'pay', 'then the button');

  await payOnPage(page);
  t.match(await page.getByRole('status').textContent(), /Paid\./);
  t.equal(await page.getByRole('button', { name: /^Pay / }).count(), 0, 'no Pay button on a paid link');

  const retry = await call({ url: 'https://example.com/browser', tollboothToken: challenge.retry.value });
  t.not(retry.isError, true, 'the agent retry succeeds');
  t.same(retry._meta['xyz.tollbooth/receipt'], { sku: 'research', cost: 1, remaining: 2 });
});

t.test('underpaying 0.40 of 5.00 → underpaid with a new link; paying 2.50 there → 1 credit (partial)', async (t) => {
  const { call, metrics } = await agent(t);
  const firstResult = await call({ url: 'u' });
  const first = challengeOf(firstResult);
  const token = first.retry.value;

  const page = await openPage(t, first.checkoutUrl);
  await payOnPage(page, '0.40');
  // The payer is told what arrived, what it bought and what is still due, and how to pay it.
  t.equal(await page.getByRole('status').textContent(), 'Underpaid: 0.40 USDC of 5.00 USDC arrived, too little for any credits.');
  t.equal(await page.locator('#received-amount').textContent(), '0.40 USDC', 'what was received');
  t.equal(await page.locator('#granted').textContent(), 'none', 'what was granted');
  t.equal(await page.locator('#due').textContent(), '5.00 USDC for 3 credits', 'what is still due');
  t.match(await page.locator('#next').textContent(), /return to your assistant and tell it you have paid: it will show a new checkout link for 5\.00 USDC/, 'how to pay it');
  t.notMatch(await page.locator('main').textContent(), /Paid\./, 'no "Paid." for an underpayment');
  const underpaidResult = await call({ url: 'u', tollboothToken: token });
  const underpaid = challengeOf(underpaidResult);
  t.equal(underpaid.reason, 'underpaid', 'the reason stays in _meta');
  t.not(underpaid.checkoutUrl, first.checkoutUrl, 'a NEW link');
  t.equal(underpaid.retry.value, token, 'on the same handle');
  // The agent's text is the challenge template, word for word: only the link differs from a first challenge's.
  const textOf = (result: Json): string => (result.content as { text: string }[])[0]?.text ?? '';
  t.equal(textOf(underpaidResult), textOf(firstResult).replace(first.checkoutUrl, underpaid.checkoutUrl));
  t.notMatch(textOf(underpaidResult), /underpaid/i, 'the reason is not in the text');

  const second = await openPage(t, underpaid.checkoutUrl);
  await payOnPage(second, '2.50');
  t.equal(await second.getByRole('status').textContent(), 'Partly paid: 2.50 USDC of 5.00 USDC arrived, so 1 of 3 credits were granted.');
  t.equal(await second.locator('#received-amount').textContent(), '2.50 USDC');
  t.equal(await second.locator('#granted').textContent(), '1 of 3');
  t.equal(await second.locator('#due').textContent(), '2.50 USDC for the other 2 credits');
  t.match(await second.locator('#next').textContent(), /it can use the 1 credit now, and when it needs more it shows a new checkout link for a full pack \(5\.00 USDC, 3 credits\)/);
  const partial = await call({ url: 'u', tollboothToken: token });
  t.not(partial.isError, true);
  t.same(partial._meta['xyz.tollbooth/receipt'], { sku: 'research', cost: 1, remaining: 0 }, 'floor(3 × 2.50 / 5.00) = 1 credit');
  t.match(await metrics(), /tollbooth_settlements_total\{sku="research",result="partial"\} 1/);
  const exhausted = challengeOf(await call({ url: 'u', tollboothToken: token }));
  t.equal(exhausted.reason, 'credits_exhausted');
});

t.test('an unknown link id shows an accessible not-found page with no Pay button', async (t) => {
  const { call } = await agent(t);
  const challenge = challengeOf(await call({ url: 'u' }));
  const page = await context.newPage();
  t.teardown(() => page.close());
  // A link id that never existed renders the not-found page; an accessible heading is still there.
  const response = await page.goto(`${new URL(challenge.checkoutUrl).origin}/tollbooth/checkout/unknown-link`);
  t.equal(response?.status(), 404);
  t.equal(await page.getByRole('heading', { level: 1 }).textContent(), 'Checkout not found');
  t.equal(await page.getByRole('button').count(), 0);
});

// SPEC §20: a page on another origin can neither submit the pay form nor frame the checkout page.
t.test('a page on another origin that posts the pay form, or frames the checkout page, pays nothing', async (t) => {
  const gateway = await startTestGateway(t, testConfig(upstream.url));
  const client = new Client({ name: 'browser-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(gateway.url)));
  t.teardown(() => client.close());
  const challenge = challengeOf((await client.callTool({ name: 'fetch_readable', arguments: { url: 'csrf' } })));
  const payUrl = `${challenge.checkoutUrl}/pay`;

  // The attacker's site: another port on the same host is another origin.
  const attacker = createServer((request, response) => {
    response.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    if (request.url === '/frame') return void response.end(`<!doctype html><title>frame</title><iframe id="victim" src="${challenge.checkoutUrl}"></iframe>`);
    response.end(`<!doctype html><title>win a prize</title><form id="f" method="post" action="${payUrl}"><input name="received" value="5.00"></form><script>document.getElementById('f').submit()</script>`);
  });
  await new Promise<void>((resolve) => attacker.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => attacker.close(() => resolve())));
  const attackerOrigin = `http://127.0.0.1:${(attacker.address() as AddressInfo).port}`;
  t.not(attackerOrigin, gateway.origin);

  const page = await context.newPage();
  t.teardown(() => page.close());
  const payResponse = page.waitForResponse((response) => response.url() === payUrl);
  await page.goto(`${attackerOrigin}/post`);
  const refused = await payResponse;
  t.equal(refused.status(), 403, 'the cross-origin form post is refused');
  t.equal(refused.request().headers().origin, attackerOrigin, 'the browser sent its Origin');
  t.equal((await gateway.gateway.app.inject({ method: 'GET', url: '/metrics' })).body.match(/tollbooth_settlements_total\{[^}]*\} [1-9]/), null, 'nothing settled');

  const framedResponse = page.waitForResponse((response) => response.url() === challenge.checkoutUrl);
  await page.goto(`${attackerOrigin}/frame`);
  const frameResponse = await framedResponse;
  t.equal(frameResponse.headers()['x-frame-options'], 'DENY');
  await page.waitForTimeout(300);
  const framed = page.frames().find((frame) => frame !== page.mainFrame());
  const buttons = framed ? await framed.locator('#pay').count().catch(() => 0) : 0;
  t.equal(buttons, 0, 'the framed checkout page is not rendered, so there is no Pay button to click');

  const retry = (await client.callTool({ name: 'fetch_readable', arguments: { url: 'csrf', tollboothToken: challenge.retry.value } })) as Json;
  t.ok(retry._meta?.['xyz.tollbooth/challenge'], 'the agent is still challenged: nothing was paid');
});
