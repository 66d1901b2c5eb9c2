// `tollbooth bridge [--port N] -- <command…>` (SPEC §16), run as an operator would: node dist/cli.js.
import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import t from 'tap';
import { childEnv } from '../helpers/interop-upstreams.js';
import { RESEARCH_SERVER, processAlive, waitFor } from './helpers.js';

const CLI = fileURLToPath(new URL('../../dist/cli.js', import.meta.url));

function runCli(args: string[]) {
  const child = spawn(process.execPath, [CLI, ...args], { env: childEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString('utf8')));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  const exited = once(child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
  return { child, exited, out: () => stdout, err: () => stderr };
}

const childrenOf = (pid: number): number[] =>
  execFileSync('ps', ['-o', 'pid=', '--ppid', String(pid)], { encoding: 'utf8' }).split('\n').map((line) => Number(line.trim())).filter((n) => n > 0);

t.test('serves the research server on a loopback port; an SDK client lists its tools; SIGTERM → exit 0, children gone', async (t) => {
  const run = runCli(['bridge', '--port', '0', '--', ...RESEARCH_SERVER]);
  t.teardown(() => void run.child.kill('SIGKILL'));
  await waitFor(() => /at http:\/\/127\.0\.0\.1:\d+\/mcp/.test(run.out()), `the bridge to say where it listens (stderr: ${run.err()})`, 30_000);
  const url = /at (http:\/\/127\.0\.0\.1:\d+\/mcp)/.exec(run.out())![1]!;
  t.match(run.out(), /^tollbooth bridge: serving ".*dist\/research\/stdio\.js" at http:\/\/127\.0\.0\.1:\d+\/mcp \(sessions: perClient, maxChildren: 32\)\n$/);
  const client = new Client({ name: 'cli-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  t.strictSame((await client.listTools()).tools.map((tool) => tool.name).sort(), ['extract_tables', 'fetch_readable', 'inspect_domain']);
  const children = childrenOf(run.child.pid!);
  t.equal(children.length, 1, 'one child for the one session');
  run.child.kill('SIGTERM');
  const [code, signal] = await run.exited;
  t.equal(code, 0, `exit 0 (stderr: ${run.err().slice(-500)})`);
  t.equal(signal, null);
  await waitFor(() => children.every((pid) => !processAlive(pid)), 'the child to be gone');
  await client.close().catch(() => undefined);
});

t.test('a foreign Host header is refused (DNS rebinding) on the loopback port', async (t) => {
  const run = runCli(['bridge', '--port', '0', '--sessions', 'shared', '--', ...RESEARCH_SERVER]);
  t.teardown(() => void run.child.kill('SIGKILL'));
  await waitFor(() => /at http/.test(run.out()), 'the bridge to listen', 30_000);
  const url = /at (http:\/\/127\.0\.0\.1:\d+\/mcp)/.exec(run.out())![1]!;
  t.match(run.out(), /sessions: shared/);
  const { request } = await import('undici');
  const foreign = await request(url, { method: 'POST', headers: { host: 'evil.example', 'content-type': 'application/json' }, body: '{}' });
  t.equal(foreign.statusCode, 403);
  await foreign.body.dump();
  run.child.kill('SIGINT');
  t.equal((await run.exited)[0], 0, 'SIGINT stops it cleanly too');
});

t.test('bad invocations exit 2 with the usage', async (t) => {
  for (const args of [['bridge'], ['bridge', '--port', '0'], ['bridge', '--port', 'x', '--', 'node'], ['bridge', '--sessions', 'many', '--', 'node'], ['bridge', '--nope', '--', 'node']]) {
    const run = runCli(args);
    const [code] = await run.exited;
    t.equal(code, 2, `${args.join(' ')} → 2`);
    t.match(run.err(), /usage: tollbooth bridge/);
  }
});

t.test('a command that does not start: exit 1 with the reason', async (t) => {
  const run = runCli(['bridge', '--port', '0', '--', '/nonexistent/server']);
  const [code] = await run.exited;
  t.equal(code, 1);
  t.match(run.err(), /did not start and initialise/);
});
