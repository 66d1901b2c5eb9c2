// SPEC §22, starting: a port in use, an unreadable config, an unreachable store → one error line naming
// the cause, exit 1, nothing left behind (no child, no bridge socket directory); a SIGHUP that arrives
// before the gateway serves is applied once it serves. `tollbooth start` run as an operator runs it.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import { waitFor } from '../helpers/clock.js';
import { testConfig } from '../helpers/gateway.js';
import { CLI, childEnv, scrape, sumCounter } from '../helpers/gateway-process.js';
import { newMarker, processesWith } from '../helpers/processes.js';

const fixture = (name: string): string => fileURLToPath(new URL(`../fixtures/bridge/${name}`, import.meta.url));

/** A private TMPDIR for the gateway (its bridge socket directory goes there) and a config file beside it. */
function workspace(t: Test, config: unknown): { dir: string; tmp: string; file: string } {
  const dir = mkdtempSync(join(tmpdir(), 'tb-start-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const tmp = join(dir, 'tmp');
  mkdirSync(tmp);
  const file = join(dir, 'tollbooth.yaml');
  writeFileSync(file, JSON.stringify(config));
  return { dir, tmp, file };
}

function start(file: string, tmp?: string) {
  const child = spawn(process.execPath, [CLI, 'start', '--config', file], { env: childEnv(tmp ? { TMPDIR: tmp } : {}), stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString('utf8')));
  child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString('utf8')));
  const started = performance.now();
  const exited = (once(child, 'exit') as Promise<[number | null]>).then(([code]) => ({ code, seconds: (performance.now() - started) / 1000 }));
  return { child, exited, out: () => out, err: () => err };
}

t.test('a port in use: one line naming it, exit 1, no child and no bridge socket directory left', async (t) => {
  const blocker = createServer();
  await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
  t.teardown(() => blocker.close());
  const port = (blocker.address() as { port: number }).port;
  const marker = newMarker();
  const { tmp, file } = workspace(t, testConfig('http://127.0.0.1:9/mcp', { server: { host: '127.0.0.1', port }, upstream: { command: [process.execPath, fixture('raw-server.mjs'), marker] }, logging: { level: 'warn' } }));
  const run = start(file, tmp);
  const { code, seconds } = await run.exited;
  t.comment(`exit after ${seconds.toFixed(2)} s`);
  t.equal(code, 1, 'exit 1');
  t.strictSame(run.err().trimEnd().split('\n'), [`tollbooth: cannot start: cannot listen on 127.0.0.1:${port}: the port is in use (EADDRINUSE)`], 'one line naming the cause');
  t.notMatch(run.out() + run.err(), /\n\s+at /, 'no stack trace');
  t.strictSame(readdirSync(tmp), [], 'no tollbooth-bridge-* directory left');
  t.strictSame(processesWith(marker), [], 'no child left');
});

t.test('an unreadable config: one line naming the file, exit 1', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tb-start-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  for (const file of [join(dir, 'missing.yaml'), dir]) {
    const run = start(file);
    t.equal((await run.exited).code, 1);
    const lines = run.err().trimEnd().split('\n');
    t.equal(lines.length, 1, 'one line');
    t.match(lines[0], `${file}: cannot read the config file`);
  }
});

t.test('an unreachable store: one line naming it, exit 1, no child left', async (t) => {
  const closed = createServer();
  await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
  const port = (closed.address() as { port: number }).port;
  await new Promise<void>((resolve) => closed.close(() => resolve()));
  const marker = newMarker();
  const { file } = workspace(t, testConfig('http://127.0.0.1:9/mcp', { store: { type: 'redis', redis: { url: `redis://127.0.0.1:${port}/0` } }, upstream: { command: [process.execPath, fixture('raw-server.mjs'), marker] }, logging: { level: 'warn' } }));
  const run = start(file);
  const { code, seconds } = await run.exited;
  t.comment(`exit after ${seconds.toFixed(2)} s`);
  t.equal(code, 1);
  t.strictSame(run.err().trimEnd().split('\n').length, 1, 'one line on stderr');
  t.match(run.err(), new RegExp(`^tollbooth: cannot start: cannot use the Redis store at redis://127\\.0\\.0\\.1:${port}/0`));
  t.strictSame(processesWith(marker), [], 'no child left');
});

t.test('a SIGHUP before the gateway serves is applied once it serves; SIGTERM then exits 0', async (t) => {
  const marker = newMarker();
  const blocker = createServer();
  await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
  const port = (blocker.address() as { port: number }).port;
  await new Promise<void>((resolve) => blocker.close(() => resolve()));
  // The stdio server takes 2 s to start: start-up waits for it, and the SIGHUP lands in that window.
  const { file } = workspace(t, testConfig('http://127.0.0.1:9/mcp', { server: { host: '127.0.0.1', port }, upstream: { command: [process.execPath, fixture('slow-start.mjs'), '2000', marker] }, logging: { level: 'info' } }));
  const run = start(file);
  t.teardown(() => void run.child.kill('SIGKILL'));
  await waitFor(() => processesWith(marker).length > 0, 'the start-up probe child (the gateway is not serving yet)', { timeoutMs: 20_000 });
  run.child.kill('SIGHUP');
  await waitFor(async () => sumCounter(await scrape(`http://127.0.0.1:${port}`).catch(() => ''), 'tollbooth_config_reloads_total', { result: 'success' }) === 1, 'the held reload to be applied', { timeoutMs: 30_000 });
  t.equal(run.child.exitCode, null, 'still running');
  run.child.kill('SIGTERM');
  t.equal((await run.exited).code, 0);
  t.match(run.out(), /"evt":"config_reload_queued"|"evt":"config_reload_requested"/);
});
