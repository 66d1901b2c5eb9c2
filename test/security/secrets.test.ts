// Secrets never leak (SPEC §10): after a full paid flow with the dev provider, the same behind OAuth,
// and a Moove flow against the local fake (provider failures included), every log line, the /metrics
// output and every error body is scanned for each handle, bearer token, API key, webhook secret,
// checkout URL and link id the flows produced. Challenges are the one place a handle and its link
// are meant to appear, so they are collected as secrets, not scanned.
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { startPaidUpstream, type PaidUpstream } from '../helpers/paid-upstream.js';
import { startTestGateway, testConfig, type TestGateway } from '../helpers/gateway.js';
import { wallClock } from '../helpers/clock.js';
import { startTestIssuer } from '../helpers/jwks-issuer.js';
import { startOidcIssuer } from '../helpers/oidc-issuer.js';
import { sendWebhook, startMooveFake } from '../helpers/moove-fake.js';

type Tap = Parameters<typeof startTestGateway>[0];

const marker = (label: string) => `${label}-SECRET-${randomBytes(8).toString('hex')}`;

/** What one flow produced: the secrets it saw and every body the gateway answered that is not a challenge. */
class Flow {
  readonly secrets = new Map<string, string>();
  readonly errorBodies: string[] = [];
  constructor(readonly gateway: TestGateway) {}

  secret(kind: string, value: string): void {
    this.secrets.set(value, kind);
  }

  async post(body: string | Record<string, unknown>, headers: Record<string, string> = {}): Promise<Record<string, any>> {
    const response = await fetch(this.gateway.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });
    const text = await response.text();
    const parsed = JSON.parse(text) as Record<string, any>;
    const challenge = parsed.result?._meta?.['xyz.tollbooth/challenge'] as { checkoutUrl: string; retry: { value: string } } | undefined;
    if (challenge) {
      this.secret('handle', challenge.retry.value);
      this.secret('checkout URL', challenge.checkoutUrl);
      this.secret('link id', challenge.checkoutUrl.split('/').pop() as string);
    } else this.errorBodies.push(text);
    return parsed;
  }

  /** Every body that is neither a challenge nor a successful result counts as an error body; results are scanned too. */
  async scan(t: Tap): Promise<void> {
    const metrics = await (await fetch(`${this.gateway.origin}/metrics`)).text();
    const logs = this.gateway.logText();
    t.ok(this.secrets.size >= 4, `the flow produced ${this.secrets.size} secrets to look for`);
    t.ok(logs.includes('"evt":"call"'), 'the flow logged its calls (the scan is not of an empty log)');
    for (const [value, kind] of this.secrets) {
      t.notOk(logs.includes(value), `no ${kind} in the logs`);
      t.notOk(metrics.includes(value), `no ${kind} in /metrics`);
      t.notOk(this.errorBodies.some((body) => body.includes(value)), `no ${kind} in any error body`, { found: this.errorBodies.filter((b) => b.includes(value)).map((b) => b.slice(0, 300)) });
    }
  }
}

const call = (name: string, args: Record<string, unknown>, id = 1) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } });

async function payDev(checkoutUrl: string): Promise<void> {
  const response = await fetch(`${checkoutUrl}/pay`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: '', redirect: 'manual' });
  if (response.status !== 303) throw new Error(`pay failed: ${response.status}`);
}

