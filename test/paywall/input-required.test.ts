// A 2026-07-28 `input_required` answer to a priced call is not a finished result: the reservation is
// released, nothing is charged, the answer reaches the client as it came (no receipt); the client's
// continuation (a new tools/call carrying requestState and the input responses) is the call that pays,
// once. A real v2 SDK client against a real v2 SDK server (test/helpers/input-required-upstream.ts).
import t, { type Test } from 'tap';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { hashHandle } from '../../src/paywall/handles.js';
import { startInputRequiredUpstream, type InputRequiredUpstream } from '../helpers/input-required-upstream.js';
import { fundedHandle, researchBalance, startTestGateway, testConfig, type TestGateway } from '../helpers/gateway.js';

type Json = Record<string, any>;

let upstream: InputRequiredUpstream;
t.before(async () => {
  upstream = await startInputRequiredUpstream();
});
t.teardown(() => upstream.close());

const config = () => testConfig(upstream.url, { tools: { deploy: { sku: 'research', cost: 1 } } });

/** A pinned 2026-07-28 v2 client that confirms every elicitation; `wire` collects the gateway's JSON answers. */
async function connect(t: Test, gateway: TestGateway, options: { autoFulfill: boolean }, wire: Json[] = []): Promise<Client> {
  const client = new Client(
    { name: 'input-required-test', version: '1.0.0' },
    { versionNegotiation: { mode: { pin: '2026-07-28' } }, capabilities: { elicitation: { form: {} } }, inputRequired: { autoFulfill: options.autoFulfill } },
  );
  client.setRequestHandler('elicitation/create', async () => ({ action: 'accept' as const, content: { confirm: true } }));
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

const spends = async (gateway: TestGateway, handle: string) =>
  (await gateway.store.ledgerTail(hashHandle(handle, gateway.config.handles.hashSecret), 100)).filter((entry) => entry.kind === 'spend');

t.test('the input_required answer is released: balance unchanged, no receipt, no spend, passed on as it came', async (t) => {
  const gateway = await startTestGateway(t, config());
  const handle = await fundedHandle(gateway, 'deploy', { env: 'fund' });
  const wire: Json[] = [];
  const client = await connect(t, gateway, { autoFulfill: false }, wire);
  const before = upstream.calls.length;

  const answer = (await client.callTool({ name: 'deploy', arguments: { env: 'staging', tollboothToken: handle } }, { allowInputRequired: true })) as Json;
  const raw = wire.find((m) => m.result?.resultType === 'input_required') as Json;
  t.ok(raw, 'the input_required result reached the client');
  t.equal(raw.result.requestState, 'deploy:staging', 'its requestState untouched');
  t.ok(raw.result.inputRequests?.confirm, 'its input requests untouched');
  t.notOk(raw.result._meta?.['xyz.tollbooth/receipt'], 'no receipt');
  t.ok(answer, 'the client surfaced it');
  t.same(upstream.calls.slice(before).map((c) => c.round), ['first'], 'the upstream ran the first round');
  t.equal(await researchBalance(gateway, handle), 3, 'nothing charged, nothing held');
  t.same(await spends(gateway, handle), [], 'no spend in the ledger');
  const line = gateway.logs().find((l) => l.evt === 'call' && l.tool === 'deploy' && l.outcome === 'input_required');
  t.ok(line, 'the call line says input_required');
  t.equal(line?.cost, 0);
});

t.test('the continuation is the priced call: charged once when it completes, with its receipt', async (t) => {
  const gateway = await startTestGateway(t, config());
  const handle = await fundedHandle(gateway, 'deploy', { env: 'fund' });
  const wire: Json[] = [];
  const client = await connect(t, gateway, { autoFulfill: true }, wire);
  const before = upstream.calls.length;

  const result = (await client.callTool({ name: 'deploy', arguments: { env: 'prod', tollboothToken: handle } })) as Json;
  t.not(result.isError, true);
  t.equal(result.content[0].text, 'deployed to prod');
  t.same(upstream.calls.slice(before).map((c) => c.round), ['first', 'continuation'], 'two rounds reached the upstream');
  t.ok(wire.some((m) => m.result?.resultType === 'input_required'), 'the first round answered input_required');
  t.same(result._meta['xyz.tollbooth/receipt'], { sku: 'research', cost: 1, remaining: 2 }, 'the completed continuation carries the receipt');
  t.equal(await researchBalance(gateway, handle), 2, 'charged once');
  const spent = await spends(gateway, handle);
  t.equal(spent.length, 1, 'one spend in the ledger');
  t.equal(spent[0]?.tool, 'deploy');
});

t.test('under charge: attempt an input_required answer is still not charged', async (t) => {
  const gateway = await startTestGateway(t, testConfig(upstream.url, { tools: { deploy: { sku: 'research', cost: 1, charge: 'attempt' } } }));
  const handle = await fundedHandle(gateway, 'deploy', { env: 'fund' });
  const client = await connect(t, gateway, { autoFulfill: true });
  const result = (await client.callTool({ name: 'deploy', arguments: { env: 'qa', tollboothToken: handle } })) as Json;
  t.equal(result.content[0].text, 'deployed to qa');
  t.equal(await researchBalance(gateway, handle), 2, 'charged once, for the continuation');
  t.equal((await spends(gateway, handle)).length, 1);
});
