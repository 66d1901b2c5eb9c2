// The paid loop with a real SDK v1 client through the gateway to a real SDK upstream (SPEC §6).
import t, { type Test } from 'tap';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { startPaidUpstream, type UpstreamMode } from '../helpers/paid-upstream.js';
import { startTestGateway, testConfig } from '../helpers/gateway.js';

/** A real SDK upstream, a gateway in front of it and a connected SDK v1 client, all closed with the test. */
async function paidSetup(t: Test, mode: UpstreamMode) {
  const upstream = await startPaidUpstream(mode);
  t.teardown(() => upstream.close());
  const gateway = await startTestGateway(t, testConfig(upstream.url));
  const client = new Client({ name: 'loop-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(gateway.url)));
  t.teardown(() => client.close());
  return { upstream, gateway, client };
}

t.test('v1 client: challenge, pay, retry spends one credit and strips the token', async (t) => {
  const { upstream, client } = await paidSetup(t, 'stateless-json');

  const challenge = await client.callTool({ name: 'fetch_readable', arguments: { url: 'https://example.com/' } });
  t.equal(challenge.isError, true, 'the first call is a challenge');
  const meta = (challenge._meta as Record<string, { checkoutUrl: string; retry: { value: string } }>)['xyz.tollbooth/challenge'];
  t.ok(meta, 'challenge metadata');
  const pay = await fetch(`${meta!.checkoutUrl}/pay`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: '', redirect: 'manual' });
  t.equal(pay.status, 303, 'paid on the checkout page');

  const paid = await client.callTool({ name: 'fetch_readable', arguments: { url: 'https://example.com/', tollboothToken: meta!.retry.value } });
  t.not(paid.isError, true, 'the retry runs the tool');
  t.same((paid._meta as Record<string, unknown>)['xyz.tollbooth/receipt'], { sku: 'research', cost: 1, remaining: 2 }, 'receipt');
  t.same(upstream.callsOf('fetch_readable').map((c) => c.arguments), [{ url: 'https://example.com/' }], 'the upstream saw the arguments without the token');
});

type Json = Record<string, any>;
const challengeOf = (result: Json): Json => (result._meta as Json)['xyz.tollbooth/challenge'] as Json;
async function pay(checkoutUrl: string, received?: string): Promise<number> {
  const body = received === undefined ? '' : new URLSearchParams({ received }).toString();
  const response = await fetch(`${checkoutUrl}/pay`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body, redirect: 'manual' });
  await response.arrayBuffer();
  return response.status;
}

for (const mode of ['stateless-json', 'sessions-sse'] as const) {
  t.test(`v1 client, ${mode} upstream: the whole loop to exhaustion and a new link on the same handle`, async (t) => {
    const { upstream, client } = await paidSetup(t, mode);

    const { tools } = await client.listTools();
    const listed = tools.find((tool) => tool.name === 'fetch_readable') as Json;
    t.ok(listed.inputSchema.properties.tollboothToken, 'the list offers the token argument');
    t.match(listed.description, /5\.00 USDC/, 'and the price');

    const args = { url: `https://example.com/${mode}` };
    const first = (await client.callTool({ name: 'fetch_readable', arguments: args })) as Json;
    t.equal(first.isError, true);
    const challenge = challengeOf(first);
    t.equal(challenge.reason, 'payment_required');
    t.equal(upstream.callsOf('fetch_readable').length, 0, 'the unpaid call never reached the upstream');

    const unpaidRetry = challengeOf((await client.callTool({ name: 'fetch_readable', arguments: { ...args, tollboothToken: challenge.retry.value } })));
    t.equal(unpaidRetry.checkoutUrl, challenge.checkoutUrl, 'an unpaid retry shows the same link');

    t.equal(await pay(challenge.checkoutUrl), 303);
    const remaining: number[] = [];
    for (let i = 0; i < 3; i++) {
      const paid = (await client.callTool({ name: 'fetch_readable', arguments: { ...args, tollboothToken: challenge.retry.value } })) as Json;
      t.not(paid.isError, true);
      remaining.push(paid._meta['xyz.tollbooth/receipt'].remaining);
    }
    t.same(remaining, [2, 1, 0], 'credits decrease');
    t.same(upstream.callsOf('fetch_readable').map((c) => c.arguments), [args, args, args], 'original arguments, no token');
    t.notOk(upstream.sawText(challenge.retry.value), 'the handle never reached the upstream');

    const exhausted = challengeOf((await client.callTool({ name: 'fetch_readable', arguments: { ...args, tollboothToken: challenge.retry.value } })));
    t.equal(exhausted.reason, 'credits_exhausted');
    t.equal(exhausted.retry.value, challenge.retry.value, 'same handle');
    t.not(exhausted.checkoutUrl, challenge.checkoutUrl, 'new link');

    t.equal(await pay(exhausted.checkoutUrl), 303);
    const refilled = (await client.callTool({ name: 'fetch_readable', arguments: { ...args, tollboothToken: challenge.retry.value } })) as Json;
    t.same(refilled._meta['xyz.tollbooth/receipt'], { sku: 'research', cost: 1, remaining: 2 }, 'the second pack tops the same handle up');
  });
}

