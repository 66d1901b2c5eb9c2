// The admin verbs against a running memory-store gateway, as an operator runs them: a real `tollbooth
// start` process, a call paid on the dev checkout, then `tollbooth handle show|credits grant|charges
// list|ledger export|ledger verify` as child processes, which reach the gateway's store through its
// admin socket and say which process answered. Without a gateway they say where the store lives.
import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { adminSocketPath } from '../src/admin-channel.js';
import { parseConfigText } from '../src/config/load.js';
import { fingerprint } from '../src/observability/fingerprint.js';
import { waitFor } from './helpers/clock.js';
import { callTool, childEnv, CLI, payDevCheckout, ROOT, startGatewayProcess, writeConfig, type GatewayProcess } from './helpers/gateway-process.js';
import { freePort, testConfig } from './helpers/gateway.js';
import { startPaidUpstream, type PaidUpstream } from './helpers/paid-upstream.js';

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function tollbooth(args: string[], env: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { cwd: ROOT, env: childEnv(env) }, (error, stdout, stderr) => {
      resolve({ code: error ? ((error as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

let upstream: PaidUpstream;
t.before(async () => {
  upstream = await startPaidUpstream('stateless-json');
});
t.teardown(() => upstream.close());

function socketDir(t: Test): string {
  // Short: a Unix socket path has a ~107-byte limit.
  const dir = mkdtempSync(join(tmpdir(), 'tb-adm-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

async function paidGateway(t: Test, socket: string): Promise<{ gateway: GatewayProcess; handle: string }> {
  const gateway = await startGatewayProcess(t, { ...testConfig(upstream.url), admin: { socket }, logging: { level: 'info' } });
  const challenge = await callTool(gateway.url, 'fetch_readable', { url: 'https://example.com/' });
  if (challenge.kind !== 'challenged') throw new Error(`expected a challenge, got ${JSON.stringify(challenge)}`);
  t.equal(await payDevCheckout(challenge.checkoutUrl, gateway.origin), 303, 'paid on the dev checkout');
  const paid = await callTool(gateway.url, 'fetch_readable', { url: 'https://example.com/', tollboothToken: challenge.handle });
  t.match(paid, { kind: 'paid', remaining: 2 }, 'the paid call ran');
  return { gateway, handle: challenge.handle };
}

t.test('the admin verbs reach a running memory-store gateway through its admin socket, and say which process answered', async (t) => {
  const socket = join(socketDir(t), 'admin.sock');
  const { gateway, handle } = await paidGateway(t, socket);
  const print = fingerprint(handle);
  t.equal(statSync(socket).mode & 0o777, 0o600, 'the socket is mode 0600');
  const config = ['--config', gateway.configPath];
  const peer = new RegExp(`running gateway pid ${gateway.child.pid} \\(${gateway.url.replace(/[.]/g, '\\.')}, config ${gateway.configPath.replace(/[.]/g, '\\.')}\\)`);

  const show = await tollbooth(['handle', 'show', handle, ...config]);
  t.equal(show.code, 0, show.stderr);
  t.match(show.stderr, peer, 'says which process answered: pid, address, config path');
  t.match(show.stdout, new RegExp(`fingerprint\\s+${print.replace(/\./g, '\\.')}`));
  t.match(show.stdout, /balance research\s+2 \(funded\)/, 'the balance after the paid call');
  t.match(show.stdout, /grant\s+research\s+\+3/, 'the grant entry');
  t.match(show.stdout, /spend\s+research\s+-1/, 'the spend entry');
  t.notOk((show.stdout + show.stderr).includes(handle), 'the handle itself is never printed');

  const charges = await tollbooth(['charges', 'list', ...config]);
  t.equal(charges.code, 0, charges.stderr);
  const row = charges.stdout.trim().split('\n')[1] ?? '';
  t.match(row, /\ssettled\s+research\s+5\.00\s+5\.00\s+USDC\s+3\s+3\s/, 'the settled charge, the amount received');
  const column = row.split(/\s+/).at(-1) as string;
  t.equal(column, print, 'the HANDLE column is the fingerprint');
  const byColumn = await tollbooth(['handle', 'show', column, ...config]);
  t.equal(byColumn.code, 0, byColumn.stderr);
  t.equal(byColumn.stdout, show.stdout, 'handle show takes the fingerprint from charges list');

  const exported = await tollbooth(['ledger', 'export', ...config]);
  t.equal(exported.code, 0, exported.stderr);
  const entries = exported.stdout.trim().split('\n').map((line) => JSON.parse(line) as Record<string, unknown>).filter((entry) => 'kind' in entry);
  t.same(entries.map((entry) => [entry.kind, entry.credits, entry.fingerprint]), [['grant', 3, print], ['spend', -1, print]], 'the ledger, exported from the gateway');
  t.match(exported.stderr, peer);

  const verified = await tollbooth(['ledger', 'verify', ...config]);
  t.equal(verified.code, 0, verified.stderr);
  t.match(verified.stdout, /ledger verified: 1 ledgers, 2 entries checked, 0 mismatches/);

  const granted = await tollbooth(['credits', 'grant', print, '--sku', 'research', '--credits', '5', '--reason', 'dispute 7', ...config]);
  t.equal(granted.code, 0, granted.stderr);
  t.equal(granted.stdout.trim(), `granted 5 research credits to ${print}; balance now 7`);
  const after = await callTool(gateway.url, 'fetch_readable', { url: 'https://example.com/', tollboothToken: handle });
  t.match(after, { kind: 'paid', remaining: 6 }, 'the running gateway spends the granted credits');
  const audit = (await gateway.settledLogs()).find((line) => line.evt === 'admin_grant');
  t.match(audit, { fingerprint: print, credits: 5, reason: 'dispute 7' }, "the grant is audited in the gateway's own log");

  // A fingerprint argument is echoed as it is (it is what operators copy from the logs).
  const unknown = await tollbooth(['handle', 'show', 'tb_s_KLeV..EPcw', ...config]);
  t.equal(unknown.code, 1);
  t.match(unknown.stderr, 'no live handle tb_s_KLeV..EPcw: it never existed, has expired');

  const invalid = await tollbooth(['charges', 'list', '--status', 'paid', ...config]);
  t.equal(invalid.code, 2, 'a bad argument is still exit 2');
  t.match(invalid.stderr, /--status must be one of/);

  t.equal(await gateway.stop(), 0);
  t.notOk(existsSync(socket), 'the socket is removed on shutdown');
  const gone = await tollbooth(['handle', 'show', print, ...config]);
  t.equal(gone.code, 1);
  t.match(gone.stderr, /uses the memory store, which lives inside the gateway process, and no gateway is running with this config \(no admin socket at /);
  t.match(gone.stderr, /Start it \(tollbooth start --config /);
});

t.test('a socket left by a gateway that crashed: the CLI says so, and the next gateway takes the path over', async (t) => {
  const socket = join(socketDir(t), 'admin.sock');
  const { gateway } = await paidGateway(t, socket);
  await gateway.kill(); // SIGKILL: no shutdown, the socket file stays
  t.ok(existsSync(socket), 'the crashed gateway left its socket file');
  const stale = await tollbooth(['charges', 'list', '--config', gateway.configPath]);
  t.equal(stale.code, 1);
  t.match(stale.stderr, /is left from a gateway that is no longer running/);

  const next = await startGatewayProcess(t, { ...testConfig(upstream.url), admin: { socket }, logging: { level: 'warn' } });
  const listed = await tollbooth(['charges', 'list', '--config', next.configPath]);
  t.equal(listed.code, 0, listed.stderr);
  t.equal(listed.stdout.trim(), 'no charges', "the new gateway's own (empty) store");
  t.match(listed.stderr, new RegExp(`pid ${next.child.pid} `));
});

t.test('the default socket path: admin-<port>.sock in $XDG_STATE_HOME/tollbooth, else ~/.local/state/tollbooth; admin.socket wins', async (t) => {
  const config = parseConfigText('upstream: { url: "http://127.0.0.1:3001/mcp" }\nserver: { port: 8123 }\n', 'x.yaml', {});
  t.equal(adminSocketPath(config, { XDG_STATE_HOME: '/var/state' }), '/var/state/tollbooth/admin-8123.sock');
  t.match(adminSocketPath(config, {}), /\/\.local\/state\/tollbooth\/admin-8123\.sock$/);
  const chosen = parseConfigText('upstream: { url: "http://127.0.0.1:3001/mcp" }\nadmin: { socket: /run/tb.sock }\n', 'x.yaml', {});
  t.equal(adminSocketPath(chosen, { XDG_STATE_HOME: '/var/state' }), '/run/tb.sock');
});

t.test('start --port N listens on N; without admin.socket, gateway and CLI meet at admin-<file port>.sock under $XDG_STATE_HOME/tollbooth', async (t) => {
  const state = socketDir(t);
  const filePort = await freePort();
  const port = await freePort();
  const configPath = writeConfig(t, { ...testConfig(upstream.url), server: { host: '127.0.0.1', port: filePort }, logging: { level: 'warn' } });
  const child = spawn(process.execPath, [CLI, 'start', '--port', String(port), '--config', configPath], { cwd: ROOT, env: childEnv({ XDG_STATE_HOME: state }), stdio: 'ignore' });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  t.teardown(() => child.kill('SIGKILL'));
  await waitFor(() => fetch(`http://127.0.0.1:${port}/healthz`).then((r) => r.ok, () => false), 'the gateway to answer /healthz', { timeoutMs: 30_000, everyMs: 50 });
  const challenge = await callTool(`http://127.0.0.1:${port}/mcp`, 'fetch_readable', { url: 'u' });
  t.match(challenge, { kind: 'challenged' }, 'the gateway serves on the --port port');
  if (challenge.kind === 'challenged') t.equal(new URL(challenge.checkoutUrl).port, String(port), 'its derived public URL follows --port');
  const socket = join(state, 'tollbooth', `admin-${filePort}.sock`);
  t.ok(existsSync(socket), 'the socket is at the default path');
  t.equal(statSync(join(state, 'tollbooth')).mode & 0o777, 0o700, 'in a directory only its user can enter');
  const listed = await tollbooth(['charges', 'list', '--config', configPath], { XDG_STATE_HOME: state });
  t.equal(listed.code, 0, listed.stderr);
  t.match(listed.stderr, new RegExp(`pid ${child.pid} \\(http://127\\.0\\.0\\.1:${port}/mcp.*through ${socket.replace(/[.]/g, '\\.')}`));
  t.match(listed.stdout, /\spending\s+research\s/, "the challenge's charge, from the gateway's store");
  child.kill('SIGTERM');
  await exited;
  t.notOk(existsSync(socket), 'removed on shutdown');
});
