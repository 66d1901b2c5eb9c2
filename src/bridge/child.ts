// One spawned stdio MCP server: newline-delimited JSON-RPC on stdin/stdout, stderr to the log. It knows
// framing and limits, nothing about MCP: every stdout line is capped at `maxLineBytes` (a longer one
// kills the child — memory stays bounded while it is being read), and stdin writes respect backpressure:
// a child that stops reading fills a bounded queue, after which write() answers 'full' instead of
// buffering without end.
// Each child leads its own process group (SPEC §22): stopping it signals the group, so a wrapper (`npx`,
// `npm exec`, a shell script) and the server it started stop together, and a Ctrl-C in the gateway's
// terminal reaches the gateway only (it then stops its children itself).
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import type { Logger } from '../observability/logger.js';
import { LineSplitter } from './line-splitter.js';
import { StderrLog } from './stderr-log.js';
import { systemClock } from '../clock.js';

/** SIGKILL to the group this long after SIGTERM, unless the options say otherwise (upstream.stdio.killTimeout). */
const DEFAULT_KILL_TIMEOUT_MS = 5_000;
/** After SIGKILL, how long the pipes may stay open (a process that left the group holds them) before we let go. */
const ABANDON_AFTER_KILL_MS = 2_000;
const GARBAGE_SAMPLE = 200;

export interface ChildExit {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** Set when the process could not be spawned at all (e.g. ENOENT). */
  error?: Error;
  /** Set when the bridge stopped it, and why. */
  stoppedBecause?: 'line_too_long' | 'stopped';
}

export interface ChildOptions {
  command: readonly string[];
  /** The child's whole environment (bridge/child-env.ts builds it: given, never inherited). */
  env: NodeJS.ProcessEnv;
  /** Working directory (the config file's directory, so relative paths in the command resolve there). */
  cwd?: string;
  /** SIGTERM to the group, then SIGKILL this long after (default 5 s). */
  killTimeoutMs?: number;
  logger: Logger;
  maxLineBytes: number;
  /** Bytes that may wait in the child's stdin before write() refuses (a message alone is always accepted). */
  maxStdinBytes: number;
}

export interface ChildHandlers {
  /** One parsed stdout line, and its size in bytes. */
  onMessage(message: unknown, bytes: number): void;
  onExit(exit: ChildExit): void;
}

export type WriteOutcome = 'ok' | 'full' | 'gone';

/** A sentence for a client or a log line: why the child is gone. */
export function describeExit(exit: ChildExit, maxLineBytes: number): string {
  if (exit.stoppedBecause === 'line_too_long') return `the stdio server wrote a line longer than ${maxLineBytes} bytes (upstream.maxResponseBytes) and was stopped`;
  if (exit.error) return `the stdio server could not be started (${exit.error.message})`;
  if (exit.stoppedBecause === 'stopped') return 'the stdio server was stopped';
  return `the stdio server exited (${exit.signal ? `signal ${exit.signal}` : `code ${String(exit.code)}`})`;
}

export class StdioChild {
  readonly startedAt = systemClock.monotonic();
  readonly exited: Promise<ChildExit>;
  readonly #process: ChildProcessWithoutNullStreams;
  readonly #options: ChildOptions;
  #alive = true;
  #stoppedBecause: ChildExit['stoppedBecause'];
  #stopping: Promise<void> | undefined;
  readonly #stderr: StderrLog;

