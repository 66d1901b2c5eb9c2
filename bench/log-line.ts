// Micro-bench of the per-call log line (issue 14): CPU µs per line (process.cpuUsage, so libuv's
// threads writing asynchronously count too), for the line as it was built before (the redacting
// root logger, the facts spread in) and as it is now (createCallLogger), to a synchronous and to the
// batched asynchronous destination `start` uses. The lines go to fd 1; the figures to stderr:
//
//   node --import tsx bench/log-line.ts > /tmp/lines.log          # stdout a file (as in npm run bench)
//   node --import tsx bench/log-line.ts | cat > /dev/null          # stdout a pipe (as under docker / systemd)
//   node --import tsx bench/log-line.ts --lines 200000
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import pino from 'pino';
import { createCallLogger, createLogger, flushLogs, stdoutDestination, type Logger } from '../src/observability/logger.js';

const argv = process.argv.slice(2);
const LINES = Number(argv[argv.indexOf('--lines') + 1] || 100_000);
const WARMUP = 20_000;

const facts = { rail: 'credits' as const, tokenPresented: true, tokenFingerprint: 'tb_s_KLeV..EPcw', tokenRecognised: true };
const x402 = undefined as Record<string, unknown> | undefined;
const resumed = false;

/** The line as decide.ts wrote it before issue 14: the root logger (redaction on), object spreads. */
const before = (logger: Logger) => (i: number) =>
  logger.info({ evt: 'call', reqId: `req-${i}`, server: 'default', tool: 'echo_paid', sku: 'bench', ...facts, outcome: 'authorised', cost: 1, durationMs: 3, ...(resumed ? { resumed: true } : {}), ...x402 });

/** The line now: the pre-built call logger. */
const after = (logger: Logger) => {
  const write = createCallLogger(logger, 'default');
  return (i: number) => write({ reqId: `req-${i}`, tool: 'echo_paid', sku: 'bench', ...facts, outcome: 'authorised', cost: 1, durationMs: 3 });
};

/** Lines in bursts of 20 (≈ 5 KiB), yielding between them as a server does between requests (the async writer runs then). */
async function write(line: (i: number) => void, count: number): Promise<void> {
  for (let i = 0; i < count; i++) {
    line(i);
    if (i % 20 === 19) await yieldToLoop();
  }
}

async function measure(name: string, logger: Logger, line: (i: number) => void): Promise<number> {
  await write(line, WARMUP);
  await flushLogs(logger);
  const start = process.cpuUsage();
  await write(line, LINES);
  await flushLogs(logger); // the asynchronous writes are part of the cost
  const used = process.cpuUsage(start);
  const perLine = (used.user + used.system) / LINES;
  process.stderr.write(`${name.padEnd(52)} ${perLine.toFixed(2).padStart(6)} µs/line\n`);
  return perLine;
}

const sync = createLogger('info', pino.destination({ fd: 1, sync: true }));
const batched = createLogger('info', stdoutDestination());
process.stderr.write(`${LINES} lines each, after ${WARMUP} warm-up lines\n`);
const results = {
  beforeSync: await measure('before: redacting root logger, sync stdout', sync, before(sync)),
  afterSync: await measure('after: call logger, sync stdout', sync, after(sync)),
  beforeBatched: await measure('before line, batched async stdout', batched, before(batched)),
  afterBatched: await measure('after: call logger, batched async stdout (start)', batched, after(batched)),
};
process.stderr.write(`${JSON.stringify(results)}\n`);
