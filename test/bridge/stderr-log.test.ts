// A child's stderr reaches the log, rate-limited and cut, never a client.
import t from 'tap';
import { StderrLog } from '../../src/bridge/stderr-log.js';
import { captureLogger } from './helpers.js';

t.test('lines are logged with the pid; a flood is rate-limited and the suppressed lines counted', async (t) => {
  const { logger, lines } = captureLogger();
  let now = 0;
  const log = new StderrLog(logger, 42, () => now);
  log.push(Buffer.from('starting\n\n'));
  t.match(lines, [{ evt: 'bridge_child_stderr', pid: 42, line: 'starting' }], 'blank lines skipped');
  log.push(Buffer.from('x\n'.repeat(200)));
  t.equal(lines.length, 50, 'a burst of 50, then nothing');
  now += 1_000;
  log.push(Buffer.from('after a second\n'));
  t.match(lines.at(-1), { line: 'after a second', suppressedBefore: 151 }, 'the next line says how many were dropped');
  log.push(Buffer.from('y\n'.repeat(30)));
  log.end();
  t.match(lines.at(-1), { evt: 'bridge_child_stderr_suppressed', lines: 21 }, 'and so does the end of the stream');
});

t.test('a long line is cut at 2,000 bytes', async (t) => {
  const { logger, lines } = captureLogger();
  const log = new StderrLog(logger, 1);
  log.push(Buffer.from(`${'z'.repeat(10_000)}\n`));
  t.equal((lines[0]!.line as string).length, 2_001);
  t.match(lines[0]!.line, /…$/);
});
