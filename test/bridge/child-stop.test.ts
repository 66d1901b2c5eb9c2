// SPEC §22: a child is stopped as a process group — SIGTERM, then SIGKILL after killTimeout — so a wrapper
// and the server it started stop together even when both ignore SIGTERM. What a stopped child writes to
// stderr (an EPIPE stack, typically) is one debug line, not a stack at info level.
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { StdioChild } from '../../src/bridge/child.js';
import { childEnv } from '../helpers/interop-upstreams.js';
import { newMarker, processesInGroups, processesWith } from '../helpers/processes.js';
import { captureLogger, waitFor } from './helpers.js';

const WRAPPER = fileURLToPath(new URL('../fixtures/bridge/npx-wrapper.mjs', import.meta.url));
// Says it is ready once its SIGTERM handler is in place.
const STUBBORN = "process.on('SIGTERM', () => {}); process.stdin.resume(); setInterval(() => {}, 1000); process.stdout.write('{\"ready\":true}\\n');";

t.test('a wrapper and its server that both ignore SIGTERM: SIGKILL to the group after killTimeout, nothing left', async (t) => {
  const marker = newMarker();
  const log = captureLogger();
  let ready = false;
  const child = StdioChild.spawn(
    { command: [process.execPath, WRAPPER, process.execPath, '-e', STUBBORN, '--', marker], env: childEnv(), logger: log.logger, maxLineBytes: 1024, maxStdinBytes: 1024, killTimeoutMs: 300 },
    { onMessage: () => void (ready = true), onExit: () => undefined },
  );
  await waitFor(() => ready && processesWith(marker).length === 2, 'the wrapper and its server, SIGTERM ignored');
  const group = new Set([child.pid!]);
  t.strictSame(new Set(processesWith(marker).map((p) => p.pgid)), group, 'both in the child\'s own group');
  await child.kill();
  t.ok(log.lines.some((line) => line.evt === 'bridge_child_kill'), 'SIGTERM was not enough: SIGKILL went to the group');
  await waitFor(() => processesInGroups(group).length === 0, 'the group to be empty', 5_000).catch(() => undefined);
  t.strictSame(processesInGroups(group), [], 'no wrapper, no server, no zombie');
});

t.test('stderr written while being stopped (an EPIPE stack) is one debug line', async (t) => {
  const log = captureLogger();
  // Ignores SIGTERM and writes to stdout once stdin ends: the pipe is closed, so Node dies with an EPIPE stack on stderr.
  const script = "process.on('SIGTERM', () => {}); process.stdin.resume(); process.stdin.on('end', () => setInterval(() => process.stdout.write('x'.repeat(65536)), 5)); process.stdout.write('{\"ready\":true}\\n');";
  let ready = false;
  const child = StdioChild.spawn(
    { command: [process.execPath, '-e', script], env: childEnv(), logger: log.logger, maxLineBytes: 1024 * 1024, maxStdinBytes: 1024, killTimeoutMs: 2_000 },
    { onMessage: () => void (ready = true), onExit: () => undefined },
  );
  await waitFor(() => ready, 'the child to be ready');
  await child.kill();
  const stderrLines = log.lines.filter((line) => String(line.evt).startsWith('bridge_child_stderr'));
  t.strictSame(stderrLines.filter((line) => line.level !== 'debug'), [], 'nothing above debug');
  const summary = stderrLines.filter((line) => line.evt === 'bridge_child_stderr_after_stop');
  t.equal(summary.length, 1, 'one line');
  t.match(summary[0], { level: 'debug', first: /EPIPE/ }, 'naming what it was');
  t.ok(Number(summary[0]?.lines) > 1, 'the stack\'s lines counted, not logged');
});
