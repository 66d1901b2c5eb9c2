// `start` writes its log lines to stdout in batches (observability/logger.ts: ≥ 4 KiB or every
// 250 ms). A SIGTERM must not lose the lines still in the buffer: the real CLI, N paid calls, SIGTERM
// right after the last answer, and every call has its `evt:"call"` line on stdout. (Before the flush
// on exit, 14 of 1,200 lines were measured lost.)
import t from 'tap';
import { Agent } from 'undici';
import { callTool, payDevCheckout, startGatewayProcess, tally } from '../helpers/gateway-process.js';
import { testConfig } from '../helpers/gateway.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';

const CALLS = 600;

t.test('SIGTERM right after N paid calls: exit 0 and all N call lines are on stdout', async (t) => {
  const upstream = await startPaidUpstream();
  t.teardown(() => upstream.close());
  const gateway = await startGatewayProcess(
    t,
    testConfig(upstream.url, {
      skus: { research: { label: 'Research tools', amount: '5.00', currency: 'USDC', credits: 100_000 } },
      limits: { perHandle: { ratePerSecond: 100_000, burst: 100_000 }, challengesPerClient: { ratePerSecond: 100, burst: 100 }, newChargesPerSecond: 100 },
    }),
  );
  const challenge = await callTool(gateway.url, 'fetch_readable', { url: 'https://example.com/' });
  if (challenge.kind !== 'challenged') throw new Error(`expected a challenge, got ${JSON.stringify(challenge)}`);
  t.equal(await payDevCheckout(challenge.checkoutUrl, gateway.origin), 303, 'paid');

  const agent = new Agent({ connections: 8 });
  t.teardown(() => agent.close());
  const outcomes = [];
  for (let batch = 0; batch < CALLS; batch += 50) {
    outcomes.push(...(await Promise.all(Array.from({ length: 50 }, () => callTool(gateway.url, 'fetch_readable', { url: 'https://example.com/', tollboothToken: challenge.handle }, agent)))));
  }
  t.same(tally(outcomes), { paid: CALLS }, 'every call was paid');

  t.equal(await gateway.stop(), 0, 'exit code 0');
  const authorised = gateway.logs().filter((line) => line.evt === 'call' && line.outcome === 'authorised');
  t.equal(authorised.length, CALLS, 'one call line per paid call');
  t.ok(gateway.logs().some((line) => line.evt === 'shutdown'), 'the shutdown line too');
});
