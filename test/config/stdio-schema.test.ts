// upstream.stdio (SPEC §3, §5.5): how a stdio upstream's children run; only valid with upstream.command.
import t from 'tap';
import { parseConfigText } from '../../src/config/load.js';
import { isGatewayError } from '../../src/errors.js';

const FILE = 'config/test.yaml';
const yaml = (...lines: string[]): string => `${lines.join('\n')}\n`;
const parse = (text: string) => parseConfigText(text, FILE, {});

function refusal(text: string): string {
  try {
    parse(text);
  } catch (error) {
    if (isGatewayError(error) && error.code === 'TB_ERR_CONFIG_INVALID') return error.message;
    throw error;
  }
  throw new Error('the config was accepted but should have been refused');
}

t.test('a command gets the stdio defaults: perClient, 32 children, 10 minutes idle', async (t) => {
  const config = parse(yaml('upstream:', '  command: ["node", "dist/research/stdio.js"]'));
  t.strictSame(config.upstream.stdio, { sessions: 'perClient', maxChildren: 32, idleTimeout: 600_000 });
});

t.test('stdio settings are read, durations in ms', async (t) => {
  const config = parse(yaml('upstream:', '  command: ["server"]', '  stdio: { sessions: shared, maxChildren: 4, idleTimeout: 90s }'));
  t.strictSame(config.upstream.stdio, { sessions: 'shared', maxChildren: 4, idleTimeout: 90_000 });
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
  t.match(refusal(yaml('upstream:', '  command: ["s"]', '  stdio: { maxchildren: 3 }')), /unknown key "maxchildren" \(did you mean "maxChildren"\?\)/);
});
