// The bounds of SPEC §5.5, each with a misbehaving child or client, and the bridge healthy afterwards:
// a 100 MB line, a child that never reads stdin, 200 sessions against maxChildren 8, and session state
// (issue 12: 40 initialize requests with 3 MiB capabilities grew the old stdio upstream's heap by 120 MiB).
import { execFileSync } from 'node:child_process';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import t from 'tap';
import {
  DEAF_SERVER, MiB, RAW_SERVER, initializeRequest, openRawSession, peakMemoryGrowth, processAlive, raw, retainedBytes, sessionHeaders, startTestBridge,
  toolCall, waitFor,
} from './helpers.js';

const childrenOfThisProcess = (): number => {
  const out = execFileSync('ps', ['-o', 'args=', '--ppid', String(process.pid)], { encoding: 'utf8' });
  return out.split('\n').filter((line) => line.includes('raw-server.mjs')).length;
};

t.test('a child that prints a 100 MB line: stopped at maxLineBytes, the call gets an error, memory stays bounded', async (t) => {
  const maxLineBytes = 8 * MiB;
  const bridge = await startTestBridge(t, { maxLineBytes });
  const { id } = await openRawSession(bridge);
  const { result: answer, peakBytes } = await peakMemoryGrowth(() => raw(bridge, 'POST', toolCall(1, 'big', { mb: 100 }), sessionHeaders(id!)));
  t.comment(`100 MB line, maxLineBytes 8 MiB: peak heap+buffers growth ${(peakBytes / MiB).toFixed(1)} MiB`);
  t.match(answer.messages.at(-1), { id: 1, error: { code: -32603, message: /wrote a line longer than 8388608 bytes \(upstream.maxResponseBytes\) and was stopped/ } });
  t.ok(peakBytes < 4 * maxLineBytes, `memory grew by ${(peakBytes / MiB).toFixed(1)} MiB, not by the 100 MB line`);
  t.ok(bridge.log.lines.some((line) => line.evt === 'bridge_child_line_too_long'), 'logged');
  await waitFor(async () => (await raw(bridge, 'POST', toolCall(2, 'echo', { text: 'x' }), sessionHeaders(id!))).status === 404, 'the session to end');
  const next = await openRawSession(bridge);
  t.match((await raw(bridge, 'POST', toolCall(3, 'echo', { text: 'fine' }), sessionHeaders(next.id!))).messages.at(-1), { result: { content: [{ text: 'fine' }] } }, 'a new session works');
});

t.test('a line just under the cap is delivered whole', async (t) => {
  const bridge = await startTestBridge(t, { maxLineBytes: 3 * MiB });
  const { id } = await openRawSession(bridge);
  const answer = await raw(bridge, 'POST', toolCall(1, 'big', { mb: 2 }), sessionHeaders(id!));
  t.equal((answer.messages.at(-1)?.result.content[0].text as string).length, 2 * MiB);
});

t.test('a child that never reads stdin: a bounded queue, then requests refused clearly; the bridge stays healthy', async (t) => {
  const maxLineBytes = MiB; // the stdin queue cap defaults to it
  // idleTimeout long enough that the session is not reaped while the test measures, short enough to see it reaped.
  const bridge = await startTestBridge(t, { command: DEAF_SERVER, maxLineBytes, idleTimeoutMs: 3_000 });
  const { id } = await openRawSession(bridge);
  const payload = 'p'.repeat(400 * 1024);
  const hanging: AbortController[] = [];
  let refused = 0;
  let refusedWith: unknown;
  const before = retainedBytes();
  {
    // Sent one after another, each given 200 ms to be refused (a refusal comes at once); the few the
    // bridge accepts stay open, and all of them get one 2 s wait at the end instead of 2 s each, so a
    // late refusal on a loaded machine still counts as a refusal.
    const open: { abort: AbortController; call: Promise<unknown>; answer?: Awaited<ReturnType<typeof raw>> }[] = [];
    for (let i = 1; i <= 100; i++) {
      const abort = new AbortController();
      const entry: (typeof open)[number] = { abort, call: Promise.resolve() };
      entry.call = raw(bridge, 'POST', toolCall(i, 'echo', { text: payload }), sessionHeaders(id!), abort.signal).then(
        (answer) => (entry.answer = answer),
        () => undefined,
      );
      open.push(entry);
      await Promise.race([entry.call, new Promise((resolve) => setTimeout(resolve, 200))]);
    }
    const waiting = open.filter((entry) => entry.answer === undefined);
    await Promise.race([Promise.all(waiting.map((entry) => entry.call)), new Promise((resolve) => setTimeout(resolve, 2_000))]);
    for (const entry of open) {
      if (entry.answer === undefined) {
        hanging.push(entry.abort);
      } else {
        refused += 1;
        refusedWith = entry.answer.messages.at(-1) ?? entry.answer.text;
      }
    }
  }
  // Measured while the accepted requests still wait: whatever the bridge queued for the child is still held.
  const grown = retainedBytes() - before;
  t.comment(`40 MB offered to a child that never reads (stdin cap 1 MiB): ${hanging.length} queued, ${refused} refused; retained heap+buffers growth ${(grown / MiB).toFixed(1)} MiB`);
  t.ok(hanging.length <= 6, `only what fits the pipe and the 1 MiB queue waits (${hanging.length})`);
  t.ok(refused >= 94, `the rest is refused (${refused})`);
  t.match(refusedWith, { error: { code: -32000, message: /not reading its input; the request was refused/, data: { reason: 'stdio_server_not_reading' } } });
  t.ok(grown < 8 * MiB, `memory grew by ${(grown / MiB).toFixed(1)} MiB for 40 MB offered`);
  const other = await openRawSession(bridge);
  t.ok(other.id, 'a new session gets its own child');
  for (const abort of hanging) abort.abort();
  // With its client gone the stuck session is idle: reaped, its child stopped.
  await waitFor(() => bridge.log.lines.some((line) => line.evt === 'bridge_session_end' && line.session === id && line.why === 'idle'), 'the stuck session to be reaped');
  const pid = bridge.log.lines.find((line) => line.evt === 'bridge_session_end' && line.session === id)?.pid as number;
  await waitFor(() => !processAlive(pid), 'the deaf child to be stopped');
});

