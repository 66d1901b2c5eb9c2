// How entries leave the gateway: the export record, CSV quoting, time bounds, the kept reason.
import t from 'tap';
import { csvHeader, csvRow, exportRecord, parseTimeBound, safeReason } from '../../src/ledger/format.js';
import { redactHandles } from '../../src/observability/fingerprint.js';
import { mintHandle } from '../../src/paywall/handles.js';
import type { LedgerEntry } from '../../src/store/store.js';

const AT = Date.UTC(2026, 0, 31, 12, 0, 0, 250);
const spend: LedgerEntry = { seq: 3, at: AT, kind: 'spend', sku: 'research', credits: -2, balanceAfter: 5, ref: null, fingerprint: 'tb_s_KLeV..EPcw', tool: 'extract_tables' };

t.test('a handle entry is exported with its fingerprint, an ISO time and only the fields it has', async (t) => {
  t.same(exportRecord({ kind: 'handle', handleHash: 'ab12' }, spend), {
    at: '2026-01-31T12:00:00.250Z',
    seq: 3,
    kind: 'spend',
    fingerprint: 'tb_s_KLeV..EPcw',
    sku: 'research',
    credits: -2,
    balanceAfter: 5,
    ref: null,
    tool: 'extract_tables',
  });
  t.notOk(JSON.stringify(exportRecord({ kind: 'handle', handleHash: 'ab12' }, spend)).includes('ab12'), 'never the handle hash');
});

t.test('an x402 entry is exported with the payer address instead of a fingerprint', async (t) => {
  const payer = '0x857b06519e91e3a54538791bdbb0e22373e36b66';
  const entry: LedgerEntry = { seq: 1, at: AT, kind: 'x402_settle', sku: 'research', credits: 0, balanceAfter: 0, ref: '0xnonce', fingerprint: '', payer, amount: '20000', network: 'eip155:8453', asset: '0xasset', transaction: '0xtx', tool: 'fetch_readable' };
  const record = exportRecord({ kind: 'payer', payer }, entry);
  t.match(record, { payer, kind: 'x402_settle', amount: '20000', network: 'eip155:8453', transaction: '0xtx' });
  t.notOk('fingerprint' in record);
});

t.test('CSV: one header, one row per entry, RFC 4180 quoting of commas, quotes and newlines', async (t) => {
  t.equal(csvHeader(), 'at,seq,kind,fingerprint,payer,sku,credits,balanceAfter,ref,tool,amount,currency,network,asset,transaction,reason,prev,ledger');
  const adjust: LedgerEntry = { seq: 1, at: AT, kind: 'adjust', sku: 'research', credits: 4, balanceAfter: 4, ref: null, fingerprint: 'tb_s_KLeV..EPcw', reason: 'goodwill, "sorry"\nsecond line' };
  t.equal(csvRow(exportRecord({ kind: 'handle', handleHash: 'x' }, adjust)), '2026-01-31T12:00:00.250Z,1,adjust,tb_s_KLeV..EPcw,,research,4,4,,,,,,,,"goodwill, ""sorry""\nsecond line",,');
});

t.test('time bounds: ISO dates and date-times, epoch milliseconds; anything else is TB_ERR_INVALID_PARAMS', async (t) => {
  t.equal(parseTimeBound('--since', undefined), undefined);
  t.equal(parseTimeBound('--since', '2026-01-31'), Date.UTC(2026, 0, 31));
  t.equal(parseTimeBound('--since', '2026-01-31T12:00:00Z'), Date.UTC(2026, 0, 31, 12));
  t.equal(parseTimeBound('--since', '2026-01-31T13:00:00+01:00'), Date.UTC(2026, 0, 31, 12));
  t.equal(parseTimeBound('--until', '1767225600000'), 1767225600000);
  for (const bad of ['yesterday', '31/01/2026', '2026-13-45', '', '-5']) t.throws(() => parseTimeBound('--until', bad), { code: 'TB_ERR_INVALID_PARAMS', message: /--until must be/ }, bad);
});

t.test('a kept reason holds no handle (its fingerprint instead), no URL and no control characters', async (t) => {
  const handle = mintHandle();
  const kept = safeReason(`refund ${handle} see https://pay.example/link/abc123?x=1 and\tnext\u0000line`, redactHandles);
  t.notOk(kept.includes(handle));
  t.ok(kept.includes(`${handle.slice(0, 9)}..${handle.slice(-4)}`));
  t.notOk(/https?:|abc123/.test(kept));
  // eslint-disable-next-line no-control-regex -- asserts that no control character is left
  t.notMatch(kept, /[\u0000-\u001f]/);
  t.equal(safeReason('x'.repeat(800), redactHandles).length, 500);
});
