// `ledger verify --file` over real exports: a clean export (JSON lines and CSV, signed or not, whole
// or windowed, from the memory store and from Redis) verifies; each tampering — an edited, deleted,
// inserted or reordered row, a truncated file, a changed or stripped trailer — is reported naming
// the ledger's fingerprint (or payer) and the seq.
import { randomBytes } from 'node:crypto';
import t, { type Test } from 'tap';
import { exportLedger, type ExportOptions } from '../../src/ledger/export.js';
import type { ExportFormat } from '../../src/ledger/format.js';
import { verifyExportFile, type FileProblem } from '../../src/ledger/verify-file.js';
import { createLogger } from '../../src/observability/logger.js';
import { MemoryStore } from '../../src/store/memory.js';
import { RedisStore } from '../../src/store/redis.js';
import type { Store } from '../../src/store/store.js';
import { startRedis } from '../helpers/redis-server.js';
import { ManualClock, nonceClaim } from '../store/conformance.js';

const HOUR = 3_600_000;
const KEY = 'test-signing-key';
const PAYER = `0x${'ab'.repeat(20)}`;
/** A reason with the characters JSON and CSV writers treat differently. */
const TRICKY = 'refund, "late" / é 😀 \u2028 back\\slash\nsecond line';

/** Two handles (spends, grants, an adjust with a tricky reason) and one x402 payer, interleaved in time. */
async function populate(store: Store, clock: ManualClock): Promise<void> {
  for (const [i, handleHash] of ['h-a', 'h-b'].entries()) await store.createHandle({ handleHash, fingerprint: `tb_s_abc${i}..wxy${i}`, principal: null, ttlMs: 24 * HOUR });
  for (let round = 0; round < 3; round++) {
    for (const handleHash of ['h-a', 'h-b']) {
      clock.advance(1_000);
      await store.grantCredits(handleHash, 'research', 3, round === 1 ? TRICKY : `round ${round}`);
      clock.advance(1_000);
      const reservationId = `r-${handleHash}-${round}`;
      await store.reserve({ handleHash, principal: null, sku: 'research', cost: 2, reservationId, reservationDeadline: clock.at + 60_000, ttlMs: 24 * HOUR, bucket: null });
      await store.commit(handleHash, reservationId, round === 2 ? 'b/fetch_readable' : 'search');
    }
    clock.advance(1_000);
    const claim = nonceClaim(clock, { payer: PAYER, tool: 'b/fetch_readable' });
    await store.claimPaymentNonce(claim);
    await store.finishPaymentNonce(claim, { state: 'settled', transaction: `0x${'cd'.repeat(32)}`, at: clock.at });
  }
}

async function memoryExport(options: Partial<ExportOptions> & { format: ExportFormat }): Promise<string> {
  const clock = new ManualClock();
  clock.at = Date.UTC(2026, 0, 1);
  const store = new MemoryStore({ now: clock.now });
  await populate(store, clock);
  return exportText(store, { now: clock.at, ...options });
}

async function exportText(store: Store, options: ExportOptions): Promise<string> {
  let text = '';
  await exportLedger(store, options, async (chunk) => void (text += chunk));
  return text;
}

async function* linesOf(text: string): AsyncIterable<string> {
  const lines = text.split('\n');
  if (lines.at(-1) === '') lines.pop();
  yield* lines;
}

async function problemsOf(text: string, signingKey = ''): Promise<FileProblem[]> {
  const problems: FileProblem[] = [];
  const report = await verifyExportFile(linesOf(text), signingKey, (problem) => void problems.push(problem));
  if (report.problems !== problems.length) throw new Error('the report miscounts');
  return problems;
}

const rowsOf = (text: string): string[] => text.trimEnd().split('\n');
/** The index of the row of `fingerprint` with `seq` (JSON lines). */
const rowIndex = (rows: string[], fingerprint: string, seq: number): number => rows.findIndex((row) => row.includes(`"${fingerprint}"`) && row.includes(`"seq":${seq},`));

t.test('a clean export verifies: JSON lines and CSV, signed and unsigned, whole and windowed', async (t) => {
  for (const format of ['jsonl', 'csv'] as const) {
    for (const signingKey of ['', KEY]) {
      const text = await memoryExport({ format, signingKey });
      t.same(await problemsOf(text, signingKey), [], `${format}, ${signingKey === '' ? 'unsigned' : 'signed'}`);
    }
    const windowed = await memoryExport({ format, signingKey: KEY, since: Date.UTC(2026, 0, 1) + 5_500 });
    t.same(await problemsOf(windowed, KEY), [], `${format}, a window that starts mid-ledger`);
  }
  const text = await memoryExport({ format: 'jsonl', signingKey: KEY });
  const trailer = JSON.parse(rowsOf(text).at(-1) as string) as { trailer: { entries: number; lastHash: Record<string, string>; ledgers: Record<string, unknown> }; mac: string };
  t.equal(trailer.trailer.entries, 15);
  t.same(Object.keys(trailer.trailer.lastHash).sort(), [PAYER, 'tb_s_abc0..wxy0', 'tb_s_abc1..wxy1']);
  t.match(trailer.mac, /^[0-9a-f]{64}$/);
  t.match(JSON.parse(rowsOf(await memoryExport({ format: 'jsonl' })).at(-1) as string), { mac: null }, 'no signing key: mac null');
});

