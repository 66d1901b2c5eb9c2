// Call deadlines without a timer per call (STYLE: no per-request timers). AbortSignal.timeout plus
// AbortSignal.any cost a timer, two signals and weak references per priced call, measurable in the
// paid path's profile (bench/RESULTS.md, optimisation log). Every priced call has the same budget
// (upstream.callDeadline), so deadlines arrive nearly in order: they are kept sorted (inserted from
// the tail, usually in one step) and one timer, armed for the earliest, expires whatever is due.

interface Entry {
  at: number;
  onExpire: () => void;
  done: boolean;
}

export class DeadlineQueue {
  readonly #clock: () => number;
  /** Sorted by `at`; finished entries stay until they reach the head (lazy removal). */
  #entries: Entry[] = [];
  #timer: NodeJS.Timeout | null = null;
  #timerAt = Number.POSITIVE_INFINITY;

  /** @param clock monotonic milliseconds (independent of the gateway's injectable wall clock) */
  constructor(clock: () => number = () => performance.now()) {
    this.#clock = clock;
  }

  /** Calls `onExpire` once, `ms` from now, unless the returned cancel function is called first. */
  add(ms: number, onExpire: () => void): () => void {
    const entry: Entry = { at: this.#clock() + Math.max(0, ms), onExpire, done: false };
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

  /** Entries not yet expired or cancelled (for tests). */
  get size(): number {
    return this.#entries.filter((entry) => !entry.done).length;
  }

  #dropFinishedHead(): void {
    const entries = this.#entries;
    while (entries.length > 0 && (entries[0] as Entry).done) entries.shift();
    if (entries.length === 0 && this.#timer) {
      clearTimeout(this.#timer);
      this.#timer = null;
      this.#timerAt = Number.POSITIVE_INFINITY;
    }
  }

  #arm(at: number): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timerAt = at;
    this.#timer = setTimeout(() => this.#expire(), Math.max(1, Math.ceil(at - this.#clock())));
    // Calls in flight hold their sockets open; the deadline alone never keeps a process alive.
    this.#timer.unref();
  }

  #expire(): void {
    this.#timer = null;
    this.#timerAt = Number.POSITIVE_INFINITY;
    const now = this.#clock();
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
