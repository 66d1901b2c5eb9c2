// The charging policy (SPEC §6.5) end to end: with `charge: success` a call that does not succeed
// gives its credit back (isError, JSON-RPC error, transport failure, 5xx, deadline); with
// `charge: attempt` the credit is spent once the upstream accepted the call.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import t, { type Test } from 'tap';
import { startPaidUpstream, type PaidUpstream } from '../helpers/paid-upstream.js';
import { fundedHandle, rawToolCall, researchBalance, startTestGateway, testConfig, type TestGateway } from '../helpers/gateway.js';

type Json = Record<string, any>;

let upstream: PaidUpstream;
t.before(async () => {
  upstream = await startPaidUpstream('stateless-json');
});
t.teardown(() => upstream.close());

const callTool = rawToolCall;
const balance = researchBalance;

async function gatewayWithCredits(t: Test, overrides: Json = {}, upstreamUrl = upstream.url): Promise<{ gateway: TestGateway; handle: string }> {
  const gateway = await startTestGateway(t, testConfig(upstreamUrl, overrides));
  const handle = await fundedHandle(gateway);
  t.equal(await balance(gateway, handle), 3, 'funded with 3 credits');
  return { gateway, handle };
}

const credits = (gateway: TestGateway, kind: string): Promise<number> =>
  gateway.gateway.app.inject({ method: 'GET', url: '/metrics' }).then((r) => {
    const line = r.body.split('\n').find((l) => l.startsWith(`tollbooth_credits_total{sku="research",kind="${kind}"}`));
    return line ? Number(line.split(' ').at(-1)) : 0;
  });

t.test('charge success: an isError result is relayed and the credit refunded', async (t) => {
  const { gateway, handle } = await gatewayWithCredits(t);
  const reply = await callTool(gateway, 'failing', { tollboothToken: handle });
  t.equal(reply.result.isError, true);
  t.same(reply.result.content, [{ type: 'text', text: 'upstream failure' }], "the upstream's own error result");
  t.notOk(reply.result._meta?.['xyz.tollbooth/receipt'], 'no receipt for a refunded call');
  t.equal(await balance(gateway, handle), 3);
  t.equal(upstream.callsOf('failing').length > 0, true, 'the upstream ran it');
  t.equal(await credits(gateway, 'refunded'), 1);
});

t.test('charge success: a JSON-RPC error is relayed and the credit refunded', async (t) => {
  const { gateway, handle } = await gatewayWithCredits(t);
  const reply = await callTool(gateway, 'throwing', { tollboothToken: handle });
  // The v1 SDK server turns a thrown handler error into an isError result or a JSON-RPC error
  // depending on its version: either way the call did not succeed.
  t.ok(reply.error || reply.result?.isError === true, 'not a success');
  t.equal(await balance(gateway, handle), 3);
});

t.test('charge success: a transport failure becomes upstream_unavailable and the credit is refunded', async (t) => {
  // An upstream that accepts the connection and resets it.
  const resetter = createServer((req) => req.socket.destroy());
  await new Promise<void>((resolve) => resetter.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => resetter.close(() => resolve())));
  const { gateway, handle } = await gatewayWithCredits(t, {}, `http://127.0.0.1:${(resetter.address() as AddressInfo).port}/mcp`);
  const reply = await callTool(gateway, 'fetch_readable', { url: 'u', tollboothToken: handle });
  t.equal(reply.result.isError, true);
  t.same(reply.result._meta['xyz.tollbooth/refusal'], { reason: 'upstream_unavailable', sku: 'research', remaining: 3 }, 'the refusal says what the handle holds after the refund');
  t.equal(await balance(gateway, handle), 3);
});

t.test('charge success: an upstream 5xx becomes upstream_unavailable and the credit is refunded', async (t) => {
  const failing = createServer((_req, res) => res.writeHead(503, { 'content-type': 'text/plain' }).end('down for maintenance'));
  await new Promise<void>((resolve) => failing.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => failing.close(() => resolve())));
  const { gateway, handle } = await gatewayWithCredits(t, {}, `http://127.0.0.1:${(failing.address() as AddressInfo).port}/mcp`);
  const reply = await callTool(gateway, 'fetch_readable', { url: 'u', tollboothToken: handle });
  t.same(reply.result._meta['xyz.tollbooth/refusal'], { reason: 'upstream_unavailable', sku: 'research', remaining: 3 });
  t.notMatch(JSON.stringify(reply), /maintenance/, 'the upstream body is not relayed on a priced call');
  t.equal(await balance(gateway, handle), 3);
});

t.test('charge success: at the deadline the call is refused deadline_exceeded and the credit refunded', async (t) => {
  const { gateway, handle } = await gatewayWithCredits(t, { upstream: { url: upstream.url, callDeadline: '400ms' } });
  const started = Date.now();
  const reply = await callTool(gateway, 'slow', { ms: 5_000, tollboothToken: handle });
  // Under the tool's 5 s, with room for a loaded machine (quiet: ~0.4 s): at the deadline, not at the tool's end.
  t.ok(Date.now() - started < 4_500, 'answered at the deadline, not when the tool finished');
  t.same(reply.result._meta['xyz.tollbooth/refusal'], { reason: 'deadline_exceeded', sku: 'research', remaining: 3 }, 'the refunded credit is in remaining');
  t.match(reply.result.content[0].text, /refunded/);
  t.equal(await balance(gateway, handle), 3);
});

t.test('charge success: a successful call spends exactly its cost', async (t) => {
  const { gateway, handle } = await gatewayWithCredits(t);
  const reply = await callTool(gateway, 'costly', { q: 'x', tollboothToken: handle });
  t.same(reply.result._meta['xyz.tollbooth/receipt'], { sku: 'research', cost: 2, remaining: 1 });
  t.equal(await balance(gateway, handle), 1);
  t.equal(await credits(gateway, 'spent'), 2);
});

t.test('charge attempt: an isError result still spends the credit', async (t) => {
  const { gateway, handle } = await gatewayWithCredits(t, { tools: { fetch_readable: { sku: 'research', cost: 1 }, failing: { sku: 'research', cost: 1, charge: 'attempt' } } });
  const reply = await callTool(gateway, 'failing', { tollboothToken: handle });
  t.equal(reply.result.isError, true);
  t.equal(await balance(gateway, handle), 2);
});

t.test('charge attempt: an upstream that was never reached refunds', async (t) => {
  const dead = createServer();
  await new Promise<void>((resolve) => dead.listen(0, '127.0.0.1', resolve));
  const port = (dead.address() as AddressInfo).port;
  await new Promise<void>((resolve) => dead.close(() => resolve()));
  const { gateway, handle } = await gatewayWithCredits(t, { tools: { fetch_readable: { sku: 'research', cost: 1, charge: 'attempt' } } }, `http://127.0.0.1:${port}/mcp`);
  const reply = await callTool(gateway, 'fetch_readable', { url: 'u', tollboothToken: handle });
  t.same(reply.result._meta['xyz.tollbooth/refusal'], { reason: 'upstream_unavailable', sku: 'research', remaining: 3 });
  t.equal(await balance(gateway, handle), 3);
});
