// Logs (SPEC §10): every priced call writes exactly one evt:"call" line with the documented fields and
// the handle's fingerprint, and nothing anywhere in the log carries a handle, a checkout URL, a link
// id or a tool argument value.
import t from 'tap';
import { startPaidUpstream, type PaidUpstream } from '../helpers/paid-upstream.js';
import { rawToolCall, startTestGateway, testConfig, type TestGateway } from '../helpers/gateway.js';


let upstream: PaidUpstream;
t.before(async () => {
  upstream = await startPaidUpstream('stateless-json');
});
t.teardown(() => upstream.close());

const callTool = rawToolCall;

const fingerprintOf = (handle: string) => `${handle.slice(0, 9)}..${handle.slice(-4)}`;
const callLines = (gateway: TestGateway) => gateway.logs().filter((line) => line.evt === 'call');

t.test('a whole paid loop: one call line per priced call, right fields, no secrets anywhere', async (t) => {
  const gateway = await startTestGateway(t, testConfig(upstream.url, { limits: { perHandle: { ratePerSecond: 0.001, burst: 4 }, challengesPerClient: { ratePerSecond: 100, burst: 100 } } }));
  const secretArg = 'https://private.example/ARGVALUE-7f3a9c';
  const first = (await callTool(gateway, 'fetch_readable', { url: secretArg })).result._meta['xyz.tollbooth/challenge'];
  const handle = first.retry.value as string;
  const linkId = (first.checkoutUrl as string).split('/').at(-1) as string;
  await callTool(gateway, 'fetch_readable', { url: secretArg, tollboothToken: handle }); // unpaid retry
  await fetch(`${first.checkoutUrl}/pay`, { method: 'POST', redirect: 'manual' });
  await callTool(gateway, 'fetch_readable', { url: secretArg, tollboothToken: handle }); // authorised
  await callTool(gateway, 'failing', { tollboothToken: handle }); // upstream isError: refunded
  await callTool(gateway, 'costly', { q: secretArg, tollboothToken: handle }); // authorised, cost 2 (bucket now empty)
  await callTool(gateway, 'fetch_readable', { url: secretArg, tollboothToken: handle }); // rate limited
  await callTool(gateway, 'fetch_readable', { url: secretArg, tollboothToken: 'tb_s_AAAAAAAAAAAAAAAAAAAAAA' }); // unknown
  await callTool(gateway, 'echo', { text: secretArg }); // free: no call line

  const lines = callLines(gateway);
  t.equal(lines.length, 7, 'exactly one line per priced call, none for the free call');
  for (const line of lines) {
    t.hasOwnProps(line, ['tool', 'sku', 'tokenPresented', 'tokenFingerprint', 'tokenRecognised', 'outcome', 'cost', 'durationMs']);
    t.equal(typeof line.durationMs, 'number');
  }
  t.same(
    lines.map((l) => [l.tool, l.outcome, l.tokenPresented, l.tokenRecognised, l.cost]),
    [
      ['fetch_readable', 'challenged', false, false, 0],
      ['fetch_readable', 'challenged', true, true, 0],
      ['fetch_readable', 'authorised', true, true, 1],
      ['failing', 'authorised', true, true, 0],
      ['costly', 'authorised', true, true, 2],
      ['fetch_readable', 'refused_rate_limited', true, true, 0],
      ['fetch_readable', 'challenged', true, false, 0],
    ],
  );
  t.equal(lines[0]!.tokenFingerprint, null);
  t.ok(lines.slice(1, 6).every((l) => l.tokenFingerprint === fingerprintOf(handle)), 'the fingerprint, first 9 + .. + last 4');
  t.equal(lines[6]!.tokenFingerprint, 'tb_s_AAAA..AAAA');

  const text = gateway.logText();
  t.notOk(text.includes(handle), 'no handle');
  t.notOk(text.includes(handle.slice(5)), 'not even the random part of the handle');
  t.notOk(text.includes(first.checkoutUrl), 'no checkout URL');
  t.notOk(text.includes(linkId), 'no link id');
  t.notOk(text.includes('ARGVALUE-7f3a9c'), 'no argument value');
  t.notOk(text.includes('tb_s_AAAAAAAAAAAAAAAAAAAAAA'), 'no unknown token either');
});

t.test('metrics carry no handle, link id or argument', async (t) => {
  const gateway = await startTestGateway(t, testConfig(upstream.url));
  const first = (await callTool(gateway, 'fetch_readable', { url: 'https://m.example/METRICARG' })).result._meta['xyz.tollbooth/challenge'];
  await fetch(`${first.checkoutUrl}/pay`, { method: 'POST', redirect: 'manual' });
  await callTool(gateway, 'fetch_readable', { url: 'https://m.example/METRICARG', tollboothToken: first.retry.value });
  const metrics = (await gateway.gateway.app.inject({ method: 'GET', url: '/metrics' })).body;
  t.match(metrics, /tollbooth_paid_calls_total\{server="default",tool="fetch_readable",sku="research",outcome="authorised"\} 1/);
  t.notOk(metrics.includes(first.retry.value));
  t.notOk(metrics.includes((first.checkoutUrl as string).split('/').at(-1) as string));
  t.notOk(metrics.includes('METRICARG'));
});