t.test('an edited row is reported with its ledger and seq (JSON lines and CSV)', async (t) => {
  const text = await memoryExport({ format: 'jsonl' });
  const rows = rowsOf(text);
  const i = rowIndex(rows, 'tb_s_abc0..wxy0', 2);
  rows[i] = (rows[i] as string).replace('"tool":"search"', '"tool":"extract_tables"');
  t.match(await problemsOf(rows.join('\n')), [{ ledger: 'tb_s_abc0..wxy0', seq: 3, detail: /seq 3's prev is not the hash of seq 2/ }]);

  const csv = await memoryExport({ format: 'csv' });
  const edited = csv.replace(/(tb_s_abc1\.\.wxy1,,research,)-2,1,/, '$1-1,2,');
  t.not(edited, csv);
  t.match(await problemsOf(edited), [{ ledger: 'tb_s_abc1..wxy1', seq: 3, detail: /prev is not the hash of seq 2/ }]);
});

t.test('an edited last row of a ledger is caught by the trailer\'s lastHash', async (t) => {
  const rows = rowsOf(await memoryExport({ format: 'jsonl' }));
  const i = rowIndex(rows, 'tb_s_abc1..wxy1', 6);
  rows[i] = (rows[i] as string).replace('"b/fetch_readable"', '"fetch_readable"');
  t.match(await problemsOf(rows.join('\n')), [{ ledger: 'tb_s_abc1..wxy1', seq: 6, detail: /does not hash to the trailer's lastHash/ }]);
});

t.test('a deleted row is reported as missing, naming the seq', async (t) => {
  const rows = rowsOf(await memoryExport({ format: 'jsonl' }));
  rows.splice(rowIndex(rows, 'tb_s_abc0..wxy0', 3), 1);
  const problems = await problemsOf(rows.join('\n'));
  t.match(problems[0], { ledger: 'tb_s_abc0..wxy0', seq: 4, detail: /seq 3 is missing/ });
  t.ok(problems.some((p) => p.ledger === '(file)' && /counts 15 entries, the file has 14/.test(p.detail)));

  const first = rowsOf(await memoryExport({ format: 'jsonl' }));
  first.splice(rowIndex(first, PAYER, 1), 1);
  t.ok((await problemsOf(first.join('\n'))).some((p) => p.ledger === PAYER && p.seq === 1 && /first row \(seq 1\) is missing/.test(p.detail)), 'the first row of a ledger');
});

t.test('an inserted row is reported, naming the ledger and seq', async (t) => {
  const rows = rowsOf(await memoryExport({ format: 'jsonl' }));
  const i = rowIndex(rows, 'tb_s_abc0..wxy0', 4);
  // A forged grant placed after seq 4, numbered 5 as if it belonged there.
  const forged = JSON.parse(rows[i] as string) as Record<string, unknown>;
  rows.splice(i + 1, 0, JSON.stringify({ ...forged, seq: 5, kind: 'adjust', credits: 100, balanceAfter: 103, tool: undefined, reason: 'forged' }));
  const problems = await problemsOf(rows.join('\n'));
  t.match(problems[0], { ledger: 'tb_s_abc0..wxy0', seq: 5 });
  t.ok(problems.some((p) => p.ledger === 'tb_s_abc0..wxy0' && p.seq === 5 && /reordered, duplicated or inserted/.test(p.detail)), 'the real seq 5 after the forged one');

  const foreign = rowsOf(await memoryExport({ format: 'jsonl' }));
  foreign.splice(3, 0, (foreign[3] as string).replace('tb_s_abc0..wxy0', 'tb_s_zzzz..zzzz').replace('tb_s_abc1..wxy1', 'tb_s_zzzz..zzzz'));
  t.ok((await problemsOf(foreign.join('\n'))).some((p) => p.ledger === 'tb_s_zzzz..zzzz' && /does not list this ledger/.test(p.detail)), 'a ledger the trailer does not list');
});

t.test('reordered rows are reported, naming the ledger and seq', async (t) => {
  const rows = rowsOf(await memoryExport({ format: 'jsonl' }));
  const a = rowIndex(rows, 'tb_s_abc1..wxy1', 2);
  const b = rowIndex(rows, 'tb_s_abc1..wxy1', 3);
  [rows[a], rows[b]] = [rows[b] as string, rows[a] as string];
  const problems = await problemsOf(rows.join('\n'));
  t.ok(problems.some((p) => p.ledger === 'tb_s_abc1..wxy1' && p.seq === 3 && /missing/.test(p.detail)), 'seq 3 where 2 was due');
  t.ok(problems.some((p) => p.ledger === 'tb_s_abc1..wxy1' && p.seq === 2 && /reordered/.test(p.detail)), 'seq 2 after 3');
});

t.test('a truncated file is reported: no trailer, or a cut row', async (t) => {
  for (const format of ['jsonl', 'csv'] as const) {
    const rows = rowsOf(await memoryExport({ format }));
    t.match(await problemsOf(rows.slice(0, -4).join('\n')), [{ ledger: '(file)', detail: /no trailer line: the file is truncated/ }], `${format}: whole lines cut`);
  }
  const text = await memoryExport({ format: 'jsonl' });
  const cut = text.slice(0, text.lastIndexOf('\n{"trailer":') - 20);
  const problems = await problemsOf(cut);
  t.ok(problems.some((p) => /not a ledger entry as exported \(not JSON\)/.test(p.detail)), 'a row cut in half');
  t.ok(problems.some((p) => /no trailer line/.test(p.detail)));
  const csv = await memoryExport({ format: 'csv' });
  const inQuote = csv.slice(0, csv.indexOf('second line'));
  t.ok((await problemsOf(inQuote)).some((p) => /ends inside a quoted CSV field|no trailer/.test(p.detail)), 'CSV cut inside a quoted reason');
});

t.test('a changed trailer is reported: by the mac when signed, by the rows when not', async (t) => {
  const signed = rowsOf(await memoryExport({ format: 'jsonl', signingKey: KEY }));
  const changed = [...signed.slice(0, -1), (signed.at(-1) as string).replace(/"exportedAt":"[^"]+"/, '"exportedAt":"2020-01-01T00:00:00.000Z"')].join('\n');
  t.match(await problemsOf(changed, KEY), [{ ledger: '(file)', seq: null, detail: /mac does not match/ }]);
  t.match(await problemsOf(signed.join('\n'), 'another-key'), [{ detail: /mac does not match/ }], 'the wrong key');
  t.match(await problemsOf(signed.join('\n')), [{ detail: /signed but ledger.signingKey is not set here/ }], 'no key to check it: not passed');
  const stripped = [...signed.slice(0, -1), (signed.at(-1) as string).replace(/"mac":"[0-9a-f]+"/, '"mac":null')].join('\n');
  t.match(await problemsOf(stripped, KEY), [{ detail: /not signed, but ledger.signingKey is set/ }], 'a stripped mac');

  const unsigned = rowsOf(await memoryExport({ format: 'jsonl' }));
  const trailer = JSON.parse(unsigned.at(-1) as string) as { trailer: { lastHash: Record<string, string>; ledgers: Record<string, { entries: number }> } };
  trailer.trailer.lastHash['tb_s_abc0..wxy0'] = '0'.repeat(64);
  (trailer.trailer.ledgers[PAYER] as { entries: number }).entries = 9;
  const problems = await problemsOf([...unsigned.slice(0, -1), JSON.stringify(trailer)].join('\n'));
  t.ok(problems.some((p) => p.ledger === 'tb_s_abc0..wxy0' && p.seq === 6 && /lastHash/.test(p.detail)));
  t.ok(problems.some((p) => p.ledger === PAYER && /counts 9 rows/.test(p.detail)));
  t.match(await problemsOf([...unsigned.slice(0, -1), '{"trailer":{"entries":'].join('\n')), [{ detail: /trailer is not readable/ }]);
});

t.test('an export from Redis (chain computed in Lua) verifies, and an edit there is caught', async (t: Test) => {
  const server = await startRedis();
  t.teardown(() => server.stop());
  const clock = new ManualClock();
  clock.at = Date.now();
  const store = await RedisStore.connect({ type: 'redis', redis: { url: server.url, keyPrefix: `tbvf${randomBytes(3).toString('hex')}:` } }, { logger: createLogger('silent'), now: clock.now });
  t.teardown(() => store.close());
  await populate(store, clock);
  for (const format of ['jsonl', 'csv'] as const) {
    const text = await exportText(store, { format, signingKey: KEY, now: clock.at });
    t.same(await problemsOf(text, KEY), [], `${format} from Redis`);
  }
  const rows = rowsOf(await exportText(store, { format: 'jsonl', now: clock.at }));
  const i = rowIndex(rows, 'tb_s_abc1..wxy1', 3);
  t.ok((rows[i] as string).includes('\u2028'));
  rows[i] = (rows[i] as string).replace('\u2028', ' ');
  t.match(await problemsOf(rows.join('\n')), [{ ledger: 'tb_s_abc1..wxy1', seq: 4 }]);
});
