// `tollbooth ledger export` / `ledger verify` / `handle show` as an operator runs them (node
// dist/cli.js, a real process) against the Redis a real gateway wrote to: a paid flow, a refunded
// call, an operator grant. Then the negative controls: a balance tampered with in Redis, an entry
// deleted, and verify exits 1 naming the fingerprint. No export line carries a secret.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import t from 'tap';
import { fingerprint } from '../../src/observability/fingerprint.js';
import { hashHandle } from '../../src/paywall/handles.js';
import { KeySpace } from '../../src/store/keys.js';
import { startTestGateway } from '../helpers/gateway.js';
import { assertBuilt, callTool, childEnv, CLI, HASH_SECRET, payDevCheckout, redisGatewayConfig, ROOT, writeConfig } from '../helpers/gateway-process.js';
import { startPaidUpstream } from '../helpers/paid-upstream.js';
import { startRedis } from '../helpers/redis-server.js';

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function tollbooth(args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { cwd: ROOT, env: childEnv(), maxBuffer: 64 * 1024 * 1024 }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : null) : 0, stdout, stderr });
    });
  });
}

assertBuilt();
const redis = await startRedis();
t.teardown(() => redis.stop());
const upstream = await startPaidUpstream('stateless-json');
t.teardown(() => upstream.close());
const keyPrefix = `tbledger${randomBytes(3).toString('hex')}:`;
const config = redisGatewayConfig(upstream.url, { url: redis.url }, keyPrefix);
const configPath = writeConfig(t, config);
const gateway = await startTestGateway(t, config);

// A paid flow: challenge, pay, two paid calls, one call the tool fails (refunded), an operator grant.
const challenge = await callTool(gateway.url, 'fetch_readable', { url: 'https://example.com/' });
if (challenge.kind !== 'challenged') throw new Error(`expected a challenge, got ${JSON.stringify(challenge)}`);
const handle = challenge.handle;
const handleHash = hashHandle(handle, HASH_SECRET);
const print = fingerprint(handle);
const linkId = new URL(challenge.checkoutUrl).pathname.split('/').pop() as string;
const beforePay = Date.now();
if ((await payDevCheckout(challenge.checkoutUrl, gateway.origin)) !== 303) throw new Error('pay failed');
for (const url of ['https://example.com/1', 'https://example.com/2']) {
  const paid = await callTool(gateway.url, 'fetch_readable', { url, tollboothToken: handle });
  if (paid.kind !== 'paid') throw new Error(`expected a paid call, got ${JSON.stringify(paid)}`);
}
await callTool(gateway.url, 'failing', { tollboothToken: handle });
const grant = await tollbooth(['credits', 'grant', handle, '--sku', 'research', '--credits', '5', '--reason', `goodwill for ${handle}, see ${challenge.checkoutUrl}`, '--config', configPath]);
if (grant.code !== 0) throw new Error(`credits grant failed: ${grant.stderr}`);

const SECRETS = [handle, handleHash, challenge.checkoutUrl, linkId, 'http://', 'https://'];
const leaked = (text: string): string[] => SECRETS.filter((secret) => text.includes(secret)).map((secret) => `${secret.slice(0, 8)}…`);
const runs = {
  jsonl: tollbooth(['ledger', 'export', '--config', configPath]),
  csv: tollbooth(['ledger', 'export', '--format', 'csv', '--config', configPath]),
  window: tollbooth(['ledger', 'export', '--since', String(beforePay), '--until', new Date(Date.now() + 60_000).toISOString(), '--config', configPath]),
  badFormat: tollbooth(['ledger', 'export', '--format', 'xml', '--config', configPath]),
  verify: tollbooth(['ledger', 'verify', '--config', configPath]),
  show: tollbooth(['handle', 'show', print, '--config', configPath]),
};

t.test('ledger export: the grant, two spends and the operator grant, in time order, with the fingerprint and no secret', async (t) => {
  const { code, stdout, stderr } = await runs.jsonl;
  t.equal(code, 0, stderr);
  const lines = stdout.trimEnd().split('\n').map((line) => JSON.parse(line) as Record<string, unknown>);
  t.match(lines.pop(), { trailer: { entries: 4, lastHash: { [print]: /^[0-9a-f]{64}$/ } }, mac: null }, 'the last line is the trailer');
  t.match(lines, [
    { seq: 1, kind: 'grant', fingerprint: print, sku: 'research', credits: 3, balanceAfter: 3, amount: '5.00', currency: 'USDC' },
    { seq: 2, kind: 'spend', fingerprint: print, credits: -1, balanceAfter: 2, ref: /^[A-Za-z0-9_-]{22}$/, tool: 'fetch_readable' },
    { seq: 3, kind: 'spend', fingerprint: print, credits: -1, balanceAfter: 1, tool: 'fetch_readable' },
    { seq: 4, kind: 'adjust', fingerprint: print, credits: 5, balanceAfter: 6, reason: `goodwill for ${print}, see [url]` },
  ]);
  t.equal(lines.length, 4, 'the refunded call wrote nothing');
  t.match(lines[0]?.ref, /^[A-Za-z0-9_-]{22}$/, 'the grant names the charge by its nonce');
  t.equal(new Set(lines.slice(0, 3).map((line) => line.ref)).size, 3, 'each spend names its own call (the reservation id), not the charge');
  t.same(leaked(stdout + stderr), [], 'no handle, hash, link id or URL');
});

