// The `tollbooth` binary as an operator runs it: a real process, real files, real exit codes.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { parseConfigText } from '../src/config/load.js';
import { mintHandle } from '../src/paywall/handles.js';
import { fingerprint } from '../src/observability/fingerprint.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'tollbooth-cli-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

const VALID = `
upstream:
  url: http://127.0.0.1:3001/mcp
  headers: { Authorization: "Bearer \${UPSTREAM_TOKEN}" }
payments:
  provider: moove
  moove: { apiKey: "\${MOOVE_API_KEY}" }
handles: { hashSecret: hash-secret-value }
skus:
  research: { label: Research tools, amount: "5.00", currency: USDC, credits: 250 }
tools:
  fetch_readable: { sku: research, cost: 1 }
`;
const INVALID = 'upstream:\n  url: http://127.0.0.1:3001/mcp\nskus:\n  research: { label: R, amount: 5, currency: USDC, credits: 250 }\n';
// XDG_STATE_HOME: the admin verbs look for a memory-store gateway's admin socket there (none runs in this file).
const ENV = { UPSTREAM_TOKEN: 'upstream-token-value', MOOVE_API_KEY: 'sk_live_key_value', XDG_STATE_HOME: dir };

function configFile(name: string, text: string): string {
  const file = join(dir, name);
  writeFileSync(file, text);
  return file;
}

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function tollbooth(args: string[], env: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve) => {
    // The built CLI as operators run it (npm test builds first), without tap's hooks: compiling
    // src/cli.ts through tsx in each of this file's ~40 processes cost more than half its run time.
    const childEnv: NodeJS.ProcessEnv = { ...process.env, NODE_OPTIONS: '', ...env };
    if (!('TOLLBOOTH_CONFIG' in env)) delete childEnv.TOLLBOOTH_CONFIG;
    execFile(process.execPath, ['dist/cli.js', ...args], { cwd: ROOT, env: childEnv }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : null) : 0, stdout, stderr });
    });
  });
}

// Every process is started up front so their start-up costs overlap; each test awaits its own.
const validFile = configFile('valid.yaml', VALID);
const missingFile = join(dir, 'nope.yaml');
const invalidFile = configFile('invalid.yaml', INVALID);
const envFile = configFile('from-env.yaml', 'upstream: { url: "http://127.0.0.1:3001/mcp" }\nserver: { port: 9191 }\n');
const unknownHandle = mintHandle();
// SPEC §10: connection-string secrets in Sentinel and Cluster URLs (nothing listens on port 1).
const SENTINEL_SECRET = 'sentinel-secret-Jw3p';
const MASTER_SECRET = 'master-secret-Ud6c';
const SEED_SECRET = 'seed-secret-Fa9n';
const URL_SECRETS = new RegExp(`${SENTINEL_SECRET}|${MASTER_SECRET}|${SEED_SECRET}`);
const sentinelFile = configFile(
  'sentinel.yaml',
  `upstream: { url: "http://127.0.0.1:3001/mcp" }\nstore: { type: redis, redis: { url: "redis://127.0.0.1:1,127.0.0.1:2/0?sentinelMasterName=mymaster&sentinelPassword=${SENTINEL_SECRET}" } }\n`,
);
const sentinelAuthFile = configFile(
  'sentinel-auth.yaml',
  `upstream: { url: "http://127.0.0.1:3001/mcp" }\nstore: { type: redis, redis: { url: "redis://:${MASTER_SECRET}@127.0.0.1:1/0?sentinelMasterName=mymaster&sentinelPassword=${SENTINEL_SECRET}" } }\n`,
);
const clusterFile = configFile(
  'cluster.yaml',
  `upstream: { url: "http://127.0.0.1:3001/mcp" }\nstore: { type: redis, redis: { cluster: ["redis://:${SEED_SECRET}@127.0.0.1:1", "redis://127.0.0.1:2?password=${SEED_SECRET}"] } }\n`,
);
const forgotProviderFile = configFile('forgot-provider.yaml', 'upstream: { url: "http://127.0.0.1:3001/mcp" }\npayments:\n  moove: { apiKey: "${MOOVE_API_KEY}" }\n');
// SPEC §20: no usage or error message echoes an argument that looks like a handle.
const H = mintHandle();
const echoRuns: Record<string, { args: string[]; code: number; echoesFingerprint: boolean }> = {
  'a handle as the command': { args: [H], code: 2, echoesFingerprint: true },
  'a handle after a one-word prefix of a verb': { args: ['handle', H], code: 2, echoesFingerprint: true },
  'handle show with a second handle': { args: ['handle', 'show', H, H, '--config', validFile], code: 2, echoesFingerprint: true },
  'charges list with a handle argument': { args: ['charges', 'list', H, '--config', validFile], code: 2, echoesFingerprint: true },
  'check with a handle argument': { args: ['check', H, '--config', validFile], code: 2, echoesFingerprint: true },
  'start with a handle argument': { args: ['start', H, '--config', validFile], code: 2, echoesFingerprint: true },
  'credits grant with a handle as --sku': { args: ['credits', 'grant', H, '--sku', H, '--credits', '1', '--reason', 'x', '--config', validFile], code: 2, echoesFingerprint: true },
  'credits grant with a handle as --credits': { args: ['credits', 'grant', H, '--sku', 'research', '--credits', H, '--reason', 'x', '--config', validFile], code: 2, echoesFingerprint: true },
  'charges list with a handle as --status': { args: ['charges', 'list', '--status', H, '--config', validFile], code: 2, echoesFingerprint: true },
  'a handle as an unknown flag': { args: ['handle', 'show', `--${H}`, '--config', validFile], code: 2, echoesFingerprint: true },
  'a handle as an unknown flag=value': { args: ['handle', 'show', H, `--x=${H}`, '--config', validFile], code: 2, echoesFingerprint: false },
  'a handle as the config file': { args: ['handle', 'show', H, '--config', H], code: 1, echoesFingerprint: true },
  'an unknown handle to handle show (no gateway runs the memory store)': { args: ['handle', 'show', H, '--config', validFile], code: 1, echoesFingerprint: false },
  'a handle with a suffix, taken as a fingerprint': { args: ['handle', 'show', `${H}..abcd`, '--config', validFile], code: 1, echoesFingerprint: false },
};
const echoResults = Object.fromEntries(Object.entries(echoRuns).map(([name, { args }]) => [name, tollbooth(args, ENV)]));
const runs = {
  check: tollbooth(['check', '--config', validFile], ENV),
  checkFromEnv: tollbooth(['check'], { TOLLBOOTH_CONFIG: envFile }),
  checkInvalid: tollbooth(['check', '--config', invalidFile]),
  checkMissing: tollbooth(['check', '--config', missingFile]),
  unknownVerb: tollbooth(['frobnicate']),
  unknownFlag: tollbooth(['check', '--confg', 'x.yaml']),
  showWithoutArgument: tollbooth(['handle', 'show', '--config', validFile], ENV),
  chargesList: tollbooth(['charges', 'list', '--status', 'pending', '--config', validFile], ENV),
  grantBadCredits: tollbooth(['credits', 'grant', unknownHandle, '--sku', 'research', '--credits', 'ten', '--reason', 'x', '--config', validFile], ENV),
  checkForgotProvider: tollbooth(['check', '--config', forgotProviderFile], ENV),
  checkDev: tollbooth(['check', '--config', envFile]),
  checkSentinel: tollbooth(['check', '--config', sentinelFile]),
  checkCluster: tollbooth(['check', '--config', clusterFile]),
  chargesListSentinel: tollbooth(['charges', 'list', '--config', sentinelAuthFile]),
  chargesListCluster: tollbooth(['charges', 'list', '--config', clusterFile]),
  grantUnknownHandle: tollbooth(['credits', 'grant', unknownHandle, '--sku', 'research', '--credits', '10', '--reason', 'x', '--config', validFile], ENV),
};

