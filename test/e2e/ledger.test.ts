// The ledger end to end (SPEC §17, §6.5): real gateways on Redis, the paid SDK upstream counting what
// it ran, real HTTP clients.
// 1. Concurrent calls ending every way (success, isError, JSON-RPC error, deadline, client gone
//    while the tool runs, read to its end): the spend entries add up to exactly the calls the upstream carried out
//    and that were charged (the gateway's own call log says which it charged), and `ledger verify`
//    agrees.
// 2. A `tollbooth start` process SIGKILLed mid-call: its reservation is held, not spent; once
//    another replica's reconciler releases it, `ledger verify` (the CLI) exits 0 and the ledger
//    holds no entry for the call.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { request } from 'undici';
import { ledgerVerify, type AdminContext } from '../../src/admin.js';
import { createLogger } from '../../src/observability/logger.js';
import { hashHandle } from '../../src/paywall/handles.js';
import type { LedgerEntry, Store } from '../../src/store/store.js';
import { fundedHandle, startTestGateway } from '../helpers/gateway.js';
import {
  assertBuilt,
  balanceOf,
  callTool,
  childEnv,
  CLI,
  connectStore,
  HASH_SECRET,
  heldReservations,
  payDevCheckout,
  redisGatewayConfig,
  ROOT,
  startGatewayProcess,
  waitForNoReservations,
  writeConfig,
  type CallOutcome,
} from '../helpers/gateway-process.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';
import { startRedis } from '../helpers/redis-server.js';
import { allEntries } from '../store/ledger-conformance.js';
import { waitFor } from '../helpers/clock.js';
import { metricValue } from '../helpers/scripted-upstream.js';

const redis = await startRedis();
t.teardown(() => redis.stop());

async function entriesOf(store: Store, handle: string): Promise<LedgerEntry[]> {
  return allEntries(store, { kind: 'handle', handleHash: hashHandle(handle, HASH_SECRET) }, 500);
}

async function verifyThrough(store: Store, config: AdminContext['config']): Promise<{ code: number; lines: string[] }> {
  const lines: string[] = [];
  const code = await ledgerVerify({ store, config, out: (line) => lines.push(line), logger: createLogger('silent') });
  return { code, lines };
}

t.test('concurrent calls ending every way: spend entries = calls the upstream carried out and that were charged; verify agrees', async (t) => {
  const upstream = await startPaidUpstream('stateless-json');
  t.teardown(() => upstream.close());
  const keyPrefix = `tbe2eledger${randomBytes(3).toString('hex')}:`;
  const config = redisGatewayConfig(upstream.url, { url: redis.url }, keyPrefix, {
    upstream: { url: upstream.url, callDeadline: '1500ms' },
    skus: { research: { label: 'Research tools', amount: '5.00', currency: 'USDC', credits: 100 } },
    logging: { level: 'info' }, // the call log lines say what the gateway charged
  });
  const gateway = await startTestGateway(t, config);
  const store = gateway.store;
  const handle = await fundedHandle(gateway);

  // 12 successes, 4 tool errors, 3 JSON-RPC errors, 3 past the deadline, 4 whose client leaves while the tool finishes.
  const call = (name: string, args: Record<string, unknown>): Promise<CallOutcome> => callTool(gateway.url, name, { ...args, tollboothToken: handle });
  const leaving = async (i: number): Promise<string> => {
    const abort = new AbortController();
    const pending = request(gateway.url, {
      method: 'POST',
      signal: abort.signal,
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18' },
      body: JSON.stringify({ jsonrpc: '2.0', id: `leave-${i}`, method: 'tools/call', params: { name: 'slow', arguments: { ms: 600 + i, tollboothToken: handle } } }),
    }).then((response) => response.body.text());
    // The client leaves once the tool is running upstream.
    await waitFor(() => upstream.callsOf('slow').some((c) => c.arguments.ms === 600 + i), `leaving call ${i} at the upstream`);
    abort.abort();
    return pending.catch(() => 'client gone');
  };
  await Promise.all([
    ...Array.from({ length: 12 }, (_, i) => call('fetch_readable', { url: `https://example.com/${i}` })),
    ...Array.from({ length: 4 }, () => call('failing', {})),
    ...Array.from({ length: 3 }, () => call('throwing', {})),
    ...Array.from({ length: 3 }, () => call('slow', { ms: 5_000 })),
    ...Array.from({ length: 4 }, (_, i) => leaving(i)),
  ]);
  // The gateway reads a call whose client left to its end, then commits (§6.5): wait for those.
  await waitFor(async () => (await heldReservations({ url: redis.url }, keyPrefix, handle)) === 0, 'no reservation held', { everyMs: 100 });

  const ran = {
    fetch: upstream.callsOf('fetch_readable').filter((c) => c.arguments.url !== 'fund').length,
    failing: upstream.callsOf('failing').length,
    throwing: upstream.callsOf('throwing').length,
    slowDeadline: upstream.callsOf('slow').filter((c) => c.arguments.ms === 5_000).length,
    slowLeft: upstream.callsOf('slow').filter((c) => (c.arguments.ms as number) < 5_000).length,
  };
  const entries = await entriesOf(store, handle);
  const spends = entries.filter((entry) => entry.kind === 'spend');
  const spentBy = (tool: string): number => spends.filter((entry) => entry.tool === tool).length;
  // What the gateway charged, from its own call log (written after the commit, independent of the ledger).
  const chargedCalls = gateway.logs().filter((line) => line.evt === 'call' && Number(line.cost) > 0);
  const chargedBy = (tool: string): number => chargedCalls.filter((line) => line.tool === tool).length;
  t.comment(`upstream ran ${JSON.stringify(ran)}; charged by the gateway: fetch_readable ${chargedBy('fetch_readable')}, slow ${chargedBy('slow')}; spend entries ${spends.length}`);
  t.same(ran, { fetch: 12, failing: 4, throwing: 3, slowDeadline: 3, slowLeft: 4 }, 'every call reached the upstream');
  t.equal(chargedBy('fetch_readable'), 12, 'every success was charged');
  t.equal(chargedBy('slow'), 4, 'a call whose client left while the tool ran is read to its end and charged (§6.5); the deadline ones are not');
  t.equal(chargedBy('failing') + chargedBy('throwing'), 0, 'tool and JSON-RPC errors are never charged');
  t.equal(spentBy('fetch_readable'), chargedBy('fetch_readable'), 'one spend entry per charged success');
  t.equal(spentBy('slow'), chargedBy('slow'), 'one spend entry per charged call whose client left; none for the deadline ones');
  t.equal(spends.length, chargedCalls.length, 'spend entries = calls carried out and charged');
  t.ok(spends.every((entry) => entry.credits === -1), 'each spends its cost');
  t.match(entries[0], { seq: 1, kind: 'grant', credits: 100 });
  t.equal(await balanceOf(store as never, handle), 100 - spends.length, 'the balance agrees');
  const verify = await verifyThrough(store, gateway.config);
  t.equal(verify.code, 0, verify.lines.join('\n'));

  // Each spend's chain link was hashed by this gateway (it appended the entry before) or by Redis; in
  // turn, with nothing else appending, every link is the gateway's (src/store/redis/chain-heads.ts).
  const links = async (): Promise<{ gateway: number; script: number }> => ({
    gateway: await metricValue(gateway.origin, 'tollbooth_store_ledger_links_total', { by: 'gateway' }),
    script: await metricValue(gateway.origin, 'tollbooth_store_ledger_links_total', { by: 'script' }),
  });
  const concurrent = await links();
  t.equal(concurrent.gateway + concurrent.script, spends.length, `one link per spend (${JSON.stringify(concurrent)})`);
  for (let i = 0; i < 3; i++) t.equal((await call('fetch_readable', { url: `https://example.com/turn-${i}` })).kind, 'paid');
  t.same(await links(), { gateway: concurrent.gateway + 3, script: concurrent.script }, 'calls in turn: the gateway hashed every link');
  t.equal((await verifyThrough(store, gateway.config)).code, 0, 'and the chain still verifies');
});