t.test('ledger export --format csv: a header and the same rows; --since/--until bound the window', async (t) => {
  const csv = await runs.csv;
  t.equal(csv.code, 0, csv.stderr);
  const rows = csv.stdout.trimEnd().split('\n');
  t.equal(rows.length, 6, 'the header, four rows, the trailer');
  t.match(rows[0], /^at,seq,kind,fingerprint,payer,sku,credits/);
  t.match(rows[2], new RegExp(`^[^,]+,2,spend,${print.replace(/\./g, '\\.')},,research,-1,2,[A-Za-z0-9_-]{22},fetch_readable,`));
  t.same(leaked(csv.stdout), []);
  const window = await runs.window;
  t.equal(window.code, 0, window.stderr);
  t.equal(window.stdout.trimEnd().split('\n').length, 5, 'everything from the payment on, and the trailer');
  const bad = await runs.badFormat;
  t.equal(bad.code, 2);
  t.match(bad.stderr, /--format must be one of jsonl, csv/);
});

t.test('ledger verify --file: the exported file verifies offline (exit 0); an edited copy exits 1 naming the fingerprint and seq', async (t) => {
  const { stdout } = await runs.jsonl;
  const dir = mkdtempSync(join(tmpdir(), 'tb-ledger-file-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const clean = join(dir, 'clean.jsonl');
  writeFileSync(clean, stdout);
  const ok = await tollbooth(['ledger', 'verify', '--file', clean, '--config', configPath]);
  t.equal(ok.code, 0, ok.stdout + ok.stderr);
  t.match(ok.stdout, /^export verified: 4 entries of 1 ledgers \(jsonl, trailer unsigned\), 0 problems$/m);
  const edited = join(dir, 'edited.jsonl');
  writeFileSync(edited, stdout.replace('"credits":-1,"balanceAfter":2', '"credits":0,"balanceAfter":3'));
  const bad = await tollbooth(['ledger', 'verify', '--file', edited, '--config', configPath]);
  t.equal(bad.code, 1);
  t.match(bad.stdout, new RegExp(`^tamper  ${print.replace(/\./g, '\\.')}  seq=3  entry seq 3's prev is not the hash of seq 2`, 'm'));
  t.match(bad.stdout, /export NOT verified: 4 entries of 1 ledgers/);
  const missing = await tollbooth(['ledger', 'verify', '--file', join(dir, 'nope.jsonl'), '--config', configPath]);
  t.equal(missing.code, 2);
  t.match(missing.stderr, /--file: cannot read/);
  t.same(leaked(ok.stdout + bad.stdout), []);
});

t.test('ledger verify: exit 0 when the ledger and the stored balances agree', async (t) => {
  const { code, stdout, stderr } = await runs.verify;
  t.equal(code, 0, stderr);
  t.match(stdout, /^ledger verified: 1 ledgers, 4 entries checked, 0 mismatches$/m);
});

t.test('handle show lists the last ledger entries', async (t) => {
  const { code, stdout } = await runs.show;
  t.equal(code, 0);
  t.match(stdout, /ledger\s+last 4 of 4 entries, oldest first/);
  t.match(stdout, /#2\s+\S+\s+spend\s+research\s+-1\s+= 2\s+tool fetch_readable/);
  t.match(stdout, /#4\s+\S+\s+adjust\s+research\s+\+5\s+= 6\s+reason: goodwill/);
  t.same(leaked(stdout), []);
});

t.test('negative control: a balance changed behind the ledger\'s back makes verify exit 1 naming the fingerprint', async (t) => {
  const direct = new Redis(redis.url);
  t.teardown(() => direct.disconnect());
  const key = new KeySpace(keyPrefix).handle(handleHash).handle;
  await direct.hincrby(key, 'b:research', 7);
  const tampered = await tollbooth(['ledger', 'verify', '--config', configPath]);
  t.equal(tampered.code, 1);
  t.match(tampered.stdout, new RegExp(`^mismatch  ${print.replace(/\./g, '\\.')}  sku=research  expected=6  found=13  balance: ledger sum through seq 4 vs stored balance 13 \\+ reserved 0$`, 'm'));
  t.match(tampered.stdout, /ledger NOT verified: 1 ledgers, 4 entries checked, 1 mismatch/);
  t.same(leaked(tampered.stdout + tampered.stderr), []);
  await direct.hincrby(key, 'b:research', -7);
  t.equal((await tollbooth(['ledger', 'verify', '--config', configPath])).code, 0, 'agrees again once restored');
});

t.test('negative control: an entry deleted from the ledger is a sequence and balance mismatch', async (t) => {
  const direct = new Redis(redis.url);
  t.teardown(() => direct.disconnect());
  const ledger = new KeySpace(keyPrefix).handle(handleHash).ledger;
  const [, second] = await direct.xrange(ledger, '-', '+');
  await direct.xdel(ledger, (second as [string, string[]])[0]);
  const tampered = await tollbooth(['ledger', 'verify', '--config', configPath]);
  t.equal(tampered.code, 1);
  t.match(tampered.stdout, /mismatch {2}\S+ {2}sku=research {2}expected=2 {2}found=3 {2}sequence: entry seq 3 where seq 2 was expected/);
  t.match(tampered.stdout, /mismatch {2}\S+ {2}sku=research {2}expected=7 {2}found=6 {2}balance:/);
});
