// `ledger export` over a store: every entry of every ledger in time order (handles and x402 payers
// interleaved), JSON lines or CSV, inside [since, until), through the external sort when it is big.
import t from 'tap';
import { exportLedger, type ExportOptions } from '../../src/ledger/export.js';
import { MemoryStore } from '../../src/store/memory.js';
import { ManualClock } from '../store/conformance.js';

const HOUR = 3_600_000;

/** Three handles and one x402 payer whose entries interleave in time, one second apart. */
async function populated(): Promise<{ store: MemoryStore; clock: ManualClock; start: number }> {
  const clock = new ManualClock();
  clock.at = Date.UTC(2026, 0, 1);
  const start = clock.at;
  const store = new MemoryStore({ now: clock.now });
  const hashes = ['h-a', 'h-b', 'h-c'];
  for (const [i, handleHash] of hashes.entries()) await store.createHandle({ handleHash, fingerprint: `tb_s_abc${i}..wxy${i}`, principal: null, ttlMs: 24 * HOUR });
  for (let round = 0; round < 4; round++) {
    for (const handleHash of hashes) {
      clock.advance(1_000);
      await store.grantCredits(handleHash, 'research', round + 1, `round ${round}`);
    }
  }
  clock.advance(1_000);
  const claim = { network: 'eip155:8453', asset: '0xasset', payer: '0xpayer', nonce: '0x01', expiresAt: clock.at + HOUR, claimedAt: clock.at, sku: 'research', tool: 'fetch_readable', amount: '20000' };
  await store.claimPaymentNonce(claim);
  await store.finishPaymentNonce(claim, { state: 'settled', transaction: '0xtx', at: clock.at });
  return { store, clock, start };
}

/** The export's rows (`text`, the trailer line taken off: test/ledger/verify-file.test.ts checks it). */
async function run(store: MemoryStore, options: ExportOptions): Promise<{ text: string; trailer: string; report: Awaited<ReturnType<typeof exportLedger>> }> {
  let text = '';
  const report = await exportLedger(store, options, async (chunk) => void (text += chunk));
  const cut = text.lastIndexOf('{"trailer":');
  return { text: text.slice(0, cut), trailer: text.slice(cut), report };
}

t.test('JSON lines: every entry once, in time order across ledgers, each with its fingerprint or payer', async (t) => {
  const { store } = await populated();
  const { text, report } = await run(store, { format: 'jsonl' });
  const lines = text.trimEnd().split('\n').map((line) => JSON.parse(line) as Record<string, unknown>);
  t.equal(lines.length, 13);
  t.match(report, { accounts: 4, entries: 13, runs: 0 });
  const times = lines.map((line) => Date.parse(line.at as string));
  t.same(times, [...times].sort((a, b) => a - b), 'time order');
  t.same(lines.slice(0, 3).map((line) => line.fingerprint), ['tb_s_abc0..wxy0', 'tb_s_abc1..wxy1', 'tb_s_abc2..wxy2'], 'handles interleave');
  t.match(lines.at(-1), { kind: 'x402_settle', payer: '0xpayer', transaction: '0xtx' });
  t.match(lines[0], { seq: 1, kind: 'adjust', sku: 'research', credits: 1, balanceAfter: 1, ref: null, reason: 'round 0' });
});

t.test('the same order when the export is sorted through runs on disk', async (t) => {
  const { store } = await populated();
  const inMemory = await run(store, { format: 'jsonl' });
  const onDisk = await run(store, { format: 'jsonl', sort: { runSize: 2, fanIn: 2 } });
  t.equal(onDisk.text, inMemory.text);
  t.ok(onDisk.report.runs >= 7, `${onDisk.report.runs} runs`);
});

t.test('CSV: a header, then one row per entry in the same order', async (t) => {
  const { store } = await populated();
  const jsonl = (await run(store, { format: 'jsonl' })).text.trimEnd().split('\n');
  const csv = (await run(store, { format: 'csv' })).text.trimEnd().split('\n');
  t.equal(csv[0], 'at,seq,kind,fingerprint,payer,sku,credits,balanceAfter,ref,tool,amount,currency,network,asset,transaction,reason,prev,ledger');
  t.equal(csv.length, jsonl.length + 1);
  t.match(csv[1], /^2026-01-01T00:00:01\.000Z,1,adjust,tb_s_abc0\.\.wxy0,,research,1,1,,,,,,,,round 0,0{64},$/);
  t.match(csv.at(-1), /,x402_settle,,0xpayer,research,0,0,0x01,fetch_readable,20000,,eip155:8453,0xasset,0xtx,,0{64},$/);
});

t.test('--since is inclusive and --until exclusive', async (t) => {
  const { store, start } = await populated();
  const { text } = await run(store, { format: 'jsonl', since: start + 4_000, until: start + 7_000 });
  const lines = text.trimEnd().split('\n').map((line) => JSON.parse(line) as { at: string });
  t.same(lines.map((line) => Date.parse(line.at) - start), [4_000, 5_000, 6_000]);
  t.equal((await run(store, { format: 'jsonl', since: start + 60_000 })).text, '', 'an empty window writes nothing');
  t.equal((await run(store, { format: 'csv', since: start + 60_000 })).text.trimEnd().split('\n').length, 1, 'CSV: the header alone');
});
