// SPEC §21, a Redis blip during an x402 settlement, as an operator would live it: the facilitator's
// /settle is running (the transfer is on its way) when Redis stops. The payment settles and the result is
// delivered; the settlement's `x402_settle` record cannot reach the store, so it waits in the outbox file.
// The gateway then crashes and cannot start again while Redis is down; Redis comes back, the gateway
// starts, and the record appears in the payer's ledger exactly once. Real processes throughout: redis-server
// (with its append-only file, as in production), `node dist/cli.js start`, the fake facilitator that
// checks signatures, a payer signing through the x402 client libraries. Needs `npm run build` first.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import type { ConfigInput } from '../../src/config/schema.js';
import { waitFor } from '../helpers/clock.js';
import { connectStore, redisGatewayConfig, scrape, startGatewayProcess, sumCounter } from '../helpers/gateway-process.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';
import { startRedis } from '../helpers/redis-server.js';
import { startFakeFacilitator } from '../helpers/x402-facilitator.js';
import { paymentMeta, paymentRequiredOf, withX402 } from '../helpers/x402-gateway.js';
import { newPayer } from '../helpers/x402-payer.js';

type Json = Record<string, any>;

async function postJson(url: string, body: unknown): Promise<Json> {
  const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' }, body: JSON.stringify(body) });
  return (await response.json()) as Json;
}
const toolCall = (id: unknown, args: Json, meta?: Json): Json => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'fetch_readable', arguments: args, ...(meta ? { _meta: meta } : {}) } });

/** Every file under `dir` (the outbox keeps one directory per store inside it). */
function outboxFiles(dir: string): string[] {
  try {
    return readdirSync(dir, { recursive: true, withFileTypes: true }).filter((entry) => entry.isFile()).map((entry) => entry.name);
  } catch {
    return [];
  }
}

t.test('Redis stops while /settle runs: the result is delivered, the record waits in the outbox across a crash and appears once when Redis is back', async (t) => {
  const redis = await startRedis({ persist: true });
  t.teardown(() => redis.stop());
  const upstream = await startPaidUpstream('stateless-json');
  t.teardown(() => upstream.close());
  const facilitator = await startFakeFacilitator({ settleDelayMs: 1_500 }); // an on-chain transfer takes time
  t.teardown(() => facilitator.close());
  const outboxRoot = mkdtempSync(join(tmpdir(), 'tb-outbox-e2e-'));
  t.teardown(() => rmSync(outboxRoot, { recursive: true, force: true }));
  const keyPrefix = `tboutbox${randomBytes(3).toString('hex')}:`;
  const base = withX402(redisGatewayConfig(upstream.url, { url: redis.url }, keyPrefix), facilitator.url);
  const config: ConfigInput = { ...base, store: { ...base.store, outboxDir: outboxRoot } };

  const gateway = await startGatewayProcess(t, config);
  const challenge = (await postJson(gateway.url, toolCall('challenge', { url: 'https://example.com/' }))).result as Json;
  const payer = newPayer();
  const payload = await payer.pay(paymentRequiredOf(challenge));
  const paid = postJson(gateway.url, toolCall('paid', { url: 'https://example.com/' }, paymentMeta(payload)));

  await waitFor(() => facilitator.calls.settle === 1, 'the facilitator settling the payment');
  redis.kill('SIGTERM'); // the blip: Redis goes away while the transfer runs
  const reply = await paid;
  t.equal(reply.result?._meta?.['x402/payment-response']?.success, true, 'the payment settled and the result was delivered with its payment response');
  t.notOk(reply.result?.isError, 'the tool\'s result, not a refusal');
  await waitFor(() => outboxFiles(outboxRoot).length === 1, 'the settlement record written to the outbox file');
  t.equal(sumCounter(await scrape(gateway.origin), 'tollbooth_outbox_pending'), 1, 'tollbooth_outbox_pending shows it');

  await gateway.kill(); // a crash while Redis is down: nothing in memory survives
  await t.rejects(startGatewayProcess(t, config), /exited during start-up/, 'a restart while Redis is still down is refused at start (the store is unreachable)');
  t.equal(outboxFiles(outboxRoot).length, 1, 'the record is still in the file');

  await redis.restart();
  const restarted = await startGatewayProcess(t, config);
  const store = await connectStore(t, { url: redis.url }, keyPrefix);
  const rows = async (): Promise<Json[]> => (await store.readLedger({ kind: 'payer', payer: payer.address.toLowerCase() }, { limit: 100 })).filter((entry) => entry.kind === 'x402_settle');
  await waitFor(async () => (await rows()).length > 0, 'the x402_settle row in the payer\'s ledger', { timeoutMs: 20_000 });
  await waitFor(() => outboxFiles(outboxRoot).length === 0, 'the outbox file removed once stored');
  const [row] = await rows();
  t.match(row, { kind: 'x402_settle', payer: payer.address.toLowerCase(), transaction: reply.result._meta['x402/payment-response'].transaction, amount: payload.accepted.amount }, 'the settlement as the facilitator reported it');
  t.equal(sumCounter(await scrape(restarted.origin), 'tollbooth_outbox_pending'), 0, 'nothing pending any more');

  // Exactly once: another restart finds nothing to write, and the ledger still holds one row.
  await restarted.kill();
  const again = await startGatewayProcess(t, config);
  t.equal(sumCounter(await scrape(again.origin), 'tollbooth_outbox_pending'), 0);
  t.equal((await rows()).length, 1, 'exactly one x402_settle row');
  t.equal(facilitator.calls.settle, 1, 'settled once');
});
