// How long this process was kept from running, sampled while a promise runs. A promise SPEC bounds in
// time ("refused within 1 s") is checked against that bound plus the lag measured meanwhile: a stall of
// the process on a loaded runner delays the refusal and shows up as lag, while a refusal that really
// waited past the bound does not.
import { monitorEventLoopDelay } from 'node:perf_hooks';

const RESOLUTION_MS = 10;

export interface Timed<T> {
  value: T;
  elapsedMs: number;
  /** Total delay of the event loop past its sampling interval while `run` ran, in ms. */
  lagMs: number;
}

export async function withLag<T>(run: () => Promise<T>): Promise<Timed<T>> {
  const histogram = monitorEventLoopDelay({ resolution: RESOLUTION_MS });
  histogram.enable();
  const started = performance.now();
  try {
    const value = await run();
    const elapsedMs = performance.now() - started;
    // A stall just before the end is only sampled at the next wake-up: wait for it.
    await new Promise((resolve) => setTimeout(resolve, RESOLUTION_MS * 2));
    return { value, elapsedMs, lagMs: excess(histogram) };
  } finally {
    histogram.disable();
  }
}

/** Each sample is the interval between two wake-ups (resolution + delay): the sum past the resolution is the lag. */
function excess(histogram: ReturnType<typeof monitorEventLoopDelay>): number {
  if (histogram.count === 0) return 0;
  return Math.max(0, histogram.count * (histogram.mean / 1e6 - RESOLUTION_MS));
}
