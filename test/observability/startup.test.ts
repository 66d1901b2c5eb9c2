// The built CLI as an operator runs it (`node dist/cli.js start --config FILE`): the first log line
// states the effective config with every secret masked, the dev provider announces itself with a
// warning, and SIGTERM drains and exits 0.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, statSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import t, { type Test } from 'tap';
import { stringify } from 'yaml';
import { waitFor } from '../helpers/clock.js';

const repo = resolve(import.meta.dirname, '../..');
const cli = join(repo, 'dist/cli.js');

const API_KEY = 'moove-key-marker-Qh2v9';
const WEBHOOK_SECRET = 'webhook-secret-marker-Lp4x';
const HASH_SECRET = 'hash-secret-marker-Tr6w';
const UPSTREAM_TOKEN = 'upstream-token-marker-Kd8m';
const URL_TOKEN = 'url-token-marker-Wc5y';
const SECRETS = [API_KEY, WEBHOOK_SECRET, HASH_SECRET, UPSTREAM_TOKEN, URL_TOKEN];

function newestMtime(dir: string): number {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    newest = Math.max(newest, entry.isDirectory() ? newestMtime(path) : statSync(path).mtimeMs);
  }
  return newest;
}

// `npm test` builds first (pretest); a direct `npx tap` of this file builds only when dist is stale.
if (!existsSync(cli) || statSync(cli).mtimeMs < newestMtime(join(repo, 'src'))) {
  t.setTimeout(300_000); // a full tsc build on a busy 2-core machine can take a minute or more
  const build = spawn('npm', ['run', 'build'], { cwd: repo, env: { ...process.env, NODE_OPTIONS: '' }, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  build.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  build.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const [code] = (await once(build, 'exit')) as [number | null];
  if (code !== 0) t.comment(`npm run build exited ${code}: ${output.slice(-1000)}`);
}

/** A log line as an object; anything not JSON (it should never happen) kept as `{ raw }` so a test can fail on it. */
function parseLine(line: string): Record<string, unknown> {
  try {
    return JSON.parse(line) as Record<string, unknown>;
  } catch {
    return { raw: line };
  }
}

interface Started {
  child: ChildProcess;
  lines: Record<string, unknown>[];
  stdout: () => string;
}

async function startCli(t: Test, provider: 'dev' | 'moove'): Promise<Started> {
  const dir = mkdtempSync(join(tmpdir(), 'tollbooth-startup-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const configPath = join(dir, 'tollbooth.yaml');
  writeFileSync(
    configPath,
    stringify({
      // Port 0: the process binds a free port itself (nothing here talks to it).
      server: { host: '127.0.0.1', port: 0 },
      // Never contacted during this test: nothing calls a tool.
      upstream: { url: `http://127.0.0.1:9/mcp?token=${URL_TOKEN}`, headers: { authorization: `Bearer ${UPSTREAM_TOKEN}` } },
      store: { type: 'memory' },
      // A filled-in moove block needs provider moove (SPEC §20): the dev gateway has none.
      payments: provider === 'moove' ? { provider, moove: { apiKey: API_KEY, webhookSecret: WEBHOOK_SECRET, baseUrl: 'http://127.0.0.1:9' } } : { provider },
      skus: { research: { label: 'Research tools', amount: '5.00', currency: 'USDC', credits: 3 } },
      tools: { fetch_readable: { sku: 'research', cost: 1 } },
      handles: { hashSecret: HASH_SECRET },
    }),
  );
  const child = spawn(process.execPath, [cli, 'start', '--config', configPath], { cwd: repo, env: { ...process.env, NODE_OPTIONS: '' }, stdio: ['ignore', 'pipe', 'pipe'] });
  t.teardown(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  let out = '';
  let err = '';
  const lines: Record<string, unknown>[] = [];
  child.stdout.on('data', (chunk: Buffer) => {
    out += chunk.toString('utf8');
    const complete = out.split('\n');
    lines.length = 0;
    for (const line of complete.slice(0, -1)) if (line.trim()) lines.push(parseLine(line));
  });
  child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString('utf8')));
  const deadline = Date.now() + 15_000;
  while (!lines.some((line) => line.evt === 'start') && Date.now() < deadline && child.exitCode === null) await sleep(50);
  if (!lines.some((line) => line.evt === 'start')) throw new Error(`the gateway did not log its start line (exit ${child.exitCode}): ${err.slice(-800)}${out.slice(-800)}`);
  // The dev-provider warning follows the start line.
  if (provider === 'dev') await waitFor(() => lines.some((line) => line.evt === 'dev_provider'), 'the dev-provider warning');
  else await sleep(100); // a warning would come right after the start line: the window in which "none" is asserted
  return { child, lines, stdout: () => out + err };
}

// One dev-provider gateway serves the first three tests; the last one stops it.
const dev = await startCli(t, 'dev');

t.test('the start line carries the effective config with every secret masked as ***', async (t) => {
  const start = dev.lines.find((line) => line.evt === 'start');
  t.ok(start, 'a start line');
  t.match(start, { level: 'info' });
  t.match(start, {
    config: {
      payments: { provider: 'dev', moove: { apiKey: '', webhookSecret: '' } },
      handles: { hashSecret: '***' },
      upstream: { url: 'http://127.0.0.1:9/mcp?token=***', headers: { authorization: '***' } },
      skus: { research: { amount: '5.00', credits: 3 } },
    },
  }, 'defaults applied, secrets masked');
  for (const secret of SECRETS) t.notOk(dev.stdout().includes(secret), `${secret.split('-marker')[0]} never appears in the output`);
  t.notOk(dev.lines.some((line) => 'raw' in line), 'every stdout line is JSON');
});

t.test('the dev provider logs a warning that no real money moves', async (t) => {
  const warning = dev.lines.find((line) => line.evt === 'dev_provider');
  t.match(warning, { level: 'warn', msg: /dev.*no real money/i });
  t.ok(dev.lines.findIndex((line) => line.evt === 'start') < dev.lines.findIndex((line) => line.evt === 'dev_provider'), 'right after the start line');
});

t.test('the moove provider starts without the dev warning and without leaking its key', async (t) => {
  const moove = await startCli(t, 'moove');
  t.match(moove.lines.find((line) => line.evt === 'start'), { config: { payments: { provider: 'moove', moove: { apiKey: '***', webhookSecret: '***' } } } });
  t.notOk(moove.lines.some((line) => line.evt === 'dev_provider'), 'no dev warning');
  for (const secret of SECRETS) t.notOk(moove.stdout().includes(secret), `${secret.split('-marker')[0]} never appears in the output`);
});

t.test('SIGTERM drains and exits 0 with a shutdown line', async (t) => {
  const exited = once(dev.child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
  dev.child.kill('SIGTERM');
  const [code, signal] = await exited;
  t.equal(code, 0);
  t.equal(signal, null);
  t.match(dev.lines.find((line) => line.evt === 'shutdown'), { signal: 'SIGTERM' });
});
