// The paid loop with a real SDK v1 client through the gateway to a real SDK upstream (SPEC §6).
import t from 'tap';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';
import { startTestGateway, testConfig } from '../helpers/gateway.js';

t.test('v1 client: challenge, pay, retry spends one credit and strips the token', async (t) => {
  const upstream = await startPaidUpstream('stateless-json');
  t.teardown(() => upstream.close());
  const gateway = await startTestGateway(t, testConfig(upstream.url));
  const client = new Client({ name: 'loop-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(gateway.url)));
  t.teardown(() => client.close());

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
