// upstream.stdio (SPEC §3, §5.5): how a stdio upstream's children run; only valid with upstream.command.
import t from 'tap';
import { parseConfigText } from '../../src/config/load.js';
import { refusalOf } from '../helpers/config-refusal.js';

const FILE = 'config/test.yaml';
const yaml = (...lines: string[]): string => `${lines.join('\n')}\n`;
const parse = (text: string) => parseConfigText(text, FILE, {});

const refusal = (text: string): string => refusalOf(parse, text);

t.test('a command gets the stdio defaults: perClient, 32 children, 10 minutes idle, 10 s to initialise, 5 s to stop', async (t) => {
  const config = parse(yaml('upstream:', '  command: ["node", "dist/research/stdio.js"]'));
  t.strictSame(config.upstream.stdio, { sessions: 'perClient', maxChildren: 32, idleTimeout: 600_000, initTimeout: 10_000, killTimeout: 5_000 });
  t.strictSame(config.upstream.inheritEnv, [], 'nothing inherited beyond the fixed names');
  t.strictSame(config.upstream.env, {});
  t.equal(config.server.drainTimeout, 15_000, 'server.drainTimeout defaults to 15 s');
});

t.test('stdio settings are read, durations in ms', async (t) => {
  const config = parse(yaml('server: { drainTimeout: 2s }', 'upstream:', '  command: ["server"]', '  stdio: { sessions: shared, maxChildren: 4, idleTimeout: 90s, initTimeout: 1s, killTimeout: 500ms }'));
  t.strictSame(config.upstream.stdio, { sessions: 'shared', maxChildren: 4, idleTimeout: 90_000, initTimeout: 1_000, killTimeout: 500 });
  t.equal(config.server.drainTimeout, 2_000);
});

t.test('a child environment: inheritEnv names and an env map, ${VAR} expanded', async (t) => {
  const config = parseConfigText(yaml('upstream:', '  command: ["server"]', '  inheritEnv: [AWS_REGION, LD_LIBRARY_PATH]', '  env: { API_TOKEN: "${TOKEN}", MODE: fixed }'), FILE, { TOKEN: 't0k' });
  t.strictSame(config.upstream.inheritEnv, ['AWS_REGION', 'LD_LIBRARY_PATH']);
  t.strictSame(config.upstream.env, { API_TOKEN: 't0k', MODE: 'fixed' });
  t.match(refusal(yaml('upstream:', '  command: ["s"]', '  inheritEnv: ["NOT-A-NAME"]')), /upstream\.inheritEnv\[0\]: expected an environment variable name/);
  t.match(refusal(yaml('upstream:', '  command: ["s"]', '  env: { "1BAD": x }')), /upstream\.env: expected environment variable names as keys .*found the key "1BAD"/);
  t.match(refusal(yaml('upstream:', '  url: http://127.0.0.1:3001/mcp', '  env: { A: b }')), /upstream\.env: expected no upstream\.env unless upstream\.command is set/);
  t.match(refusal(yaml('upstream:', '  url: http://127.0.0.1:3001/mcp', '  inheritEnv: [A]')), /upstream\.inheritEnv: expected no upstream\.inheritEnv unless upstream\.command is set/);
});

t.test('an HTTP upstream has no stdio settings, and refuses them', async (t) => {
  t.equal(parse(yaml('upstream:', '  url: http://127.0.0.1:3001/mcp')).upstream.stdio, undefined);
  const message = refusal(yaml('upstream:', '  url: http://127.0.0.1:3001/mcp', '  stdio: { sessions: shared }'));
  t.match(message, /config\/test\.yaml:3:\d+ upstream\.stdio: expected no upstream\.stdio unless upstream\.command is set .*, found upstream\.stdio beside upstream\.url/);
});

t.test('bad stdio values name their path', async (t) => {
  t.match(refusal(yaml('upstream:', '  command: ["s"]', '  stdio: { sessions: perRequest }')), /upstream\.stdio\.sessions: expected/);
  t.match(refusal(yaml('upstream:', '  command: ["s"]', '  stdio: { maxChildren: 0 }')), /upstream\.stdio\.maxChildren: expected a positive integer/);
  t.match(refusal(yaml('upstream:', '  command: ["s"]', '  stdio: { idleTimeout: 10ms }')), /upstream\.stdio\.idleTimeout: expected a duration of at least 1s/);
  t.match(refusal(yaml('upstream:', '  command: ["s"]', '  stdio: { initTimeout: 10ms }')), /upstream\.stdio\.initTimeout: expected a duration of at least 100ms/);
  t.match(refusal(yaml('upstream:', '  command: ["s"]', '  stdio: { killTimeout: 10ms }')), /upstream\.stdio\.killTimeout: expected a duration of at least 100ms/);
  t.match(refusal(yaml('upstream:', '  command: ["s"]', '  stdio: { maxchildren: 3 }')), /unknown key "maxchildren" \(did you mean "maxChildren"\?\)/);
});
