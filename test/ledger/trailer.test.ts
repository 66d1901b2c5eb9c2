// The export trailer: canonical text, a mac over exactly that text, and distinct ledger names.
import { createHmac } from 'node:crypto';
import t from 'tap';
import { LedgerNames, macMatches, trailerLine, type Trailer } from '../../src/ledger/trailer.js';

const trailer: Trailer = {
  entries: 2,
  exportedAt: '2026-02-01T00:00:00.000Z',
  format: 'jsonl',
  since: null,
  until: null,
  lastHash: { 'tb_s_abcd..wxyz': 'a'.repeat(64) },
  ledgers: { 'tb_s_abcd..wxyz': { entries: 2, firstSeq: 1, lastSeq: 2 } },
};

t.test('the trailer line: canonical JSON, then the mac over exactly that text (null without a key)', async (t) => {
  const text = '{"entries":2,"exportedAt":"2026-02-01T00:00:00.000Z","format":"jsonl","lastHash":{"tb_s_abcd..wxyz":"' + 'a'.repeat(64) + '"},"ledgers":{"tb_s_abcd..wxyz":{"entries":2,"firstSeq":1,"lastSeq":2}},"since":null,"until":null}';
  t.equal(trailerLine(trailer, ''), `{"trailer":${text},"mac":null}`);
  const mac = createHmac('sha256', 'k').update(text).digest('hex');
  t.equal(trailerLine(trailer, 'k'), `{"trailer":${text},"mac":"${mac}"}`);
  t.ok(macMatches(trailer, mac, 'k'));
  t.notOk(macMatches(trailer, mac, 'other'));
  t.notOk(macMatches({ ...trailer, entries: 3 }, mac, 'k'), 'any change to the trailer');
  t.notOk(macMatches(trailer, 'not hex', 'k'));
});

t.test('ledger names: the fingerprint or payer, "#n" when taken or empty', async (t) => {
  const names = new LedgerNames();
  t.equal(names.name('tb_s_abcd..wxyz'), 'tb_s_abcd..wxyz');
  t.equal(names.name('tb_s_abcd..wxyz'), 'tb_s_abcd..wxyz#2');
  t.equal(names.name(''), '(no fingerprint)#1');
  t.equal(names.name(''), '(no fingerprint)#2');
  t.equal(names.name('0xabc'), '0xabc');
});
