// The official MCP conformance suite, run differentially (SPEC §15, issue 2): the same server checks
// against an upstream directly and through a gateway with no priced tools; the sets of failing check ids
// must be equal, except the checks the gateway exists to improve (listed in IMPROVED_BY_GATEWAY).
//   --requirements 2025-11-25 against server-everything (streamableHttp);
//   --requirements 2026-07-28 against the SDK v2 createMcpHandler dual-era server.
// The suite and the Node 22 it needs (it calls fs.globSync) live in tools/conformance, a package of
// their own so that the gateway and its tests stay on Node 20; `npm test` installs it (pretest). Without
// it the file is skipped and says what is missing.
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import t, { type Test } from 'tap';
import { startTestGateway, testConfig } from '../helpers/gateway.js';
import { childEnv, startDualEraServer, startServerEverything, type RunningUpstream } from '../helpers/interop-upstreams.js';
import { skipUnlessInstalled } from '../helpers/required-tool.js';

/** Checks the gateway is meant to pass where a bare upstream fails (the upstream's own failures, fixed in front of it). */
const IMPROVED_BY_GATEWAY = new Set(['localhost-host-rebinding-rejected']); // scenario dns-rebinding-protection: the gateway refuses a foreign Origin (SPEC §5.2)

// Resolve from tools/conformance/, not from the project: its node_modules holds both packages.
const require = createRequire(new URL('../../tools/conformance/package.json', import.meta.url));

function conformanceCli(): string | undefined {
  try {
    const manifestPath = require.resolve('@modelcontextprotocol/conformance/package.json');
    const manifest = require(manifestPath) as { bin?: string | Record<string, string> };
    const bin = typeof manifest.bin === 'string' ? manifest.bin : manifest.bin ? Object.values(manifest.bin)[0] : undefined;
    return bin ? join(dirname(manifestPath), bin) : undefined;
  } catch {
    return undefined;
  }
}

/** A Node with fs.globSync: this one when it has it (Node ≥ 22), else the `node` package's binary (node@22). */
function node22(): string | undefined {
  if (typeof (fs as { globSync?: unknown }).globSync === 'function') return process.execPath;
  try {
    const manifestPath = require.resolve('node/package.json');
    const binary = join(dirname(manifestPath), 'bin', 'node');
    return fs.existsSync(binary) ? binary : undefined;
  } catch {
    return undefined;
  }
}

const cli = conformanceCli();
const node = node22();
const missing = [
  cli ? null : '@modelcontextprotocol/conformance is not installed (npm ci --prefix tools/conformance)',
  node ? null : 'no Node with fs.globSync (npm ci --prefix tools/conformance installs node@22)',
].filter(Boolean);
const skip = skipUnlessInstalled(t, missing.length ? missing.join('; ') : false);

interface Check {
  id: string;
  status: string;
}

async function collectChecks(dir: string): Promise<Check[]> {
  const found: Check[] = [];
  const walk = async (at: string): Promise<void> => {
    for (const entry of await readdir(at, { withFileTypes: true })) {
      const path = join(at, entry.name);
      if (entry.isDirectory()) await walk(path);
      else if (entry.name === 'checks.json') found.push(...(JSON.parse(await readFile(path, 'utf8')) as Check[]));
    }
  };
  await walk(dir);
  return found;
}

/** Runs the server suite against `url`; returns the ids of failing checks (and how many checks ran). */
async function failingChecks(url: string, requirements: string): Promise<{ failing: Set<string>; total: number; output: string }> {
  const cwd = await mkdtemp(join(tmpdir(), 'tb-conformance-'));
  try {
    const child = spawn(node as string, [cli as string, 'server', '--url', url, '--requirements', requirements, '--output-dir', join(cwd, 'results')], { cwd, env: childEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
    await new Promise<void>((resolve) => child.once('close', () => resolve()));
    const checks = await collectChecks(cwd);
    return { failing: new Set(checks.filter((c) => c.status === 'FAILURE').map((c) => c.id)), total: checks.length, output };
  } finally {
    await rm(cwd, { recursive: true, force: true });
  }
}

async function compare(t: Test, upstream: RunningUpstream, requirements: string): Promise<void> {
  const gateway = await startTestGateway(t, testConfig(upstream.url, { tools: {} }));
  const direct = await failingChecks(upstream.url, requirements);
  const through = await failingChecks(gateway.url, requirements);
  t.ok(direct.total > 0, `the suite ran checks directly (${direct.total})\n${direct.total === 0 ? direct.output.slice(-2000) : ''}`);
  t.equal(through.total, direct.total, 'the same number of checks ran through the gateway');
  const onlyThrough = [...through.failing].filter((id) => !direct.failing.has(id)).sort();
  const onlyDirect = [...direct.failing].filter((id) => !through.failing.has(id)).sort();
  t.comment(`${requirements}: ${direct.total} checks; failing directly ${direct.failing.size} [${[...direct.failing].sort().join(', ')}], through the gateway ${through.failing.size}`);
  t.same(onlyThrough, [], 'no check fails through the gateway that passes directly');
  t.same(onlyDirect.filter((id) => !IMPROVED_BY_GATEWAY.has(id)), [], 'every check failing directly fails through the gateway too, except those the gateway improves');
}

t.test('conformance --requirements 2025-11-25: server-everything directly vs through the gateway', { skip, timeout: 120_000 }, async (t) => {
  const upstream = await startServerEverything();
  t.teardown(() => upstream.close());
  await compare(t, upstream, '2025-11-25');
});

t.test('conformance --requirements 2026-07-28: the SDK v2 dual-era server directly vs through the gateway', { skip, timeout: 120_000 }, async (t) => {
  const upstream = await startDualEraServer();
  t.teardown(() => upstream.close());
  await compare(t, upstream, '2026-07-28');
});