t.test('v1 client: a tool with an outputSchema receives the challenge without throwing', async (t) => {
  const { client } = await paidSetup(t, 'stateless-json');
  await client.listTools(); // the v1 client caches output schemas and validates structuredContent against them
  const result = (await client.callTool({ name: 'with_schema', arguments: { city: 'Oslo' } })) as Json;
  t.equal(result.isError, true);
  t.equal(result.structuredContent, undefined);
  const challenge = challengeOf(result);
  t.equal(await pay(challenge.checkoutUrl), 303);
  const paid = (await client.callTool({ name: 'with_schema', arguments: { city: 'Oslo', tollboothToken: challenge.retry.value } })) as Json;
  t.same(paid.structuredContent, { temp: 21 }, "the upstream's structuredContent passes the client's validation");
});

t.test('v1 client: a tool without outputSchema gets structuredContent equal to the challenge meta', async (t) => {
  const { client } = await paidSetup(t, 'stateless-json');
  const result = (await client.callTool({ name: 'fetch_readable', arguments: { url: 'x' } })) as Json;
  t.same(result.structuredContent, challengeOf(result));
});

t.test('checkout underpayment: 0.40 of 5.00 → underpaid with a new link; then 2.50 → 1 credit (partial)', async (t) => {
  const { gateway, client } = await paidSetup(t, 'stateless-json');
  const first = challengeOf((await client.callTool({ name: 'fetch_readable', arguments: { url: 'x' } })));
  t.equal(await pay(first.checkoutUrl, '0.40'), 303);
  const token = first.retry.value;
  const underpaid = challengeOf((await client.callTool({ name: 'fetch_readable', arguments: { url: 'x', tollboothToken: token } })));
  t.equal(underpaid.reason, 'underpaid');
  t.not(underpaid.checkoutUrl, first.checkoutUrl, 'a new link');
  t.equal(await pay(underpaid.checkoutUrl, '2.50'), 303);
  const partial = (await client.callTool({ name: 'fetch_readable', arguments: { url: 'x', tollboothToken: token } })) as Json;
  t.same(partial._meta['xyz.tollbooth/receipt'], { sku: 'research', cost: 1, remaining: 0 }, 'pro rata floor(3 × 2.5 / 5) = 1 credit, now spent');
  const metrics = (await gateway.gateway.app.inject({ method: 'GET', url: '/metrics' })).body;
  t.match(metrics, /tollbooth_settlements_total\{sku="research",result="underpaid"\} 1/);
  t.match(metrics, /tollbooth_settlements_total\{sku="research",result="partial"\} 1/);
});
