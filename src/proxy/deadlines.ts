// Call deadlines without a timer per call (STYLE: no per-request timers). AbortSignal.timeout plus
// AbortSignal.any cost a timer, two signals and weak references per priced call, measurable in the
// paid path's profile (bench/RESULTS.md, optimisation log). Every priced call has the same budget
// (upstream.callDeadline), so deadlines arrive nearly in order: they are kept sorted (inserted from
// the tail, usually in one step) and one timer, armed for the earliest, expires whatever is due.
// One queue per process (gateway/memory.ts, built in start.ts and closed at shutdown), shared by every
// gateway a reload builds, so a call the replaced gateway left pending is still released at its deadline;
// a gateway built alone (tests) has its own on its own clock, closed with it.
import { systemClock, type Clock, type ClockTimer } from '../clock.js';

interface Entry {
  at: number;
  onExpire: () => void;
  done: boolean;
}

export class DeadlineQueue {
  readonly #clock: Clock;
  /** Sorted by `at` (monotonic ms); finished entries stay until they reach the head (lazy removal). */
  #entries: Entry[] = [];
  #timer: ClockTimer | null = null;
  #timerAt = Number.POSITIVE_INFINITY;
  #closed = false;

  /** Deadlines are measured on `clock.monotonic()` and fired by `clock.setTimeout`. */
  constructor(clock: Clock = systemClock) {
    this.#clock = clock;
  }

  /** Calls `onExpire` once, `ms` from now, unless the returned cancel function is called first. */
  add(ms: number, onExpire: () => void): () => void {
    const entry: Entry = { at: this.#clock.monotonic() + Math.max(0, ms), onExpire, done: false };
    if (this.#closed) return () => undefined;
    const entries = this.#entries;
    let at = entries.length;
    while (at > 0 && (entries[at - 1] as Entry).at > entry.at) at -= 1;
    if (at === entries.length) entries.push(entry);
    else entries.splice(at, 0, entry);
    if (entry.at < this.#timerAt) this.#arm(entry.at);
    return () => {
      entry.done = true;
      this.#dropFinishedHead();
    };
  }

  /**
   * The gateway has closed (its calls in flight have finished or were cut at the drain): the timer is
   * disarmed and nothing left fires; deadlines added later are never armed.
   */
  close(): void {
    this.#closed = true;
    for (const entry of this.#entries) entry.done = true;
    this.#entries = [];
    if (this.#timer) this.#clock.clearTimeout(this.#timer);
    this.#timer = null;
    this.#timerAt = Number.POSITIVE_INFINITY;
  }

  /** Entries not yet expired or cancelled (for tests). */
  get size(): number {
    return this.#entries.filter((entry) => !entry.done).length;
  }

  #dropFinishedHead(): void {
    const entries = this.#entries;
    while (entries.length > 0 && (entries[0] as Entry).done) entries.shift();
    if (entries.length === 0 && this.#timer) {
      this.#clock.clearTimeout(this.#timer);
      this.#timer = null;
      this.#timerAt = Number.POSITIVE_INFINITY;
    }
  }

  #arm(at: number): void {
    if (this.#timer) this.#clock.clearTimeout(this.#timer);
    this.#timerAt = at;
    this.#timer = this.#clock.setTimeout(() => this.#expire(), Math.max(1, Math.ceil(at - this.#clock.monotonic())));
    // Calls in flight hold their sockets open; the deadline alone never keeps a process alive.
    this.#timer.unref();
  }

  #expire(): void {
    this.#timer = null;
    this.#timerAt = Number.POSITIVE_INFINITY;
    const now = this.#clock.monotonic();
    const entries = this.#entries;
    while (entries.length > 0) {
      const head = entries[0] as Entry;
      if (!head.done && head.at > now) break;
      entries.shift();
      if (head.done) continue;
      head.done = true;
      head.onExpire();
    }
    this.#dropFinishedHead();
    const next = entries[0];
    if (next) this.#arm(next.at);
  }
}
