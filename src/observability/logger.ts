// pino, JSON lines, with redaction paths compiled once at construction. The call path never hands a
// handle, bearer token, checkout URL or argument to the logger in the first place; redaction is the
// second line of defence for headers and error objects.
//
// Two costs are pushed off the hot path (issue 14, bench/RESULTS.md "log line"):
// - the per-call line goes through `createCallLogger`: a child with its bindings serialised once and
//   no redaction. pino runs the `*.x` wildcard redactor on every top-level key of every line
//   (≈ 9 µs of a 14 µs line); the call line is built field by field from a closed list of names,
//   enums, numbers and fingerprints, so there is nothing for it to hide (test/observability/call-line.test.ts);
// - stdout is written in batches (`stdoutDestination`): ≥ 4 KiB or every 250 ms, asynchronously,
//   and never more than 8 MiB held when stdout is not being read (beyond that lines are dropped, and
//   one warning goes to stderr). `flushLogs` empties the buffer before exit (start.ts, on SIGTERM).
import pino, { type Logger } from 'pino';
import { MASK } from '../config/mask.js';

export type { Logger };

const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  'headers.authorization',
  'headers.cookie',
  '*.apiKey',
  '*.webhookSecret',
  '*.hashSecret',
  'apiKey',
  'webhookSecret',
  'hashSecret',
  // The effective config (start line) is masked before it is logged; these catch an unmasked one.
  'config.payments.moove.apiKey',
  'config.payments.moove.webhookSecret',
  'config.handles.hashSecret',
  'config.upstream.headers.*',
];

/** Already-masked values (config/mask.ts: "***", or "" for unset) stay as they are; anything else is hidden. */
const censor = (value: unknown): unknown => (value === MASK || value === '' ? value : '[redacted]');

/** The batching of stdout (bench/log-line.ts measured the choices). */
export const STDOUT_BUFFER = {
  /** Bytes gathered before one write(2): ~20 call lines. */
  minLength: 4096,
  /** A quiet gateway's lines still leave within this many ms. */
  flushIntervalMs: 250,
  /** Held at most while stdout does not drain; lines past it are dropped (a stuck reader must not grow memory). */
  maxLength: 8 * 1024 * 1024,
} as const;

/** Asynchronous, batched stdout: what `start` logs to. */
export function stdoutDestination(fd = 1): pino.DestinationStream {
  const stream = pino.destination({ fd, sync: false, minLength: STDOUT_BUFFER.minLength, maxLength: STDOUT_BUFFER.maxLength, periodicFlush: STDOUT_BUFFER.flushIntervalMs });
  let warned = false;
  stream.on('drop', () => {
    if (warned) return;
    warned = true;
    process.stderr.write(`tollbooth: log lines dropped: stdout has not drained ${STDOUT_BUFFER.maxLength} bytes (is anything reading it?)\n`);
  });
  return stream;
}

export function createLogger(level: string, destination?: pino.DestinationStream): Logger {
  const options: pino.LoggerOptions = {
    level,
    base: { name: 'tollbooth' },
    timestamp: pino.stdTimeFunctions.isoTime,
    redact: { paths: REDACT_PATHS, censor },
    formatters: { level: (label) => ({ level: label }) },
  };
  return pino(options, destination ?? stdoutDestination());
}

/**
 * Waits (at most `timeoutMs`) until every line logged so far has been handed to the OS. Never
 * rejects: a destination that cannot flush must not keep the process from exiting.
 */
export function flushLogs(logger: Logger, timeoutMs = 5_000): Promise<void> {
  return new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, timeoutMs);
    timer.unref();
    const done = (): void => {
      clearTimeout(timer);
      resolve();
    };
    try {
      logger.flush(done);
    } catch {
      done();
    }
  });
}

/**
 * The one line of a priced call (SPEC §10). Each field is named here, so nothing else can ride along:
 * names from the config, enums, numbers, the token's fingerprint and the x402 payer shortened.
 */
export interface CallLine {
  reqId: string | undefined;
  tool: string;
  sku: string;
  rail: 'credits' | 'x402';
  tokenPresented: boolean;
  tokenFingerprint: string | null;
  tokenRecognised: boolean;
  outcome: string;
  cost: number;
  durationMs: number;
  /** Concluded on a resumed stream (SPEC §6.5). */
  resumed?: boolean;
  /** The reservation id of a call that held credits: the `ref` of its `spend` ledger entry when committed. */
  ref?: string | undefined;
  /** x402 (SPEC §19): payer shortened, network, amount in atomic units, whether the payment was settled. */
  x402?: { payer: string; network: string; amount: string; settled: boolean } | undefined;
}

export type CallLogger = (line: CallLine) => void;

/**
 * A call-line writer for one endpoint: `evt` and `server` serialised once (a pino child), no
 * redaction (see the top of this file), the line copied field by field from `CallLine`.
 */
export function createCallLogger(logger: Logger, server: string): CallLogger {
  const child = logger.child({ evt: 'call', server }, { redact: { paths: [] } });
  return (line) => {
    if (!child.isLevelEnabled('info')) return;
    const x402 = line.x402;
    child.info(
      x402
        ? { reqId: line.reqId, tool: line.tool, sku: line.sku, rail: line.rail, tokenPresented: line.tokenPresented, tokenFingerprint: line.tokenFingerprint, tokenRecognised: line.tokenRecognised, outcome: line.outcome, cost: line.cost, durationMs: line.durationMs, resumed: line.resumed === true ? true : undefined, payer: x402.payer, network: x402.network, amount: x402.amount, settled: x402.settled }
        : { reqId: line.reqId, tool: line.tool, sku: line.sku, rail: line.rail, tokenPresented: line.tokenPresented, tokenFingerprint: line.tokenFingerprint, tokenRecognised: line.tokenRecognised, outcome: line.outcome, cost: line.cost, durationMs: line.durationMs, resumed: line.resumed === true ? true : undefined, ref: line.ref },
    );
  };
}
