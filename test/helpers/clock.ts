// Clocks for tests (src/clock.ts). TestClock: time moves only when the test says so; advance(ms) fires the
// timers that fall due, in order, each seeing the clock at its own due time. wallClock(now): a test's
// wall time with Node's real timers, for tests that only move the date. skippingClock(now): a test's wall
// time with timers that fire without real waiting, for tests that drive code which waits out a bound.
// waitFor: wait on a condition instead of a fixed sleep.
import { systemClock, type Clock, type ClockTimer } from '../../src/clock.js';

interface Pending extends ClockTimer {
  at: number;
  seq: number;
  fn: () => void;
  cancelled: boolean;
}

export class TestClock implements Clock {
  #wall: number;
  #mono = 0;
  #seq = 0;
  #timers: Pending[] = [];

  /** @param wallStart the epoch ms `now()` starts at (a fixed date, so tests are reproducible) */
  constructor(wallStart = Date.UTC(2026, 0, 1)) {
    this.#wall = wallStart;
  }

  now = (): number => this.#wall;
  monotonic = (): number => this.#mono;

  setTimeout = (fn: () => void, ms: number): ClockTimer => {
    const timer: Pending = { at: this.#mono + Math.max(0, ms), seq: this.#seq++, fn, cancelled: false, unref: () => undefined };
    this.#timers.push(timer);
    return timer;
  };

  clearTimeout = (timer: ClockTimer): void => {
    (timer as Pending).cancelled = true;
    this.#timers = this.#timers.filter((t) => t !== timer);
  };

  /** Timers armed and not yet fired or cleared. */
  get pending(): number {
    return this.#timers.length;
  }

  /**
   * Moves both clocks forward by `ms`, firing every timer that falls due on the way in due order (ties in
   * the order they were set); a timer set by a firing timer fires too if it falls within the window.
   * Awaits the microtasks each firing queues, so promise chains behind a timer settle before the next.
   */
  async advance(ms: number): Promise<void> {
    const end = this.#mono + ms;
    for (;;) {
      const due = this.#timers.filter((t) => t.at <= end).sort((a, b) => a.at - b.at || a.seq - b.seq)[0];
      if (!due) break;
      this.#wall += due.at - this.#mono;
      this.#mono = due.at;
      this.#timers = this.#timers.filter((t) => t !== due);
      due.fn();
      await settle();
    }
    this.#wall += end - this.#mono;
    this.#mono = end;
    await settle();
  }

  /** Moves the wall clock alone (an NTP step); monotonic time and timers do not move. */
  setWall(epochMs: number): void {
    this.#wall = epochMs;
  }
}

/** A few turns of the event loop: lets promise chains started by a timer run to their next real wait. */
async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

/** The test's wall time (`now`) with the process's monotonic clock and Node's timers. */
export function wallClock(now: () => number): Clock {
  return { ...systemClock, now };
}

/**
 * The test's wall time (`now`) with a monotonic clock nobody waits for: each timer fires on a later turn
 * of the event loop (setImmediate, so promise chains and I/O already under way run first), in due order,
 * and monotonic time jumps to its due time. For code that waits on a timer for something that may never
 * happen in the test (a poll loop bounded in monotonic time): the wait runs its whole course, loop by
 * loop, without idling for real. Wall time does not move (the test moves it, as with wallClock).
 */
export function skippingClock(now: () => number): Clock & { readonly fired: number } {
  let mono = 0;
  let seq = 0;
  let fired = 0;
  let timers: Pending[] = [];
  let pumping = false;
  const pump = (): void => {
    const due = timers.sort((a, b) => a.at - b.at || a.seq - b.seq)[0];
    if (!due) {
      pumping = false;
      return;
    }
    timers = timers.filter((t) => t !== due);
    mono = Math.max(mono, due.at);
    fired++;
    due.fn();
    setImmediate(pump);
  };
  return {
    now,
    monotonic: () => mono,
    setTimeout: (fn, ms) => {
      const timer: Pending = { at: mono + Math.max(0, ms), seq: seq++, fn, cancelled: false, unref: () => undefined };
      timers.push(timer);
      if (!pumping) {
        pumping = true;
        setImmediate(pump);
      }
      return timer;
    },
    clearTimeout: (timer) => {
      (timer as Pending).cancelled = true;
      timers = timers.filter((t) => t !== timer);
    },
    /** Timers fired so far: shows a test that the waits it means to skip happened. */
    get fired() {
      return fired;
    },
  };
}

/**
 * Resolves once `condition` holds (checked now, then every `everyMs`); rejects with `what` after `timeoutMs`.
 * For tests that wait for something to happen: the bound is generous because it is only hit on failure.
 */
export async function waitFor(condition: () => boolean | Promise<boolean>, what: string, { timeoutMs = 10_000, everyMs = 10 } = {}): Promise<void> {
  const give = performance.now() + timeoutMs;
  for (;;) {
    if (await condition()) return;
    if (performance.now() > give) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise<void>((resolve) => setTimeout(resolve, everyMs));
  }
}
