// The dev provider (SPEC §7.3): links in the store (any replica reads them), checkout URLs on the
// publicUrl origin, and its checkout page / pay action served by the gateway.
import t, { type Test } from 'tap';
import { DevProvider } from '../../src/payments/dev.js';
import { ProviderError } from '../../src/payments/provider.js';
import { MemoryStore } from '../../src/store/memory.js';
import { startPaidUpstream, type PaidUpstream } from '../helpers/paid-upstream.js';
import { startTestGateway, testConfig, type TestGateway } from '../helpers/gateway.js';

type Json = Record<string, any>;

function devRig(publicUrl = 'https://gw.example.com:8443/base/mcp') {
  const clock = { now: Date.UTC(2030, 0, 1) };
  const store = new MemoryStore({ now: () => clock.now });
  const provider = new DevProvider({ store, publicUrl, now: () => clock.now });
  const open = () => provider.openCharge({ nonce: 'n', sku: 'research', amount: '5.00', currency: 'USDC', label: 'Research tools', credits: 3, tool: 't', expiresAt: clock.now + 60_000 });
  return { clock, store, provider, open };
}

t.test('checkout URLs live on the publicUrl origin under /tollbooth/checkout/', async (t) => {
  const { open, store } = devRig();
  t.teardown(() => store.close());
  const link = await open();
  t.equal(link.checkoutUrl, `https://gw.example.com:8443/tollbooth/checkout/${link.providerRef}`);
  t.match(link.providerRef, /^[A-Za-z0-9_-]{16}$/);
  t.not((await open()).providerRef, link.providerRef, 'every link has its own id');
});

t.test('readCharge: active, then completed with the received amount after payment', async (t) => {
  const { open, store, provider } = devRig();
  t.teardown(() => store.close());
  const link = await open();
  t.same(await provider.readCharge(link.providerRef), { status: 'active', receivedAmount: null });
  t.equal(await store.payDevLink(link.providerRef, '2.50'), true);
  t.same(await provider.readCharge(link.providerRef), { status: 'completed', receivedAmount: '2.50' });
  t.equal(await store.payDevLink(link.providerRef, '5.00'), false, 'a completed link cannot be paid again');
});

t.test('readCharge: a link past its expiry reads as expired', async (t) => {
  const { open, store, provider, clock } = devRig();
  t.teardown(() => store.close());
  const link = await open();
  clock.now += 60_000;
  t.same(await provider.readCharge(link.providerRef), { status: 'expired', receivedAmount: null });
});

t.test('readCharge: an unknown link is a typed not_found provider error', async (t) => {
  const { store, provider } = devRig();
  t.teardown(() => store.close());
  const error = await provider.readCharge('nope').catch((e: unknown) => e);
  t.ok(error instanceof ProviderError);
  t.match(error, { kind: 'not_found', retryable: false, code: 'TB_ERR_PROVIDER' });
});

t.test('a second provider on the same store reads the first one\'s links (replicas)', async (t) => {
  const { open, store, clock } = devRig();
  t.teardown(() => store.close());
  const other = new DevProvider({ store, publicUrl: 'http://127.0.0.1:1/mcp', now: () => clock.now });
  const link = await open();
  await store.payDevLink(link.providerRef, '5.00');
  t.same(await other.readCharge(link.providerRef), { status: 'completed', receivedAmount: '5.00' });
});

// --- the checkout page, served by a real gateway ---

let upstream: PaidUpstream;
let gateway: TestGateway;
t.before(async () => {
  upstream = await startPaidUpstream('stateless-json');
});
t.teardown(() => upstream.close());

async function challenge(gw: TestGateway): Promise<Json> {
  const response = await fetch(gw.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'fetch_readable', arguments: { url: 'x' } } }),
  });
  return ((await response.json()) as Json).result._meta['xyz.tollbooth/challenge'];
}

t.test('the checkout page shows label, amount and credits, escaped, and is not cached', async (t) => {
  gateway = await startTestGateway(t, testConfig(upstream.url, { skus: { research: { label: 'Research <b>& "tools"</b>', amount: '5.00', currency: 'USDC', credits: 3 } } }));
  const c = await challenge(gateway);
  const page = await fetch(c.checkoutUrl);
  t.equal(page.status, 200);
  t.match(page.headers.get('content-type'), /^text\/html/);
  t.equal(page.headers.get('cache-control'), 'no-store');
  t.equal(page.headers.get('referrer-policy'), 'same-origin', 'the link id never reaches another site through Referer');
  const html = await page.text();
  t.match(html, 'Research &lt;b&gt;&amp; &quot;tools&quot;&lt;/b&gt;');
  t.notMatch(html, '<b>&', 'the label is not injected as HTML');
  t.match(html, /<dd id="amount">5\.00 USDC<\/dd>/);
  t.match(html, /<dd id="credits">3<\/dd>/);
  t.match(html, /<label for="received">/);
  t.match(html, /<html lang="en">/);
});

t.test('pay: 303 back to the page, which then says paid; a second payment is 409', async (t) => {
  gateway = await startTestGateway(t, testConfig(upstream.url));
  const c = await challenge(gateway);
  const pay = await fetch(`${c.checkoutUrl}/pay`, { method: 'POST', redirect: 'manual' });
  t.equal(pay.status, 303);
  t.equal(pay.headers.get('location'), new URL(c.checkoutUrl).pathname);
  t.match(await (await fetch(c.checkoutUrl)).text(), /Paid\./);
  const again = await fetch(`${c.checkoutUrl}/pay`, { method: 'POST', redirect: 'manual' });
  t.equal(again.status, 409);
  t.same(await again.json(), { error: 'this checkout link is no longer payable' });
});

