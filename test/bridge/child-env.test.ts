// SPEC §22: a stdio child's environment is given (bridge/child-env.ts), and `tollbooth bridge` gives it the
// same way (--inherit-env, --env): server-everything's get-env shows what the child really got.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import t from 'tap';
import { childEnvironment } from '../../src/bridge/child-env.js';
import { childEnv, everythingEntry } from '../helpers/interop-upstreams.js';
import { waitFor } from './helpers.js';

const CLI = fileURLToPath(new URL('../../dist/cli.js', import.meta.url));

t.test('childEnvironment: the fixed names, LC_*, the inherited names and the map; nothing else', async (t) => {
  const parent = { PATH: '/bin', HOME: '/h', LANG: 'C', LC_TIME: 'de_DE', TZ: 'UTC', TMPDIR: '/t', SECRET: 's', NAMED: 'n', NODE_OPTIONS: '--x' };
  t.strictSame(childEnvironment(parent), { PATH: '/bin', HOME: '/h', LANG: 'C', LC_TIME: 'de_DE', TZ: 'UTC', TMPDIR: '/t' });
  t.strictSame(childEnvironment(parent, { inheritEnv: ['NAMED', 'ABSENT'], env: { SET: 'v', PATH: '/opt/bin' } }), {
    PATH: '/opt/bin', HOME: '/h', LANG: 'C', LC_TIME: 'de_DE', TZ: 'UTC', TMPDIR: '/t', NAMED: 'n', SET: 'v',
  }, 'an absent inherited name is skipped; the map wins');
});

t.test('tollbooth bridge: the child gets the given environment, not the bridge\'s', async (t) => {
  const env = childEnv({ BRIDGE_SECRET: 'bridge-secret-4242', PASS_ME: 'passed' });
  const child = spawn(process.execPath, [CLI, 'bridge', '--port', '0', '--inherit-env', 'PASS_ME', '--env', 'SET_ME=set=with=equals', '--', process.execPath, everythingEntry(), 'stdio'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  t.teardown(() => void child.kill('SIGKILL'));
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString('utf8')));
  await waitFor(() => /at http:\/\/127\.0\.0\.1:\d+\/mcp/.test(out), 'the bridge to listen', 30_000);
  const url = /at (http:\/\/127\.0\.0\.1:\d+\/mcp)/.exec(out)![1]!;
  const client = new Client({ name: 'env-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  const text = ((await client.callTool({ name: 'get-env', arguments: {} })).content as { text: string }[])[0]!.text;
  const seen = JSON.parse(text) as Record<string, string>;
  await client.close();
  t.notOk(text.includes('bridge-secret-4242'), 'the bridge\'s own environment stays home');
  t.notOk('NODE_OPTIONS' in seen, 'nothing unnamed passes');
  t.equal(seen.PASS_ME, 'passed', '--inherit-env passes a name');
  t.equal(seen.SET_ME, 'set=with=equals', '--env sets a value (split at the first =)');
  child.kill('SIGTERM');
  t.equal((await once(child, 'exit'))[0], 0);
});

t.test('tollbooth bridge: a bad --env or --inherit-env is a usage error', async (t) => {
  for (const args of [['--env', 'NOEQUALS'], ['--env', '1X=y'], ['--inherit-env', 'A-B']]) {
    const child = spawn(process.execPath, [CLI, 'bridge', ...args, '--', 'node'], { env: childEnv(), stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString('utf8')));
    t.equal((await once(child, 'exit'))[0], 2, args.join(' '));
    t.match(err, /--(env|inherit-env)/);
  }
});
