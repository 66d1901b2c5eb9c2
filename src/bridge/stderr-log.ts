// A child's stderr, line by line, into the logger — never to a client. Rate-limited per child (a token
// bucket: a burst, then a steady rate) so a chatty or crashing server cannot flood the gateway's log;
// suppressed lines are counted and reported with the next line that gets through. Lines are cut at
// STDERR_LINE_MAX bytes.
import type { Logger } from '../observability/logger.js';
import { LineSplitter } from './line-splitter.js';

const STDERR_LINE_MAX = 2_000;
const BURST = 50;
const LINES_PER_SECOND = 10;

export class StderrLog {
  readonly #logger: Logger;
  readonly #pid: number | undefined;
  readonly #splitter: LineSplitter;
  readonly #now: () => number;
  #tokens = BURST;
  #refilledAt: number;
  #suppressed = 0;
  /** Lines written after the bridge began stopping the child (counted, not logged), and the first of them. */
  #quiet: { lines: number; first: string } | undefined;

  constructor(logger: Logger, pid: number | undefined, now: () => number = Date.now) {
    this.#logger = logger;
    this.#pid = pid;
    this.#now = now;
    this.#refilledAt = now();
    this.#splitter = new LineSplitter({
      maxLineBytes: STDERR_LINE_MAX,
      onLine: (line, bytes) => this.#line(line, bytes),
      onOverflow: () => 'truncate',
    });
  }

  push(chunk: Buffer): void {
    this.#splitter.push(chunk);
  }

  /**
   * The child is being stopped: what it writes from now on (typically an EPIPE stack from a write to the
   * pipe we closed) is expected, and becomes one debug line when stderr ends.
   */
  quiet(): void {
    this.#quiet ??= { lines: 0, first: '' };
  }

  end(): void {
    this.#splitter.end();
    if (this.#quiet && this.#quiet.lines > 0) {
      this.#logger.debug({ evt: 'bridge_child_stderr_after_stop', pid: this.#pid, lines: this.#quiet.lines, first: this.#quiet.first }, 'the stdio server wrote to stderr while being stopped');
    }
    if (this.#suppressed > 0) this.#logger.info({ evt: 'bridge_child_stderr_suppressed', pid: this.#pid, lines: this.#suppressed }, 'stdio server stderr lines suppressed by the rate limit');
    this.#suppressed = 0;
  }

  #line(line: string, bytes: number): void {
    if (line.trim() === '') return;
    if (this.#quiet) {
      // Kept: the first line naming an error ("Error: write EPIPE"; a stack starts with a source location), else the first.
      this.#quiet.lines += 1;
      if (this.#quiet.first === '' || (!/Error:/.test(this.#quiet.first) && /Error:/.test(line))) this.#quiet.first = line.slice(0, 200);
      return;
    }
    const now = this.#now();
    this.#tokens = Math.min(BURST, this.#tokens + ((now - this.#refilledAt) / 1000) * LINES_PER_SECOND);
    this.#refilledAt = now;
    if (this.#tokens < 1) {
      this.#suppressed += 1;
      return;
    }
    this.#tokens -= 1;
    const fields: Record<string, unknown> = { evt: 'bridge_child_stderr', pid: this.#pid, line: bytes > STDERR_LINE_MAX ? `${line}…` : line };
    if (this.#suppressed > 0) fields.suppressedBefore = this.#suppressed;
    this.#suppressed = 0;
    this.#logger.info(fields, 'stdio server stderr');
  }
}
