// The one source of time in the gateway (STYLE: "Time: one injectable clock"). The gateway's deps carry a
// Clock; a module that only needs the wall clock takes `now` (= clock.now), one that waits or arms a timer
// takes the whole Clock, so a test clock (test/helpers/clock.ts) can move time forward without sleeping.
// Redis TIME is not read through this: the Lua scripts that read it keep it (docs/architecture.md "Time").

/** An armed timer; `unref` stops it from keeping the process alive (as Node's own). */
export interface ClockTimer {
  unref(): void;
}

/** Members are function-typed properties, not methods: callers pass `clock.now` around unbound. */
export interface Clock {
  /** Wall-clock epoch milliseconds: timestamps written to the store, expiries, money records. */
  now: () => number;
  /** Monotonic milliseconds (any origin): elapsed time, deadlines, backoff; never jumps with NTP. */
  monotonic: () => number;
  /** Calls `fn` once, `ms` monotonic milliseconds from now. */
  setTimeout: (fn: () => void, ms: number) => ClockTimer;
  clearTimeout: (timer: ClockTimer) => void;
}

/** The process's clocks and Node's timers. */
export const systemClock: Clock = {
  now: () => Date.now(),
  monotonic: () => performance.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (timer) => clearTimeout(timer as NodeJS.Timeout),
};

/** Resolves after `ms` on `clock` (a test clock resolves it when advanced past). */
export function sleep(clock: Clock, ms: number): Promise<void> {
  return new Promise((resolve) => clock.setTimeout(resolve, ms));
}
