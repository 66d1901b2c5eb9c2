// Newline framing with a cap on the line being assembled (SPEC §5.5: every child line capped).
import t from 'tap';
import { LineSplitter } from '../../src/bridge/line-splitter.js';

function split(chunks: (string | Buffer)[], maxLineBytes: number, mode: 'stop' | 'truncate' = 'stop') {
  const lines: [string, number][] = [];
  const overflows: number[] = [];
  const splitter = new LineSplitter({ maxLineBytes, onLine: (line, bytes) => void lines.push([line, bytes]), onOverflow: (bytes) => (overflows.push(bytes), mode) });
  for (const chunk of chunks) splitter.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk));
  splitter.end();
  return { lines, overflows, stopped: splitter.stopped };
}

t.test('lines across chunks, CRLF, and a last line without newline', async (t) => {
  t.strictSame(split(['{"a":', '1}\n{"b"', ':2}\r\n', 'tail'], 100).lines, [['{"a":1}', 7], ['{"b":2}', 8], ['tail', 4]]);
});

t.test('a UTF-8 character split across chunks is decoded whole', async (t) => {
  const bytes = Buffer.from('"é€"\n');
  t.strictSame(split([bytes.subarray(0, 2), bytes.subarray(2, 5), bytes.subarray(5)], 100).lines, [['"é€"', 7]]);
});

t.test('stop mode: past the cap nothing more is kept or delivered', async (t) => {
  const result = split(['ok\n', 'x'.repeat(6), 'x'.repeat(6), '\nafter\n'], 10);
  t.strictSame(result.lines, [['ok', 2]]);
  t.strictSame(result.overflows, [12]);
  t.ok(result.stopped);
});

t.test('a line of exactly the cap passes', async (t) => {
  t.strictSame(split(['x'.repeat(10), '\n'], 10).lines, [['x'.repeat(10), 10]]);
});

t.test('truncate mode keeps the first bytes and reports the real size', async (t) => {
  const result = split(['x'.repeat(8), 'y'.repeat(8), 'z\nnext\n'], 10, 'truncate');
  t.strictSame(result.lines, [['xxxxxxxxyy', 17], ['next', 4]]);
});

t.test('memory stays at the cap however long the line (100 MB in 64 KiB chunks)', async (t) => {
  const chunk = Buffer.alloc(64 * 1024, 0x61);
  let held = 0;
  const splitter = new LineSplitter({ maxLineBytes: 1024 * 1024, onLine: () => undefined, onOverflow: () => 'stop' });
  for (let i = 0; i < 1600 && !splitter.stopped; i++) {
    splitter.push(chunk);
    held = i;
  }
  t.ok(splitter.stopped);
  t.ok(held < 20, `stopped after ${held + 1} chunks`);
});