t.test('pay settles at once: the store already holds the credits before any retry', async (t) => {
  gateway = await startTestGateway(t, testConfig(upstream.url));
  const c = await challenge(gateway);
  await fetch(`${c.checkoutUrl}/pay`, { method: 'POST', redirect: 'manual' });
  const settled = await gateway.store.listCharges('settled');
  t.equal(settled.length, 1);
  t.equal(settled[0]!.grantedCredits, 3);
});

t.test('pay with a malformed amount is 400 and changes nothing', async (t) => {
  gateway = await startTestGateway(t, testConfig(upstream.url));
  const c = await challenge(gateway);
  for (const received of ['abc', '-1', '1e3', '5.0000001', '.5']) {
    const response = await fetch(`${c.checkoutUrl}/pay`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: `received=${encodeURIComponent(received)}`, redirect: 'manual' });
    t.equal(response.status, 400, received);
  }
  t.equal((await gateway.store.listCharges('pending')).length, 1, 'still pending');
});

t.test('unknown checkout ids: 404 page and 404 JSON on pay, nothing reflected', async (t) => {
  gateway = await startTestGateway(t, testConfig(upstream.url));
  const page = await fetch(`${gateway.origin}/tollbooth/checkout/%3Cscript%3Ex`);
  t.equal(page.status, 404);
  t.notMatch(await page.text(), '<script>');
  const pay = await fetch(`${gateway.origin}/tollbooth/checkout/nope/pay`, { method: 'POST', redirect: 'manual' });
  t.equal(pay.status, 404);
  t.match(pay.headers.get('content-type'), /json/);
});

// --- SPEC §20: the pay action only takes posts from the gateway's own origin; nothing may frame the page ---

const FRAME_HEADERS = { 'content-security-policy': "frame-ancestors 'none'", 'x-frame-options': 'DENY' };
function noFraming(t: Test, response: Response, what: string): void {
  for (const [name, value] of Object.entries(FRAME_HEADERS)) t.equal(response.headers.get(name), value, `${what}: ${name}`);
}

t.test('pay from another Origin is 403 JSON and pays nothing; the page still offers the Pay button', async (t) => {
  gateway = await startTestGateway(t, testConfig(upstream.url));
  const c = await challenge(gateway);
  for (const origin of ['https://evil.example', 'null', `${gateway.origin}.evil.example`, 'http://localhost:1', gateway.origin.replace('http:', 'https:')]) {
    const response = await fetch(`${c.checkoutUrl}/pay`, {
      method: 'POST',
      headers: { origin, 'content-type': 'application/x-www-form-urlencoded' },
      body: 'received=5.00',
      redirect: 'manual',
    });
    t.equal(response.status, 403, `Origin ${origin}`);
    t.match(response.headers.get('content-type'), /^application\/json/);
    t.same(await response.json(), { error: 'payments are only accepted from the checkout page itself' });
  }
  t.equal((await gateway.store.listCharges('pending')).length, 1, 'the charge is still pending');
  t.equal((await gateway.store.listCharges('settled')).length, 0, 'nothing settled');
  t.match(await (await fetch(c.checkoutUrl)).text(), /<button type="submit" id="pay">/, 'the link is still payable');
});

t.test("pay from publicUrl's own origin is accepted; a post without Origin (not a browser) too", async (t) => {
  gateway = await startTestGateway(t, testConfig(upstream.url));
  const same = await challenge(gateway);
  const fromPage = await fetch(`${same.checkoutUrl}/pay`, { method: 'POST', headers: { origin: gateway.origin }, redirect: 'manual' });
  t.equal(fromPage.status, 303, 'same origin');
  const other = await challenge(gateway);
  const noOrigin = await fetch(`${other.checkoutUrl}/pay`, { method: 'POST', redirect: 'manual' });
  t.equal(noOrigin.status, 303, 'no Origin header');
});

t.test("the page and every pay answer are served with frame-ancestors 'none' and X-Frame-Options DENY", async (t) => {
  gateway = await startTestGateway(t, testConfig(upstream.url));
  const c = await challenge(gateway);
  noFraming(t, await fetch(c.checkoutUrl), 'page');
  noFraming(t, await fetch(`${gateway.origin}/tollbooth/checkout/nope`), 'not-found page');
  noFraming(t, await fetch(`${c.checkoutUrl}/pay`, { method: 'POST', headers: { origin: 'https://evil.example' }, redirect: 'manual' }), '403');
  noFraming(t, await fetch(`${c.checkoutUrl}/pay`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'received=abc', redirect: 'manual' }), '400');
  noFraming(t, await fetch(`${c.checkoutUrl}/pay`, { method: 'POST', redirect: 'manual' }), '303');
  noFraming(t, await fetch(`${c.checkoutUrl}/pay`, { method: 'POST', redirect: 'manual' }), '409');
  noFraming(t, await fetch(`${gateway.origin}/tollbooth/checkout/nope/pay`, { method: 'POST', redirect: 'manual' }), '404');
});