t.test('a gateway SIGKILLed mid-call: the ledger verifies, and once the reconciler released the reservation nothing was spent for it', async (t) => {
  assertBuilt();
  const upstream = await startPaidUpstream('stateless-json');
  t.teardown(() => upstream.close());
  const keyPrefix = `tbcrashledger${randomBytes(3).toString('hex')}:`;
  const target = { url: redis.url };
  const config = redisGatewayConfig(upstream.url, target, keyPrefix, {
    upstream: { url: upstream.url, callDeadline: '2s' },
    payments: { provider: 'dev', reconcile: { interval: '1s' } },
    skus: { research: { label: 'Research tools', amount: '5.00', currency: 'USDC', credits: 10 } },
  });
  const [doomed, survivor] = await Promise.all([startGatewayProcess(t, config), startGatewayProcess(t, config)]);
  const store = await connectStore(t, target, keyPrefix);
  const configPath = writeConfig(t, config);
  const cliVerify = (): Promise<{ code: number | null; stdout: string; stderr: string }> =>
    new Promise((resolve) => {
      execFile(process.execPath, [CLI, 'ledger', 'verify', '--config', configPath], { cwd: ROOT, env: childEnv() }, (error, stdout, stderr) => {
        resolve({ code: error ? (typeof error.code === 'number' ? error.code : null) : 0, stdout, stderr });
      });
    });

  const challenge = await callTool(survivor.url, 'fetch_readable', { url: 'https://example.com/' });
  if (challenge.kind !== 'challenged') throw new Error(`expected a challenge, got ${JSON.stringify(challenge)}`);
  if ((await payDevCheckout(challenge.checkoutUrl, survivor.origin)) !== 303) throw new Error('pay failed');
  const handle = challenge.handle;
  t.match(await callTool(doomed.url, 'fetch_readable', { url: 'https://example.com/1', tollboothToken: handle }), { kind: 'paid', remaining: 9 });

  const inFlight = callTool(doomed.url, 'slow', { ms: 8_000, tollboothToken: handle });
  await waitFor(() => upstream.callsOf('slow').length > 0, 'the call at the upstream');
  await doomed.kill();
  t.match(await inFlight, { kind: 'failed' }, 'the caller lost its connection');
  t.equal(await heldReservations(target, keyPrefix, handle), 1, 'the killed call still holds its reservation');
  const whileHeld = await cliVerify();
  t.equal(whileHeld.code, 0, `a held reservation is still the handle's credit: verify agrees before the release too\n${whileHeld.stdout}${whileHeld.stderr}`);

  const releaseMs = await waitForNoReservations(target, keyPrefix, handle, 20_000);
  t.comment(`reservation released by the survivor's reconciler ${releaseMs} ms after the kill`);
  const after = await cliVerify();
  t.equal(after.code, 0, after.stdout + after.stderr);
  t.match(after.stdout, /ledger verified: 1 ledgers, 2 entries checked, 0 mismatches/);
  t.equal(await balanceOf(store, handle), 9, 'the credit of the killed call is back');
  t.same((await entriesOf(store, handle)).map((entry) => [entry.kind, entry.credits, entry.balanceAfter]), [
    ['grant', 10, 10],
    ['spend', -1, 9],
  ], 'no entry for the killed call: a reservation is not an entry and a release writes nothing');
});