  private constructor(process: ChildProcessWithoutNullStreams, options: ChildOptions, handlers: ChildHandlers) {
    this.#process = process;
    this.#options = options;
    const { logger } = options;
    let markExited!: (exit: ChildExit) => void;
    this.exited = new Promise((resolve) => (markExited = resolve));
    // 'error' (spawn failure) and 'exit' can both fire; the owner hears about the end exactly once.
    const finish = (exit: ChildExit): void => {
      if (!this.#alive) return;
      this.#alive = false;
      // Whatever the server started and left behind in its group (helpers that closed their pipes) goes with it.
      if (this.#stopping === undefined) this.#signalGroup('SIGTERM');
      if (this.#stoppedBecause) exit.stoppedBecause = this.#stoppedBecause;
      markExited(exit);
      handlers.onExit(exit);
    };
    // 'close', not 'exit': a server that answers and exits at once must have its last lines read first.
    process.on('error', (error) => finish({ code: null, signal: null, error }));
    process.on('close', (code, signal) => finish({ code, signal }));
    // EPIPE on a child that exited: expected, one debug line.
    process.stdin.on('error', (error) => logger.debug({ evt: 'bridge_child_stdin_error', pid: process.pid, err: error.message }, 'stdio server stdin closed'));

    const stdout = new LineSplitter({
      maxLineBytes: options.maxLineBytes,
      onOverflow: (bytes) => {
        logger.warn({ evt: 'bridge_child_line_too_long', pid: process.pid, bytes, maxLineBytes: options.maxLineBytes }, 'stdio server wrote a line over the cap; stopping it');
        void this.kill('line_too_long');
        return 'stop';
      },
      onLine: (line, bytes) => {
        if (line.trim() === '' || !this.#alive) return;
        let message: unknown;
        try {
          message = JSON.parse(line);
        } catch {
          logger.debug({ evt: 'bridge_child_stdout_garbage', pid: process.pid, line: line.slice(0, GARBAGE_SAMPLE) }, 'stdio server wrote a non-JSON line');
          return;
        }
        handlers.onMessage(message, bytes);
      },
    });
    process.stdout.on('data', (chunk: Buffer) => stdout.push(chunk));
    process.stdout.on('end', () => stdout.end());
    const stderr = new StderrLog(logger, process.pid);
    this.#stderr = stderr;
    process.stderr.on('data', (chunk: Buffer) => stderr.push(chunk));
    process.stderr.on('end', () => stderr.end());
  }

  static spawn(options: ChildOptions, handlers: ChildHandlers): StdioChild {
    const [file, ...args] = options.command;
    if (file === undefined) throw new TypeError('the stdio command must name a program');
    // detached: the child leads a new process group (stopped as a group; our terminal's signals are ours).
    const process = spawn(file, args, { stdio: ['pipe', 'pipe', 'pipe'], env: options.env, cwd: options.cwd, detached: true, windowsHide: true });
    return new StdioChild(process, options, handlers);
  }

  get alive(): boolean {
    return this.#alive;
  }

  get pid(): number | undefined {
    return this.#process.pid;
  }

  /** Bytes written to stdin that the child has not read yet (beyond the pipe's own buffer). */
  get queuedBytes(): number {
    return this.#process.stdin.writableLength;
  }

  /** Whether `bytes` more would fit in the stdin queue now. */
  hasRoomFor(bytes: number): boolean {
    const queued = this.queuedBytes;
    return queued === 0 || queued + bytes <= this.#options.maxStdinBytes;
  }

  /** Writes one message as one line: 'full' when the child is not reading and the queue is at its cap. */
  write(message: unknown): WriteOutcome {
    if (!this.#alive || !this.#process.stdin.writable) return 'gone';
    const line = `${JSON.stringify(message)}\n`;
    if (!this.hasRoomFor(Buffer.byteLength(line))) return 'full';
    this.#process.stdin.write(line);
    return 'ok';
  }

  /** Stops reading stdout (the child blocks on its next write once the pipe is full): client-side backpressure. */
  pauseOutput(): void {
    this.#process.stdout.pause();
  }

  resumeOutput(): void {
    if (this.#alive) this.#process.stdout.resume();
  }

  /**
   * SIGTERM to the child's process group, SIGKILL to the group after `killTimeoutMs`. Resolves once the
   * child has exited and its pipes are closed (or, should something outside the group hold them, a
   * moment after the SIGKILL).
   */
  kill(because: 'line_too_long' | 'stopped' = 'stopped'): Promise<void> {
    if (this.#stopping) return this.#stopping;
    if (!this.#alive) return Promise.resolve();
    this.#stoppedBecause ??= because;
    // What it writes to stderr from now on (an EPIPE stack, say) is the noise of being stopped: one debug line.
    this.#stderr.quiet();
    // Whatever it writes from now on is unwanted; destroying stdout also lets 'close' come without a reader.
    this.#process.stdout.destroy();
    this.#process.stdin.end();
    this.#signalGroup('SIGTERM');
    const killTimeoutMs = this.#options.killTimeoutMs ?? DEFAULT_KILL_TIMEOUT_MS;
    let abandon: NodeJS.Timeout | undefined;
    const force = setTimeout(() => {
      if (!this.#alive) return;
      this.#options.logger.warn({ evt: 'bridge_child_kill', pid: this.pid, killTimeoutMs }, `stdio server still running ${killTimeoutMs} ms after SIGTERM; sending SIGKILL to its process group`);
      this.#signalGroup('SIGKILL');
      abandon = setTimeout(() => {
        this.#process.stdin.destroy();
        this.#process.stderr.destroy();
      }, ABANDON_AFTER_KILL_MS);
    }, killTimeoutMs);
    this.#stopping = this.exited.then(() => {
      clearTimeout(force);
      clearTimeout(abandon);
    });
    return this.#stopping;
  }

  #signalGroup(signal: NodeJS.Signals): void {
    const pid = this.#process.pid;
    if (pid === undefined) return;
    try {
      process.kill(-pid, signal);
    } catch {
      // ESRCH: the group is gone already
    }
  }
}