t.test('check prints the effective config with defaults applied and secrets masked, exit 0', async (t) => {
  const run = await runs.check;
  t.equal(run.code, 0, run.stderr);
  t.match(run.stdout, /port: 8080/);
  t.match(run.stdout, /callDeadline: 20000/);
  t.match(run.stdout, /apiKey: "\*\*\*"/);
  t.match(run.stdout, /hashSecret: "\*\*\*"/);
  t.match(run.stdout, /Authorization: "\*\*\*"/);
  t.notMatch(run.stdout, /sk_live_key_value|upstream-token-value|hash-secret-value/);
  // The printed config is itself a valid config (durations in ms, sizes in bytes).
  t.equal(parseConfigText(run.stdout, 'printed.yaml', {}).tools.fetch_readable?.cost, 1);
});

t.test('check reads TOLLBOOTH_CONFIG when --config is not given', async (t) => {
  const run = await runs.checkFromEnv;
  t.equal(run.code, 0, run.stderr);
  t.match(run.stdout, /port: 9191/);
});

t.test('check of an invalid config prints where and why, exit 1', async (t) => {
  const run = await runs.checkInvalid;
  t.equal(run.code, 1);
  t.match(run.stderr, `${invalidFile}:4:33 skus.research.amount: expected a decimal amount written as a string`);
  t.equal(run.stdout, '');
});

t.test('check of a missing config file names it, exit 1', async (t) => {
  const run = await runs.checkMissing;
  t.equal(run.code, 1);
  t.match(run.stderr, `${missingFile}: cannot read the config file`);
});

t.test('an unknown command prints usage on stderr, exit 2', async (t) => {
  const run = await runs.unknownVerb;
  t.equal(run.code, 2);
  t.match(run.stderr, 'unknown command "frobnicate"');
  t.match(run.stderr, 'usage: tollbooth <command>');
});

t.test('an unknown flag prints usage on stderr, exit 2', async (t) => {
  const run = await runs.unknownFlag;
  t.equal(run.code, 2);
  t.match(run.stderr, "Unknown option '--confg'");
  t.match(run.stderr, 'usage: tollbooth <command>');
});