/** The paid loop plus the gateway's own error answers, each carrying the handle somewhere in the request. */
async function paidFlow(flow: Flow, headers: Record<string, string> = {}): Promise<void> {
  const first = await flow.post(call('fetch_readable', { url: 'https://example.com/' }), headers);
  const challenge = first.result._meta['xyz.tollbooth/challenge'];
  await payDev(challenge.checkoutUrl);
  const handle = challenge.retry.value as string;
  const paid = await flow.post(call('fetch_readable', { url: 'https://example.com/', tollboothToken: handle }), headers);
  if (!paid.result?._meta?.['xyz.tollbooth/receipt']) throw new Error('the paid call did not run');
  await flow.post(call('failing', { tollboothToken: handle }), headers); // upstream isError: refunded
  await flow.post(call('throwing', { tollboothToken: handle }), headers); // upstream JSON-RPC error
  await flow.post(call('costly', { q: 'x', tollboothToken: handle }), headers); // exhausts the 3 credits
  await flow.post(call('costly', { q: 'x', tollboothToken: handle }), headers); // credits_exhausted challenge
  await flow.post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_readable","arguments":{"tollboothToken":"${handle}"}`, headers);
  await flow.post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fetch_readable","arguments":"${handle}"}}`, headers);
  const modern = { 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': handle };
  await flow.post({ ...call('fetch_readable', { tollboothToken: handle }), params: { name: 'fetch_readable', arguments: { tollboothToken: handle }, _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28' } } }, { ...headers, ...modern }); // -32020
  await flow.post(JSON.stringify(call('fetch_readable', { tollboothToken: handle, pad: 'x'.repeat(70 * 1024) })), headers); // 413
  await flow.post(JSON.stringify(call('fetch_readable', { tollboothToken: handle })), { ...headers, 'content-type': 'text/plain' }); // 415
  await flow.post(JSON.stringify(call('fetch_readable', { tollboothToken: `${handle}x` })), headers); // unknown_handle challenge
}

let upstream: PaidUpstream;
t.before(async () => {
  upstream = await startPaidUpstream('stateless-json');
});
t.teardown(() => upstream.close());

const limits = { bodyLimit: '64kb' } as const;

t.test('dev provider: a full paid flow leaks no handle, checkout URL or link id', async (t) => {
  const hashSecret = marker('hash');
  const upstreamCredential = marker('upstream-cred');
  const gateway = await startTestGateway(t, testConfig(upstream.url, {
    server: { host: '127.0.0.1', port: 0, ...limits },
    upstream: { url: upstream.url, headers: { 'x-api-key': upstreamCredential } },
    handles: { hashSecret },
  }));
  const flow = new Flow(gateway);
  flow.secret('handle hash secret', hashSecret);
  flow.secret('upstream credential', upstreamCredential);
  await paidFlow(flow);
  const missing = await fetch(`${gateway.origin}/tollbooth/checkout/${marker('guessed-link')}`);
  flow.errorBodies.push(await missing.text());
  await flow.scan(t);
});

t.test('OAuth: the paid flow and refused tokens leak no bearer token', async (t) => {
  // Valid tokens from a real OpenID Provider (test/helpers/oidc-issuer.ts); the forged ones (a key
  // outside its JWKS, alg none) from the hand-written issuer, since no real provider mints them.
  const issuer = await startOidcIssuer();
  t.teardown(() => issuer.close());
  const forger = await startTestIssuer();
  t.teardown(() => forger.close());
  // Port 0: the gateway binds a free port; the public URL (and the token audience) names the bound one.
  let publicUrl = 'http://127.0.0.1:0/mcp';
  let skewMs = 0; // the gateway's clock, moved to expire a token
  const gateway = await startTestGateway(t, testConfig(upstream.url, {
    server: { host: '127.0.0.1', port: 0, publicUrl, ...limits },
    auth: { mode: 'oauth', issuer: issuer.issuer, jwksUrl: issuer.jwksUri, authorizationServers: [issuer.issuer] },
  }), { clock: wallClock(() => Date.now() + skewMs) });
  publicUrl = gateway.config.server.publicUrl;
  const flow = new Flow(gateway);
  const tokenFor = (resource: string) => issuer.tokenFor({ clientId: 'mcp-client', sub: 'alice', scope: 'mcp:use', resource });
  const token = await tokenFor(publicUrl);
  flow.secret('bearer token', token);
  await paidFlow(flow, { authorization: `Bearer ${token}` });
  const expiring = await tokenFor(publicUrl);
  const fresh = await flow.post(call('fetch_readable', {}), { authorization: `Bearer ${expiring}` });
  t.ok(fresh.result?._meta?.['xyz.tollbooth/challenge'], 'accepted while fresh: challenged, not refused (control)');
  const refused = [
    await tokenFor('https://elsewhere.example/'),
    await forger.mint({ iss: issuer.issuer, sub: 'alice', aud: publicUrl, alg: 'ES256', foreignKey: true }),
    forger.mintUnsigned({ iss: issuer.issuer, sub: 'alice', aud: publicUrl }),
    `${token.slice(0, -4)}AAAA`,
  ];
  // Past exp + 30 s on the gateway's clock: `expiring` (and `token`) are refused as expired from now on.
  skewMs = 331_000;
  flow.secret('refused bearer token', expiring);
  const expired = await flow.post(call('fetch_readable', {}), { authorization: `Bearer ${expiring}` });
  t.match(expired.error?.message, /expired/, 'refused as expired');
  for (const bad of refused) {
    flow.secret('refused bearer token', bad);
    await flow.post(call('fetch_readable', {}), { authorization: `Bearer ${bad}` });
  }
  await flow.post(call('fetch_readable', {}), { authorization: `Bearer ${token} ${token}` });
  await flow.scan(t);
  t.notOk(upstream.sawText(token), 'the upstream never received the token');
});

t.test('Moove: the paid flow and provider failures leak no API key, webhook secret, link id or checkout URL', async (t) => {
  const apiKey = marker('moove-key');
  const webhookSecret = marker('whsec');
  const fake = await startMooveFake({ apiKeys: [apiKey] });
  t.teardown(() => fake.close());
  const gateway = await startTestGateway(t, testConfig(upstream.url, {
    server: { host: '127.0.0.1', port: 0, ...limits },
    payments: { provider: 'moove', moove: { apiKey, baseUrl: fake.url, webhookSecret } },
  }));
  const flow = new Flow(gateway);
  flow.secret('API key', apiKey);
  flow.secret('webhook secret', webhookSecret);

  const first = await flow.post(call('fetch_readable', { url: 'https://example.com/' }));
  const challenge = first.result._meta['xyz.tollbooth/challenge'];
  const linkId = challenge.checkoutUrl.split('/').pop() as string;
  t.ok(fake.links.has(linkId), 'the checkout URL is the Moove link');
  await fake.pay(linkId, '5.00');
  const paid = await flow.post(call('fetch_readable', { url: 'https://example.com/', tollboothToken: challenge.retry.value }));
  t.ok(paid.result?._meta?.['xyz.tollbooth/receipt'], 'the paid call ran');

  // A signed webhook about the link, one with a bad signature, and provider failures on new charges.
  const webhookUrl = `${gateway.origin}/tollbooth/webhooks/moove`;
  const signed = await sendWebhook(webhookUrl, webhookSecret, { id: 'evt_1', type: 'payment_link.completed', data: { id: linkId, paymentLinkId: linkId } });
  const forged = await sendWebhook(webhookUrl, 'not-the-secret', { id: 'evt_2', type: 'payment_link.completed', data: { id: linkId, paymentLinkId: linkId } });
  t.equal(forged.status, 401, 'a forged webhook is refused');
  flow.errorBodies.push(JSON.stringify(signed.body), JSON.stringify(forged.body));
  for (const failure of [
    { status: 401, code: 'INVALID_API_KEY' },
    { status: 403, code: 'INSUFFICIENT_API_SCOPE' },
    { status: 409, code: 'PAYMENT_LINK_ACCOUNT_NOT_READY' },
    { status: 422, code: 'INVALID_PAYMENT_LINK_AMOUNT' },
  ]) {
    fake.failNext(1, failure, { method: 'POST' });
    const refused = await flow.post(call('fetch_readable', {}));
    t.equal(refused.result?._meta?.['xyz.tollbooth/refusal']?.reason, 'payments_unavailable', `${failure.code}: payments_unavailable`);
  }
  t.ok(gateway.logs().some((line) => line.evt === 'provider_action_needed'), 'the operator was told (so the scan covers provider error lines)');
  await flow.scan(t);
});
