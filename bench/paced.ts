// An open-loop load at a fixed rate, evenly spaced: request i is due at start + i / rate, whatever the
// answers before it did. The fixed-rate and soak runs use it instead of autocannon's `overallRate`,
// which is a per-second quota: every connection sends its share as fast as it can at the top of each
// second and then waits for the next, so its "latency at half load" was the latency of a burst at full
// load (about connections × the server's time per request) and told little about one call's latency.
//
// Latency is measured from when a request was due, not from when it left, so a stalled server is not
// hidden by the generator waiting for it (coordinated omission). A request due while every connection
// is busy waits for one; that wait counts too.
import { Pool } from 'undici';

export interface PacedOptions {
  rate: number;
  durationS: number;
  /** Keep-alive connections the requests are spread over (at most this many in flight). */
  connections: number;
  headers: Record<string, string>;
  body: string;
  /** The body of request i, when requests differ (the production-shaped scenario spreads them over handles). */
  bodyFor?: (index: number) => string;
}

export interface PacedResult {
  /** Requests answered (any status). */
  requests: number;
  /** 2xx answers. */
  ok: number;
  non2xx: number;
  errors: number;
  elapsedS: number;
  /** ms from due time to the end of the answer, one per 2xx answer. */
  latencies: Float64Array;
  /** Seconds since start at which each 2xx answer ended (same order as latencies). */
  times: Float64Array;
  /** ms since start at which request i was due (i / rate), in due order. */
  dueMs: Float64Array;
  /** ms since start at which request i was handed to a connection, in due order (never before dueMs[i]). */
  sentMs: Float64Array;
}

/**
 * The most requests sent within any `windowMs` (from `sentMs`, sorted). The bench prints it beside the
 * expected share (rate × window): evenness is a timing property, so it is measured here, not asserted in
 * the suite, where a loaded runner bunches late requests and a fair generator looks bursty.
 */
export function busiestWindow(sentMs: Float64Array, windowMs: number): number {
  const sorted = Float64Array.from(sentMs).sort();
  let busiest = 0;
  for (let i = 0, j = 0; i < sorted.length; i++) {
    while ((sorted[i] as number) - (sorted[j] as number) > windowMs) j++;
    busiest = Math.max(busiest, i - j + 1);
  }
  return busiest;
}

/** The generator wakes this often and sends every request that has come due (Node timers have ~1 ms resolution). */
const TICK_MS = 1;

export async function pacedLoad(url: string, options: PacedOptions): Promise<PacedResult> {
  const target = new URL(url);
  const pool = new Pool(target.origin, { connections: options.connections, pipelining: 1 });
  const total = Math.max(1, Math.round(options.rate * options.durationS));
  const intervalMs = 1000 / options.rate;
  const latencies = new Float64Array(total);
  const times = new Float64Array(total);
  const dueMs = new Float64Array(total);
  const sentMs = new Float64Array(total);
  let ok = 0;
  let non2xx = 0;
  let errors = 0;
  let sent = 0;
  let inFlight = 0;
  const queue: number[] = []; // indexes of requests waiting for a free connection
  const started = performance.now();

  let finished!: () => void;
  const done = new Promise<void>((resolve) => (finished = resolve));

  const send = (index: number): void => {
    const dueAt = started + (dueMs[index] as number);
    sentMs[index] = performance.now() - started;
    inFlight += 1;
    pool
      .request({ method: 'POST', path: target.pathname, headers: options.headers, body: options.bodyFor ? options.bodyFor(index) : options.body })
      .then(async (res) => {
        await res.body.dump();
        const now = performance.now();
        if (res.statusCode >= 200 && res.statusCode < 300) {
          latencies[ok] = now - dueAt;
          times[ok] = (now - started) / 1000;
          ok += 1;
        } else {
          non2xx += 1;
        }
      })
      .catch(() => {
        errors += 1;
      })
      .finally(() => {
        inFlight -= 1;
        const next = queue.shift();
        if (next !== undefined) send(next);
        if (ok + non2xx + errors === total) finished();
      });
  };

  const tick = (): void => {
    const now = performance.now();
    while (sent < total && started + sent * intervalMs <= now) {
      const index = sent;
      dueMs[index] = index * intervalMs;
      sent += 1;
      if (inFlight < options.connections) send(index);
      else queue.push(index);
    }
    if (sent < total) setTimeout(tick, TICK_MS);
  };
  tick();
  await done;
  const elapsedS = (performance.now() - started) / 1000;
  await pool.close();
  return { requests: ok + non2xx + errors, ok, non2xx, errors, elapsedS, latencies: latencies.subarray(0, ok), times: times.subarray(0, ok), dueMs, sentMs };
}
