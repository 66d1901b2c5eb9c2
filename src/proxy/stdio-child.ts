// One spawned stdio MCP server: newline-delimited JSON-RPC on stdin/stdout, stderr to the debug log.
// It knows nothing about MCP beyond framing; upstream-stdio.ts owns initialisation, routing and restarts.
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { Logger } from '../observability/logger.js';

/** A stderr line longer than this is cut before it reaches the log (a child may dump whole payloads). */
const STDERR_LINE_MAX = 2_000;
const KILL_GRACE_MS = 2_000;

export interface ChildExit {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** Set when the process could not be spawned at all (e.g. ENOENT). */
  error?: Error;
}

export interface ChildHandlers {
  onMessage(message: unknown): void;
  onExit(exit: ChildExit): void;
}

export class StdioChild {
  readonly startedAt = Date.now();
  readonly #process: ChildProcessWithoutNullStreams;
  readonly #logger: Logger;
  readonly #exited: Promise<void>;
  #alive = true;

  private constructor(process: ChildProcessWithoutNullStreams, logger: Logger, handlers: ChildHandlers) {
    this.#process = process;
    this.#logger = logger;
    let markExited!: () => void;
    this.#exited = new Promise((resolve) => (markExited = resolve));
    // 'error' (spawn failure) and 'exit' can both fire; the owner hears about the end exactly once.
    const finish = (exit: ChildExit): void => {
      if (!this.#alive) return;
      this.#alive = false;
      markExited();
      handlers.onExit(exit);
    };
    process.on('error', (error) => finish({ code: null, signal: null, error }));
    process.on('exit', (code, signal) => finish({ code, signal }));
    process.stdin.on('error', (error) => logger.debug({ evt: 'upstream_stdin_error', err: error.message }, 'stdio child stdin closed'));

    createInterface({ input: process.stdout, crlfDelay: Infinity }).on('line', (line) => {
      if (line.trim() === '') return;
      let message: unknown;
      try {
        message = JSON.parse(line);
      } catch {
        logger.debug({ evt: 'upstream_stdout_garbage', line: line.slice(0, STDERR_LINE_MAX) }, 'stdio child wrote a non-JSON line');
        return;
      }
      handlers.onMessage(message);
    });
    createInterface({ input: process.stderr, crlfDelay: Infinity }).on('line', (line) => {
      logger.debug({ evt: 'upstream_stderr', line: line.length > STDERR_LINE_MAX ? `${line.slice(0, STDERR_LINE_MAX)}…` : line }, 'stdio child stderr');
    });
  }

  static spawn(command: readonly string[], env: NodeJS.ProcessEnv, logger: Logger, handlers: ChildHandlers): StdioChild {
    const [file, ...args] = command;
    if (file === undefined) throw new TypeError('upstream.command must name a program');
    const process = spawn(file, args, { stdio: ['pipe', 'pipe', 'pipe'], env, windowsHide: true });
    return new StdioChild(process, logger, handlers);
  }

  get alive(): boolean {
    return this.#alive;
  }

  get pid(): number | undefined {
    return this.#process.pid;
  }

  /** Writes one message as one line; false when the child is gone. */
  write(message: unknown): boolean {
    if (!this.#alive || !this.#process.stdin.writable) return false;
    this.#process.stdin.write(`${JSON.stringify(message)}\n`);
    return true;
  }

  /** SIGTERM, then SIGKILL if it is still there after 2 s. Resolves once it has exited. */
  async kill(): Promise<void> {
    if (!this.#alive) return;
    this.#process.stdin.end();
    this.#process.kill('SIGTERM');
    const force = setTimeout(() => {
      if (this.#alive) {
        this.#logger.warn({ evt: 'upstream_kill', pid: this.pid }, 'stdio child ignored SIGTERM for 2 s; sending SIGKILL');
        this.#process.kill('SIGKILL');
      }
    }, KILL_GRACE_MS);
    await this.#exited;
    clearTimeout(force);
  }
}
