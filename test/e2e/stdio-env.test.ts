// SPEC §22: a stdio child's environment is given, not inherited. server-everything runs as the gateway's
// stdio upstream and its `get-env` tool prints the environment the child really got: the gateway's secrets
// (the Redis URL with its password, the Moove key and webhook secret, the hash secret, another upstream's
// header token) are in the gateway's environment and its config, and none of them reaches the child; the
// names in upstream.inheritEnv and the upstream.env map (with ${VAR} expanded) do.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import t from 'tap';
import { loadConfig } from '../../src/config/load.js';
import { createLogger } from '../../src/observability/logger.js';
import { runGateway } from '../../src/start.js';
import { everythingEntry } from '../helpers/interop-upstreams.js';

const SECRETS = {
  REDIS_URL: 'redis://:redis-password-5f1c@127.0.0.1:6399/0',
  MOOVE_API_KEY: 'moove-api-key-8d2e',
  MOOVE_WEBHOOK_SECRET: 'moove-webhook-secret-77aa',
  TB_HASH_SECRET: 'hash-secret-c0ffee',
  OTHER_TOKEN: 'other-upstream-token-9b9b',
};
/** What the child may see: the fixed list, the one name inherited, the two set. */
const ALLOWED = /^(PATH|HOME|LANG|LC_\w+|TZ|TMPDIR|TB_INHERITED|CHILD_API_TOKEN|CHILD_MODE)$/;

t.test('a stdio child sees PATH, HOME, LANG, LC_*, TZ, TMPDIR, inheritEnv and env — none of the gateway\'s secrets', async (t) => {
  const added = { ...SECRETS, TB_INHERITED: 'inherited-value', TB_NOT_INHERITED: 'not-inherited-value', CHILD_TOKEN: 'child-token-from-env', LC_ALL: 'C.UTF-8' };
  for (const [name, value] of Object.entries(added)) process.env[name] = value;
  t.teardown(() => {
    for (const name of Object.keys(added)) delete process.env[name];
  });
  const dir = mkdtempSync(join(tmpdir(), 'tb-stdio-env-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'tollbooth.yaml');
  writeFileSync(file, [
    'server: { host: 127.0.0.1, port: 0 }',
    'upstream:',
    `  command: ${JSON.stringify([process.execPath, everythingEntry(), 'stdio'])}`,
    '  inheritEnv: [TB_INHERITED]',
    '  env: { CHILD_API_TOKEN: "${CHILD_TOKEN}", CHILD_MODE: fixed }',
    'store: { type: memory, redis: { url: "${REDIS_URL}" } }',
    'payments:',
    '  provider: moove',
    '  moove: { apiKey: "${MOOVE_API_KEY}", webhookSecret: "${MOOVE_WEBHOOK_SECRET}", baseUrl: "http://127.0.0.1:9" }',
    'handles: { hashSecret: "${TB_HASH_SECRET}" }',
    'servers:',
    '  other: { path: /other, upstream: { url: "http://127.0.0.1:9/mcp", headers: { authorization: "Bearer ${OTHER_TOKEN}" } } }',
    'logging: { level: warn }',
    '',
  ].join('\n'));
  const config = loadConfig(file);
  t.equal(config.upstream.env.CHILD_API_TOKEN, 'child-token-from-env', '${VAR} is expanded in upstream.env like anywhere else');
  const gateway = await runGateway(config, { logger: createLogger('silent'), configPath: file });
  t.teardown(() => gateway.close());

  const client = new Client({ name: 'env-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(gateway.url)));
  t.teardown(() => client.close());
  const result = await client.callTool({ name: 'get-env', arguments: {} });
  const text = (result.content as { type: string; text: string }[])[0]!.text;
  const env = JSON.parse(text) as Record<string, string>;

  t.strictSame(Object.keys(env).filter((name) => !ALLOWED.test(name)), [], 'no variable beyond the given ones');
  for (const [name, value] of Object.entries(SECRETS)) {
    t.notOk(text.includes(value), `${name}'s value is nowhere in the child's environment`);
    t.notOk(name in env, `${name} is not set in the child`);
  }
  t.notOk('TB_NOT_INHERITED' in env, 'a variable not named in inheritEnv stays home');
  t.equal(env.TB_INHERITED, 'inherited-value', 'inheritEnv passes the named variable');
  t.equal(env.CHILD_API_TOKEN, 'child-token-from-env', 'upstream.env sets a variable, ${VAR} expanded');
  t.equal(env.CHILD_MODE, 'fixed');
  t.equal(env.PATH, process.env.PATH, 'PATH passes');
  t.equal(env.LC_ALL, 'C.UTF-8', 'LC_* passes');
});