t.test('200 sessions against maxChildren 8: 8 children, 192 clear refusals, memory bounded, slots come back', async (t) => {
  const bridge = await startTestBridge(t, { command: RAW_SERVER, maxChildren: 8 });
  const connected: { client: Client; transport: StreamableHTTPClientTransport }[] = [];
  const refusals: string[] = [];
  let peakChildren = 0;
  const { peakBytes } = await peakMemoryGrowth(async () => {
    const attempts = Array.from({ length: 200 }, (_, i) => i);
    const worker = async (): Promise<void> => {
      for (let i = attempts.shift(); i !== undefined; i = attempts.shift()) {
        const client = new Client({ name: `client-${i}`, version: '1.0.0' });
        const transport = new StreamableHTTPClientTransport(new URL(bridge.url), { fetch: bridge.fetch });
        try {
          await client.connect(transport);
          connected.push({ client, transport });
          peakChildren = Math.max(peakChildren, childrenOfThisProcess());
        } catch (error) {
          refusals.push((error as Error).message);
        }
      }
    };
    await Promise.all(Array.from({ length: 20 }, worker));
  });
  t.comment(`200 sessions, maxChildren 8: ${connected.length} connected, ${refusals.length} refused, peak ${peakChildren} children; peak heap+buffers growth ${(peakBytes / MiB).toFixed(1)} MiB`);
  t.equal(connected.length, 8);
  t.equal(refusals.length, 192);
  t.match(refusals[0], /maximum number of stdio children \(maxChildren: 8\)/);
  t.ok(peakChildren <= 8, `never more than 8 children (${peakChildren})`);
  t.ok(peakBytes < 64 * MiB, `memory grew by ${(peakBytes / MiB).toFixed(1)} MiB`);
  for (const { client } of connected) t.match(await client.callTool({ name: 'echo', arguments: { text: 'still here' } }), { content: [{ text: 'still here' }] });
  for (const { client, transport } of connected.splice(0, 2)) {
    await transport.terminateSession();
    await client.close();
  }
  const late = new Client({ name: 'late', version: '1.0.0' });
  await late.connect(new StreamableHTTPClientTransport(new URL(bridge.url), { fetch: bridge.fetch }));
  t.match(await late.callTool({ name: 'echo', arguments: { text: 'in' } }), { content: [{ text: 'in' }] }, 'a freed slot takes a new session');
  await late.close();
  for (const { client } of connected) await client.close();
});

t.test('issue 12: 40 initialize requests with 3 MiB capabilities do not grow the heap', async (t) => {
  for (const sessions of ['perClient', 'shared'] as const) {
    const bridge = await startTestBridge(t, { command: RAW_SERVER, sessions, maxBodyBytes: 8 * MiB });
    const capabilities = { experimental: { blob: { data: 'c'.repeat(3 * MiB) } } };
    // Warm-up: the first large bodies grow buffer pools and compile code once; that is not session state.
    for (let i = 0; i < 5; i++) await raw(bridge, 'POST', initializeRequest(i, capabilities));
    const before = retainedBytes();
    for (let i = 0; i < 40; i++) {
      const answer = await raw(bridge, 'POST', initializeRequest(i, capabilities));
      if (i === 0) t.match(answer.messages[0], { error: { data: { reason: 'client_state_too_large' } } }, `${sessions}: refused`);
    }
    const grown = retainedBytes() - before;
    t.comment(`${sessions}: 40 × 3 MiB capabilities → retained growth ${(grown / MiB).toFixed(2)} MiB`);
    t.ok(grown < 2 * MiB, `${sessions}: the heap grew by ${(grown / MiB).toFixed(2)} MiB (the old stdio upstream kept 120 MiB)`);
    // Just under the bound is accepted, and what a session keeps is bounded by it.
    const under = { experimental: { blob: { data: 'c'.repeat(60 * 1024) } } };
    const kept = retainedBytes();
    const opened: string[] = [];
    for (let i = 0; i < 8; i++) {
      const { id } = await openRawSession(bridge, under);
      if (id) opened.push(id);
    }
    const perSession = Math.max(0, retainedBytes() - kept) / opened.length;
    t.comment(`${sessions}: 8 sessions with 60 KiB capabilities → ${(perSession / 1024).toFixed(0)} KiB retained per session`);
    t.equal(opened.length, 8);
    t.ok(perSession < 1 * MiB, `${sessions}: each session keeps less than 1 MiB`);
    for (const id of opened) await raw(bridge, 'DELETE', undefined, sessionHeaders(id));
    await bridge.close();
  }
});