t.test('an admin verb without its argument is a usage error, exit 2', async (t) => {
  const run = await runs.showWithoutArgument;
  t.equal(run.code, 2);
  t.match(run.stderr, 'expected <handle|fingerprint>, got none');
});

t.test('charges list on the memory store with no gateway running says where the store lives, exit 1', async (t) => {
  const run = await runs.chargesList;
  t.equal(run.code, 1, run.stderr);
  t.equal(run.stdout, '');
  t.match(run.stderr, `${validFile} uses the memory store, which lives inside the gateway process, and no gateway is running with this config (no admin socket at ${join(dir, 'tollbooth', 'admin-8080.sock')})`);
  t.match(run.stderr, 'use a shared store (store.type: redis)');
});

t.test('credits grant with a bad credit count is a usage error, an unknown handle exit 1', async (t) => {
  const bad = await runs.grantBadCredits;
  t.equal(bad.code, 2);
  t.match(bad.stderr, '--credits must be a positive integer');
  const unknown = await runs.grantUnknownHandle;
  t.equal(unknown.code, 1);
  t.match(unknown.stderr, 'uses the memory store, which lives inside the gateway process', 'valid arguments, then the store: no gateway runs it');
  t.notMatch(unknown.stderr, unknownHandle);
});

t.test('check masks the secrets of a Sentinel URL (sentinelPassword in the query) and of Cluster seed URLs', async (t) => {
  const sentinel = await runs.checkSentinel;
  t.equal(sentinel.code, 0, sentinel.stderr);
  t.match(sentinel.stdout, 'url: redis://127.0.0.1:1,127.0.0.1:2/0?sentinelMasterName=mymaster&sentinelPassword=***');
  t.notMatch(sentinel.stdout, URL_SECRETS);
  const cluster = await runs.checkCluster;
  t.equal(cluster.code, 0, cluster.stderr);
  t.match(cluster.stdout, 'redis://:***@127.0.0.1:1');
  t.match(cluster.stdout, 'redis://127.0.0.1:2?password=***');
  t.notMatch(cluster.stdout, URL_SECRETS);
});

t.test('an admin verb against a store that cannot connect: exit 1, and neither the error nor the log lines carry a URL secret', async (t) => {
  for (const run of [await runs.chargesListSentinel, await runs.chargesListCluster]) {
    t.equal(run.code, 1, run.stderr);
    t.match(run.stderr, /tollbooth: cannot use the Redis store at .*\*\*\*/);
    t.notMatch(run.stderr + run.stdout, URL_SECRETS);
  }
});

t.test('check of a filled-in moove block without provider moove: exit 1, the message names payments.provider (SPEC §20)', async (t) => {
  const run = await runs.checkForgotProvider;
  t.equal(run.code, 1);
  t.match(run.stderr, `${forgotProviderFile}:2:1 payments.provider: expected moove, because payments.moove sets apiKey`);
  t.notMatch(run.stderr, /sk_live_key_value/, 'the key itself is not echoed');
  t.equal(run.stdout, '');
});

t.test('the config check prints for a dev provider is itself a valid config (no moove block to trip over)', async (t) => {
  const run = await runs.checkDev;
  t.equal(run.code, 0, run.stderr);
  t.notMatch(run.stdout, /moove:/);
  t.equal(parseConfigText(run.stdout, 'printed.yaml', {}).payments.provider, 'dev');
});

t.test('no usage or error message of any verb echoes a handle argument; the fingerprint stands in (SPEC §20)', async (t) => {
  const middle = H.slice(9, -4); // what a fingerprint never shows
  for (const [name, { code, echoesFingerprint }] of Object.entries(echoRuns)) {
    const run = await echoResults[name]!;
    const output = run.stdout + run.stderr;
    t.equal(run.code, code, `${name}: exit ${code}`);
    t.notOk(output.includes(H) || output.includes(middle), `${name}: the handle is not echoed`);
    if (echoesFingerprint) t.ok(output.includes(fingerprint(H)), `${name}: the fingerprint is shown instead`);
  }
});


t.test('start --help prints the start flags on stdout, exit 0, and starts nothing', async (t) => {
  const run = await tollbooth(['start', '--help']);
  t.equal(run.code, 0, run.stderr);
  t.match(run.stdout, /^usage: tollbooth start \[--config FILE\] \[--port N\] \[--admin-socket PATH\]/);
  t.match(run.stdout, /--port N\s+listen on port N instead of server\.port/);
  t.match(run.stdout, /npm start -- --port N/);
  const short = await tollbooth(['start', '-h']);
  t.equal(short.stdout, run.stdout);
});

t.test('start --port with something that is not a port is a usage error, exit 2', async (t) => {
  for (const port of ['http', '70000', '-1']) {
    const run = await tollbooth(['start', '--port', port, '--config', validFile], ENV);
    t.equal(run.code, 2, `--port ${port}`);
    t.match(run.stderr, /--port must be a port number from 0 to 65535|'--port' argument is ambiguous/);
  }
});
