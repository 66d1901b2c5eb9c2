// The fixed-rate load of the bench (bench/paced.ts): requests arrive evenly spaced, not in a burst
// at the top of each second, and latency counts from when a request was due, so a server slower than
// the rate shows as growing latency instead of a slower generator.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { busiestWindow, pacedLoad } from '../../bench/paced.js';

async function server(handle: (req: IncomingMessage, res: ServerResponse, n: number) => void): Promise<{ url: string; arrivals: number[]; close(): Promise<void> }> {
  const arrivals: number[] = [];
  const http = createServer((req, res) => {
    arrivals.push(performance.now());
    req.resume();
    req.on('end', () => handle(req, res, arrivals.length));
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    arrivals,
    close: () =>
      new Promise<void>((resolve) => {
        http.closeAllConnections();
        http.close(() => resolve());
      }),
  };
}

const ok = (_req: IncomingMessage, res: ServerResponse): void => void res.end('{}');

t.test('requests leave on their schedule, never early, and every one is answered', async (t) => {
  const s = await server(ok);
  t.teardown(() => s.close());
  const result = await pacedLoad(s.url, { rate: 400, durationS: 1.5, connections: 4, headers: {}, body: '{}' });
  t.equal(result.requests, 600);
  t.equal(result.ok, 600);
  t.equal(result.latencies.length, 600);
  t.equal(result.non2xx + result.errors, 0);
  t.equal(s.arrivals.length, 600, 'the server saw each request once');
  // The schedule is i / rate: a per-second quota would hand a second's share over at once, i.e. send
  // request i before it is due. A loaded runner can only make a request later, never earlier, so this
  // holds however slow the machine is. How evenly they actually left (a timing property) is the bench's
  // to print (bench/run.ts, "paced … within any 50 ms").
  const offSchedule: number[] = [];
  const early: number[] = [];
  for (let i = 0; i < 600; i++) {
    if (result.dueMs[i] !== i * 2.5) offSchedule.push(i);
    if ((result.sentMs[i] as number) < (result.dueMs[i] as number)) early.push(i);
  }
  t.same(offSchedule, [], 'request i is due at i / rate');
  t.same(early, [], 'no request left before its due time');
  t.ok((result.sentMs[599] as number) >= 1_497.5, 'the last request left no earlier than 599 / 400 s after the start');
});

t.test('busiestWindow counts the most sends within any window', async (t) => {
  t.equal(busiestWindow(Float64Array.from([0, 10, 20, 30]), 50), 4);
  t.equal(busiestWindow(Float64Array.from([0, 60, 120, 180]), 50), 1);
  t.equal(busiestWindow(Float64Array.from([200, 0, 25, 230, 240]), 50), 3, 'unsorted input is sorted first');
  t.equal(busiestWindow(new Float64Array(0), 50), 0);
});

t.test('latency counts from the due time: a server slower than the rate shows growing waits', async (t) => {
  // Two connections, 40 ms each: 50 requests/s at most, asked for 150/s for 1 s.
  const s = await server((_req, res) => void setTimeout(() => res.end('{}'), 40));
  t.teardown(() => s.close());
  const result = await pacedLoad(s.url, { rate: 150, durationS: 1, connections: 2, headers: {}, body: '{}' });
  t.equal(result.ok, 150);
  const sorted = Float64Array.from(result.latencies).sort();
  t.ok((sorted[0] as number) >= 39, `no answer faster than the server's 40 ms (min ${sorted[0]})`);
  // The last requests were due at ~1 s and answered at ~3 s: they waited ~2 s for a connection.
  t.ok((sorted[Math.floor(sorted.length * 0.9)] as number) > 1_000, `p90 ${Math.round(sorted[Math.floor(sorted.length * 0.9)] as number)} ms includes the wait for a connection`);
  t.ok(result.elapsedS > 2.5, `the run lasts until the last answer (${result.elapsedS.toFixed(2)} s)`);
});

t.test('non-2xx answers and failed requests are counted, not timed', async (t) => {
  const s = await server((_req, res, n) => {
    if (n % 10 === 0) {
      res.statusCode = 500;
      res.end();
    } else if (n % 10 === 5) {
      res.socket?.destroy();
    } else {
      res.end('{}');
    }
  });
  t.teardown(() => s.close());
  const result = await pacedLoad(s.url, { rate: 200, durationS: 0.5, connections: 2, headers: {}, body: '{}' });
  t.equal(result.requests, 100);
  t.equal(result.non2xx, 10);
  t.equal(result.errors, 10);
  t.equal(result.ok, 80);
  t.equal(result.latencies.length, 80);
});
