// The operator verbs against a Redis store (SPEC §2, §10): `node dist/cli.js` as a real process,
// reading what a gateway wrote to the same Redis, printing fingerprints only — never the handle,
// the full handle hash, a checkout URL or a link id.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { fingerprint } from '../src/observability/fingerprint.js';
import { hashHandle } from '../src/paywall/handles.js';
import { startTestGateway } from './helpers/gateway.js';
import { assertBuilt, balanceOf, callTool, childEnv, CLI, connectStore, HASH_SECRET, redisGatewayConfig, ROOT, writeConfig } from './helpers/gateway-process.js';
import { startPaidUpstream } from './helpers/paid-upstream.js';
import { startRedis } from './helpers/redis-server.js';

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function tollbooth(args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { cwd: ROOT, env: childEnv() }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : null) : 0, stdout, stderr });
    });
  });
}

assertBuilt();
const redis = await startRedis();
t.teardown(() => redis.stop());
const upstream = await startPaidUpstream('stateless-json');
t.teardown(() => upstream.close());
const keyPrefix = `tbadmin${randomBytes(3).toString('hex')}:`;
const target = { url: redis.url };
const config = redisGatewayConfig(upstream.url, target, keyPrefix, { logging: { level: 'info' } }); // info: the admin_grant audit line
const configPath = writeConfig(t, config);
const store = await connectStore(t, target, keyPrefix);

// A gateway (in this process) on the same Redis mints a handle and opens a pending dev charge.
const gateway = await startTestGateway(t, config);
const challenge = await callTool(gateway.url, 'fetch_readable', { url: 'https://example.com/' });
if (challenge.kind !== 'challenged') throw new Error(`expected a challenge, got ${JSON.stringify(challenge)}`);
const handle = challenge.handle;
const handleHash = hashHandle(handle, HASH_SECRET);
const print = fingerprint(handle);
const linkId = new URL(challenge.checkoutUrl).pathname.split('/').pop() as string;
const SECRETS = [handle, handleHash, challenge.checkoutUrl, linkId];
const leaked = (text: string): string[] => SECRETS.filter((secret) => text.includes(secret)).map((secret) => `${secret.slice(0, 6)}…`);

// Read-only verbs start together so their start-up costs overlap.
const runs = {
  showByHandle: tollbooth(['handle', 'show', handle, '--config', configPath]),
  showByFingerprint: tollbooth(['handle', 'show', print, '--config', configPath]),
  listAll: tollbooth(['charges', 'list', '--config', configPath]),
  listSettled: tollbooth(['charges', 'list', '--status', 'settled', '--config', configPath]),
};

t.test('handle show <handle> prints the fingerprint, a short hash and the balance, never the handle', async (t) => {
  const run = await runs.showByHandle;
  t.equal(run.code, 0, run.stderr);
  t.match(run.stdout, new RegExp(`fingerprint\\s+${print.replace(/\./g, '\\.')}`));
  t.match(run.stdout, new RegExp(`hash\\s+${handleHash.slice(0, 8)}…`));
  t.match(run.stdout, /balance research\s+0 \(never funded\)/);
  t.match(run.stdout, /principal\s+unbound/);
  t.same(leaked(run.stdout + run.stderr), [], 'no handle, full hash, checkout URL or link id');
});

t.test('handle show <fingerprint> finds the same handle in Redis', async (t) => {
  const run = await runs.showByFingerprint;
  t.equal(run.code, 0, run.stderr);
  t.equal(run.stdout, (await runs.showByHandle).stdout, 'the same description');
  t.same(leaked(run.stdout + run.stderr), []);
});

t.test('charges list shows the pending charge with the handle by its fingerprint only', async (t) => {
  const run = await runs.listAll;
  t.equal(run.code, 0, run.stderr);
  const lines = run.stdout.trim().split('\n');
  t.match(lines[0], /^OPENED\s+STATUS\s+SKU\s+AMOUNT\s+RECEIVED\s+CURRENCY\s+CREDITS\s+GRANTED\s+HANDLE$/);
  t.equal(lines.length, 2, 'one charge');
  t.match(lines[1], new RegExp(`pending\\s+research\\s+5\\.00\\s+-\\s+USDC\\s+3\\s+0\\s+${print.replace(/\./g, '\\.')}$`));
  t.same(leaked(run.stdout + run.stderr), []);
  const settled = await runs.listSettled;
  t.equal(settled.code, 0, settled.stderr);
  t.equal(settled.stdout.trim(), 'no settled charges');
});

t.test('credits grant adds credits in Redis and audits with the fingerprint only', async (t) => {
  await runs.showByHandle; // the show above must see the balance before the grant
  const run = await tollbooth(['credits', 'grant', handle, '--sku', 'research', '--credits', '7', '--reason', 'dispute 42', '--config', configPath]);
  t.equal(run.code, 0, run.stderr);
  t.equal(run.stdout.trim(), `granted 7 research credits to ${print}; balance now 7`);
  t.equal(await balanceOf(store, handle), 7, 'the gateway store holds the credits');
  const audit = run.stderr
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as Record<string, unknown>)
    .find((line) => line.evt === 'admin_grant');
  t.match(audit, { evt: 'admin_grant', fingerprint: print, sku: 'research', credits: 7, reason: 'dispute 42', balance: 7 }, 'one audit line on stderr');
  t.same(leaked(run.stdout + run.stderr), []);
  t.match(await callTool(gateway.url, 'fetch_readable', { url: 'https://example.com/', tollboothToken: handle }), { kind: 'paid', remaining: 6 }, 'the gateway spends the granted credits');
});
