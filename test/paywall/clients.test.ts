// The paid loop with the v2 SDK client (@modelcontextprotocol/client 2.4.0) through the gateway, in
// both eras: legacy (2025-11-25, plain initialize) and modern (pinned 2026-07-28, server/discover, no
// sessions) against a real dual-era upstream built with the v2 server's createMcpHandler (SPEC §5.1, §6).
import t, { type Test } from 'tap';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { startDualEraUpstream, type DualEraUpstream } from '../helpers/dual-era-upstream.js';
import { startTestGateway, testConfig, type TestGateway } from '../helpers/gateway.js';

type Json = Record<string, any>;

interface Challenge {
  reason: string;
  checkoutUrl: string;
  retry: { tool: string; argument: string; value: string };
}

const challengeOf = (result: Json): Challenge => (result._meta as Json)['xyz.tollbooth/challenge'] as Challenge;

async function pay(checkoutUrl: string, received?: string): Promise<number> {
  const body = received === undefined ? '' : new URLSearchParams({ received }).toString();
  const response = await fetch(`${checkoutUrl}/pay`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body, redirect: 'manual' });
  await response.arrayBuffer();
  return response.status;
}

const ERAS = [
  { name: 'legacy 2025-11-25', mode: 'legacy' as const, version: '2025-11-25', era: 'legacy' },
  { name: 'modern 2026-07-28', mode: { pin: '2026-07-28' }, version: '2026-07-28', era: 'modern' },
];

let upstream: DualEraUpstream;
t.before(async () => {
  upstream = await startDualEraUpstream();
});
t.teardown(() => upstream.close());

/** Connects a v2 client; `wire` collects the raw JSON bodies the gateway answered (the client strips some fields). */
async function connect(t: Test, gateway: TestGateway, mode: (typeof ERAS)[number]['mode'], wire: Json[] = []): Promise<Client> {
  const client = new Client({ name: 'clients-test', version: '1.0.0' }, { versionNegotiation: { mode } });
  const recordingFetch = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const response = await fetch(input, init);
    if (response.headers.get('content-type')?.startsWith('application/json')) {
      const text = await response.clone().text();
      if (text) wire.push(JSON.parse(text) as Json);
    }
    return response;
  };
  await client.connect(new StreamableHTTPClientTransport(new URL(gateway.url), { fetch: recordingFetch }));
  t.teardown(() => client.close());
  return client;
}

for (const era of ERAS) {
  t.test(`v2 client ${era.name}: negotiates its era through the gateway`, async (t) => {
    const gateway = await startTestGateway(t, testConfig(upstream.url));
    const client = await connect(t, gateway, era.mode);
    t.equal(client.getNegotiatedProtocolVersion(), era.version);
    t.equal(client.getProtocolEra(), era.era);
  });

  t.test(`v2 client ${era.name}: tools/list shows the price and the optional token argument`, async (t) => {
    const gateway = await startTestGateway(t, testConfig(upstream.url));
    const client = await connect(t, gateway, era.mode);
    const { tools } = await client.listTools();
    const paid = tools.find((tool) => tool.name === 'fetch_readable') as Json;
    const free = tools.find((tool) => tool.name === 'echo') as Json;
    t.ok(paid.inputSchema.properties.tollboothToken, 'token argument added');
    t.notOk((paid.inputSchema.required ?? []).includes('tollboothToken'), 'never required');
    t.match(paid._meta['xyz.tollbooth/price'], { sku: 'research', cost: 1, amount: '5.00', currency: 'USDC', credits: 3 });
    t.notOk(free.inputSchema.properties?.tollboothToken, 'free tool untouched');
  });

  t.test(`v2 client ${era.name}: challenge, pay, retry, spend to exhaustion, new link on the same handle`, async (t) => {
    const gateway = await startTestGateway(t, testConfig(upstream.url));
    const wire: Json[] = [];
    const client = await connect(t, gateway, era.mode, wire);
    const before = upstream.callsOf('fetch_readable').length;
    const args = { url: `https://example.com/${era.version}` };

    const first = (await client.callTool({ name: 'fetch_readable', arguments: args })) as Json;
    t.equal(first.isError, true, 'challenge is a tool result with isError');
    const challenge = challengeOf(first);
    t.equal(challenge.reason, 'payment_required');
    t.match(first.content[0].text, /^PAYMENT_REQUIRED\n/);
    const raw = wire.find((m) => m.result?._meta?.['xyz.tollbooth/challenge']) as Json;
    t.equal(raw.result.resultType, era.era === 'modern' ? 'complete' : undefined, 'resultType "complete" on the wire only for modern');
    t.equal(upstream.callsOf('fetch_readable').length, before, 'the unpaid call never reached the upstream');

    t.equal(await pay(challenge.checkoutUrl), 303);
    const remaining: number[] = [];
    for (let i = 0; i < 3; i++) {
      const paid = (await client.callTool({ name: 'fetch_readable', arguments: { ...args, tollboothToken: challenge.retry.value } })) as Json;
      t.not(paid.isError, true, `paid call ${i + 1} runs`);
      remaining.push(paid._meta['xyz.tollbooth/receipt'].remaining);
    }
    t.same(remaining, [2, 1, 0], 'credits decrease one per call');
    const seen = upstream.callsOf('fetch_readable').slice(before);
    t.equal(seen.length, 3);
    t.ok(seen.every((c) => JSON.stringify(c.arguments) === JSON.stringify(args)), 'upstream got the original arguments without the token');
    t.ok(seen.every((c) => c.era === era.era), `upstream served the ${era.era} era`);

    const exhausted = (await client.callTool({ name: 'fetch_readable', arguments: { ...args, tollboothToken: challenge.retry.value } })) as Json;
    const again = challengeOf(exhausted);
    t.equal(again.reason, 'credits_exhausted');
    t.equal(again.retry.value, challenge.retry.value, 'same handle');
    t.not(again.checkoutUrl, challenge.checkoutUrl, 'a new link');
    t.equal(upstream.callsOf('fetch_readable').length, before + 3, 'the exhausted call never reached the upstream');
  });

  t.test(`v2 client ${era.name}: a tool with an outputSchema gets the challenge without structuredContent`, async (t) => {
    const gateway = await startTestGateway(t, testConfig(upstream.url));
    const client = await connect(t, gateway, era.mode);
    await client.listTools(); // the client learns the outputSchema, and would validate structuredContent
    const result = (await client.callTool({ name: 'with_schema', arguments: { city: 'Oslo' } })) as Json;
    t.equal(result.isError, true);
    t.equal(result.structuredContent, undefined, 'no structuredContent against a declared outputSchema');
    t.ok(challengeOf(result).checkoutUrl, 'data is in _meta');
  });
}
