// SPEC §2/§3: one test per validation rule. Every refusal names the file, the YAML path, the
// line:column of the node, what was expected and what was found.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { isGatewayError } from '../../src/errors.js';
import { loadConfig, parseConfigText } from '../../src/config/load.js';

const FILE = 'config/test.yaml';
const UPSTREAM = ['upstream:', '  url: http://127.0.0.1:3001/mcp'];
const SKU = ['skus:', '  research: { label: Research, amount: "5.00", currency: USDC, credits: 250 }'];

const yaml = (...lines: string[]): string => `${lines.join('\n')}\n`;

function parse(text: string, env: Record<string, string> = {}) {
  return parseConfigText(text, FILE, env);
}

/** The refusal message (TB_ERR_CONFIG_INVALID) for a config that must not load. */
function refusal(text: string, env: Record<string, string> = {}): string {
  try {
    parse(text, env);
  } catch (error) {
    if (isGatewayError(error) && error.code === 'TB_ERR_CONFIG_INVALID') return error.message;
    throw error;
  }
  throw new Error('the config was accepted but should have been refused');
}

t.test('an unknown key is refused, named with its own line:column and the nearest known key', async (t) => {
  const message = refusal(
    yaml(
      ...UPSTREAM,
      'skus:',
      '  research:',
      '    label: Research',
      '    amount: "5.00"',
      '    currency: USDC',
      '    creditz: 250',
    ),
  );
  t.match(message, 'config/test.yaml:8:5 skus.research.creditz: expected one of the keys label, amount, currency, credits, allowBelowMinimum, x402Price, found the unknown key "creditz" (did you mean "credits"?)');
  t.match(message, 'config/test.yaml:4:3 skus.research.credits: expected a positive integer, found nothing (no "credits" key)');
});

t.test('several unknown keys in one mapping are each reported at their own position', async (t) => {
  const message = refusal(yaml(...UPSTREAM, 'sever: {}', 'logging: { level: info, format: json }'));
  t.match(message, 'config/test.yaml:3:1 sever: expected one of the keys server, upstream,');
  t.match(message, '(did you mean "server"?)');
  t.match(message, 'config/test.yaml:4:25 logging.format: expected one of the keys level, found the unknown key "format"');
});

t.test('${VAR} in a string value is replaced by the environment variable', async (t) => {
  const config = parse(yaml(...UPSTREAM, '  headers: { Authorization: "Bearer ${UPSTREAM_TOKEN}" }'), { UPSTREAM_TOKEN: 'abc123' });
  t.equal(config.upstream.headers.Authorization, 'Bearer abc123');
});

t.test('${VAR:-default} uses the default when the variable is unset or empty, the variable otherwise', async (t) => {
  const text = yaml(...UPSTREAM, 'server:', '  host: ${HOST:-0.0.0.0}');
  t.equal(parse(text).server.host, '0.0.0.0');
  t.equal(parse(text, { HOST: '' }).server.host, '0.0.0.0');
  t.equal(parse(text, { HOST: '10.0.0.5' }).server.host, '10.0.0.5');
});

t.test('an unset ${VAR} expands to the empty string', async (t) => {
  const config = parse(yaml(...UPSTREAM, 'payments:', '  moove:', '    webhookSecret: ${MOOVE_WEBHOOK_SECRET}'));
  t.equal(config.payments.moove.webhookSecret, '');
});

t.test('keys are never expanded', async (t) => {
  const config = parse(yaml(...UPSTREAM, '  headers: { "X-${NAME}": "${VALUE}" }'), { NAME: 'Key', VALUE: 'v' });
  t.same(config.upstream.headers, { 'X-${NAME}': 'v' });
});

t.test('$${ writes a literal ${', async (t) => {
  const config = parse(yaml(...UPSTREAM, '  headers: { X-Template: "$${NOT_A_VAR}" }'), { NOT_A_VAR: 'x' });
  t.equal(config.upstream.headers['X-Template'], '${NOT_A_VAR}');
});

t.test('a malformed ${…} reference is refused with its position', async (t) => {
  const message = refusal(yaml(...UPSTREAM, 'payments:', '  moove:', '    apiKey: ${MOOVE-API-KEY}'));
  t.match(message, 'config/test.yaml:5:13 payments.moove.apiKey: expected ${NAME} or ${NAME:-default}');
  t.match(message, 'found "${MOOVE-API-KEY}"');
});

t.test('durations accept 500ms, 20s, 60m, 30d and integer milliseconds', async (t) => {
  const config = parse(
    yaml(
      'upstream:',
      '  url: http://127.0.0.1:3001/mcp',
      '  callDeadline: 500ms',
      'payments:',
      '  chargeTtl: 60m',
      '  reconcile: { interval: 20s }',
      'handles:',
      '  ttl: 30d',
    ),
  );
  t.equal(config.upstream.callDeadline, 500);
  t.equal(config.payments.chargeTtl, 3_600_000);
  t.equal(config.payments.reconcile.interval, 20_000);
  t.equal(config.handles.ttl, 30 * 86_400_000);
  t.equal(parse(yaml(...UPSTREAM, '  callDeadline: 1500')).upstream.callDeadline, 1500);
});

t.test('a duration with an unknown unit is refused', async (t) => {
  const message = refusal(yaml(...UPSTREAM, '  callDeadline: 20sec'));
  t.match(message, 'config/test.yaml:3:17 upstream.callDeadline: expected a duration such as "500ms", "20s", "60m", "1h" or "30d", or an integer number of milliseconds, found the string "20sec"');
});

t.test('sizes are binary: 64kb is 65536 bytes, 4mb is 4194304', async (t) => {
  const config = parse(yaml(...UPSTREAM, '  maxResponseBytes: 4mb', 'server:', '  bodyLimit: 64kb'));
  t.equal(config.server.bodyLimit, 65_536);
  t.equal(config.upstream.maxResponseBytes, 4 * 1024 * 1024);
});

t.test('a size with an unknown unit is refused', async (t) => {
  const message = refusal(yaml(...UPSTREAM, 'server:', '  bodyLimit: 4 megabytes'));
  t.match(message, 'config/test.yaml:4:14 server.bodyLimit: expected a size such as "64kb" or "4mb"');
  t.match(message, 'found the string "4 megabytes"');
});

t.test('an amount written as a YAML number is refused', async (t) => {
  const message = refusal(yaml(...UPSTREAM, 'skus:', '  research:', '    label: Research', '    amount: 5', '    currency: USDC', '    credits: 250'));
  t.equal(message, 'config/test.yaml:6:13 skus.research.amount: expected a decimal amount written as a string, e.g. "5.00" (quote it in YAML), found the number 5');
});

t.test('an amount with more than 6 decimals is refused', async (t) => {
  const message = refusal(yaml(...UPSTREAM, 'skus:', '  research: { label: R, amount: "5.0000001", currency: USDC, credits: 1 }'));
  t.match(message, 'config/test.yaml:4:33 skus.research.amount: expected a positive decimal string with at most 6 decimals, e.g. "5.00", found the string "5.0000001"');
});

t.test('an amount that is not a number at all is refused with a message, not a crash', async (t) => {
  const message = refusal(yaml(...UPSTREAM, 'skus:', '  research: { label: R, amount: "five", currency: USDC, credits: 1 }'));
  t.match(message, 'skus.research.amount: expected a positive decimal string with at most 6 decimals');
});

t.test('an amount of zero is refused', async (t) => {
  const message = refusal(yaml(...UPSTREAM, 'skus:', '  research: { label: R, amount: "0.00", currency: USDC, credits: 1, allowBelowMinimum: true }'));
  t.match(message, 'skus.research.amount: expected an amount greater than zero, found the string "0.00"');
});

t.test('an amount under 5.00 is refused unless allowBelowMinimum is set', async (t) => {
  const message = refusal(yaml(...UPSTREAM, 'skus:', '  small: { label: S, amount: "4.99", currency: USDC, credits: 10 }'));
  t.match(message, 'config/test.yaml:4:30 skus.small.amount: expected an amount of at least 5.00');
  t.match(message, 'allowBelowMinimum: true), found the string "4.99"');
  const config = parse(yaml(...UPSTREAM, 'skus:', '  small: { label: S, amount: "4.99", currency: USDC, credits: 10, allowBelowMinimum: true }'));
  t.equal(config.skus.small?.amount, '4.99');
});

t.test('a priced tool must name a configured SKU', async (t) => {
  const message = refusal(yaml(...UPSTREAM, ...SKU, 'tools:', '  fetch_readable: { sku: reserch, cost: 1 }'));
  t.equal(message, 'config/test.yaml:6:26 tools.fetch_readable.sku: expected the name of an SKU under skus (known: research), found the string "reserch"');
});

t.test('cost must be a positive integer', async (t) => {
  const message = refusal(yaml(...UPSTREAM, ...SKU, 'tools:', '  a: { sku: research, cost: 0 }', '  b: { sku: research, cost: 1.5 }', '  c: { sku: research, cost: "1" }'));
  t.match(message, 'config/test.yaml:6:29 tools.a.cost: expected a positive integer, found the number 0');
  t.match(message, 'config/test.yaml:7:29 tools.b.cost: expected a positive integer, found the number 1.5');
  t.match(message, 'config/test.yaml:8:29 tools.c.cost: expected a positive integer, found the string "1"');
});

t.test('a tool entry is priced (sku + cost), hidden, or both; a hidden free tool needs neither sku nor cost', async (t) => {
  const config = parse(yaml(...UPSTREAM, ...SKU, 'tools:', '  secret_tool: { hidden: true }', '  parked: { sku: research, cost: 3, hidden: true }'));
  t.same(config.tools.secret_tool, { charge: 'success', hidden: true });
  t.same(config.tools.parked, { sku: 'research', cost: 3, charge: 'success', hidden: true });
  t.match(refusal(yaml(...UPSTREAM, ...SKU, 'tools:', '  nothing: {}')), 'tools.nothing.sku: expected an sku and a cost (a priced tool), or hidden: true');
  t.match(refusal(yaml(...UPSTREAM, ...SKU, 'tools:', '  shown: { hidden: false }')), 'tools.shown.sku: expected an sku and a cost');
  t.match(refusal(yaml(...UPSTREAM, ...SKU, 'tools:', '  half: { sku: research, hidden: true }')), 'tools.half.cost: expected a cost (a positive integer) because the tool names an sku');
  t.match(refusal(yaml(...UPSTREAM, ...SKU, 'tools:', '  half: { cost: 2 }')), 'tools.half.sku: expected the name of an SKU under skus because the tool has a cost');
  t.match(refusal(yaml(...UPSTREAM, ...SKU, 'tools:', '  x: { hidden: "yes" }')), 'tools.x.hidden');
  t.match(refusal(yaml(...UPSTREAM, ...SKU, 'tools:', '  parked: { sku: reserch, cost: 1, hidden: true }')), 'tools.parked.sku: expected the name of an SKU under skus');
});

t.test('auth.hideUnauthorisedTools defaults to true and takes a boolean', async (t) => {
  t.equal(parse(yaml(...UPSTREAM)).auth.hideUnauthorisedTools, true);
  t.equal(parse(yaml(...UPSTREAM, 'auth: { hideUnauthorisedTools: false }')).auth.hideUnauthorisedTools, false);
  t.match(refusal(yaml(...UPSTREAM, 'auth: { hideUnauthorisedTools: 1 }')), 'auth.hideUnauthorisedTools');
});

t.test('credits must be a positive integer', async (t) => {
  const message = refusal(yaml(...UPSTREAM, 'skus:', '  research: { label: R, amount: "5.00", currency: USDC, credits: -3 }'));
  t.match(message, 'config/test.yaml:4:66 skus.research.credits: expected a positive integer, found the number -3');
});

t.test('handles.ttl under 1h is refused; 1h is accepted', async (t) => {
  const message = refusal(yaml(...UPSTREAM, 'handles:', '  ttl: 59m'));
  t.equal(message, 'config/test.yaml:4:8 handles.ttl: expected a duration of at least 1h, found the string "59m"');
  t.equal(parse(yaml(...UPSTREAM, 'payments:', '  chargeTtl: 15m', 'handles:', '  ttl: 1h')).handles.ttl, 3_600_000);
});

t.test('handles.ttl must be longer than payments.chargeTtl: a payment must never land on an expired handle', async (t) => {
  const equal = refusal(yaml(...UPSTREAM, 'payments:', '  chargeTtl: 2h', 'handles:', '  ttl: 2h'));
  t.equal(equal, 'config/test.yaml:6:8 handles.ttl: expected a handles.ttl longer than payments.chargeTtl (7200000 ms) so a payment never lands on an expired handle, found the string "2h"');
  const byDefault = refusal(yaml(...UPSTREAM, 'handles:', '  ttl: 1h'));
  t.match(byDefault, 'handles.ttl: expected a handles.ttl longer than payments.chargeTtl (3600000 ms)', 'the default chargeTtl (60m) counts');
  const defaultTtl = refusal(yaml(...UPSTREAM, 'payments:', '  chargeTtl: 31d'));
  t.match(defaultTtl, 'handles.ttl: expected a handles.ttl longer than payments.chargeTtl (2678400000 ms) so a payment never lands on an expired handle, found the default 2592000000');
  t.equal(parse(yaml(...UPSTREAM, 'payments:', '  chargeTtl: 2h', 'handles:', '  ttl: 121m')).handles.ttl, 121 * 60_000);
});

t.test('payments.chargeTtl under 15m is refused', async (t) => {
  const message = refusal(yaml(...UPSTREAM, 'payments:', '  chargeTtl: 899999'));
  t.equal(message, 'config/test.yaml:4:14 payments.chargeTtl: expected a duration of at least 15m, found the number 899999');
  t.equal(parse(yaml(...UPSTREAM, 'payments:', '  chargeTtl: 15m')).payments.chargeTtl, 900_000);
});

t.test('tolerance and minimumFraction must lie in [0, 1)', async (t) => {
  const message = refusal(yaml(...UPSTREAM, 'payments:', '  settlement:', '    tolerance: 1', '    minimumFraction: -0.1'));
  t.match(message, 'config/test.yaml:5:16 payments.settlement.tolerance: expected a fraction in [0, 1), found the number 1');
  t.match(message, 'config/test.yaml:6:22 payments.settlement.minimumFraction: expected a fraction in [0, 1), found the number -0.1');
});

t.test('minimumFraction must not exceed 1 − tolerance', async (t) => {
  const message = refusal(yaml(...UPSTREAM, 'payments:', '  settlement: { tolerance: 0.5, minimumFraction: 0.6 }'));
  t.equal(message, 'config/test.yaml:4:50 payments.settlement.minimumFraction: expected a minimumFraction ≤ 1 − tolerance, found the number 0.6');
  t.ok(parse(yaml(...UPSTREAM, 'payments:', '  settlement: { tolerance: 0.5, minimumFraction: 0.5 }')));
});

t.test('provider moove needs a non-empty apiKey', async (t) => {
  const text = yaml(...UPSTREAM, 'payments:', '  provider: moove', '  moove:', '    apiKey: ${MOOVE_API_KEY}');
  t.equal(
    refusal(text),
    'config/test.yaml:6:13 payments.moove.apiKey: expected a non-empty apiKey because payments.provider is moove (set MOOVE_API_KEY), found an empty string (from "${MOOVE_API_KEY}": unset or empty)',
  );
  t.equal(parse(text, { MOOVE_API_KEY: 'sk_test_1' }).payments.moove.apiKey, 'sk_test_1');
  t.match(refusal(yaml(...UPSTREAM, 'payments:', '  provider: moove')), 'config/test.yaml:3:1 payments.moove.apiKey: expected a non-empty apiKey');
});

t.test('the moove block is not validated when the provider is dev, even with ${MOOVE_API_KEY} unset', async (t) => {
  const config = parse(yaml(...UPSTREAM, 'payments:', '  provider: dev', '  moove:', '    apiKey: ${MOOVE_API_KEY}', '    webhookSecret: ${MOOVE_WEBHOOK_SECRET:-}'));
  t.equal(config.payments.provider, 'dev');
  t.equal(config.payments.moove.apiKey, '');
});

// SPEC §20: configuration that would disable billing fails.
t.test('a filled-in moove block without provider moove is refused, naming payments.provider', async (t) => {
  const message = refusal(yaml(...UPSTREAM, 'payments:', '  moove:', '    apiKey: sk_live_forgot_provider', '    webhookSecret: whsec_x'));
  t.equal(
    message,
    'config/test.yaml:3:1 payments.provider: expected moove, because payments.moove sets apiKey, webhookSecret (without provider: moove the gateway would run on the free dev checkout and nobody would pay; remove the payments.moove block to use dev), found the default "dev"',
  );
  t.notMatch(message, /sk_live_forgot_provider|whsec_x/, 'the values themselves are not echoed');
});

t.test('provider dev written out beside a filled-in moove block is refused the same way', async (t) => {
  t.match(refusal(yaml(...UPSTREAM, 'payments:', '  provider: dev', '  moove:', '    webhookSecret: whsec_x')), 'config/test.yaml:4:13 payments.provider: expected moove, because payments.moove sets webhookSecret');
  t.match(refusal(yaml(...UPSTREAM, 'payments:', '  moove: { baseUrl: "https://api.moove.xyz" }')), 'payments.provider: expected moove, because payments.moove sets baseUrl');
});

t.test('a moove key that comes from the environment counts: set MOOVE_API_KEY without provider moove and the config is refused', async (t) => {
  const text = yaml(...UPSTREAM, 'payments:', '  moove:', '    apiKey: ${MOOVE_API_KEY}', '    webhookSecret: ${MOOVE_WEBHOOK_SECRET:-}');
  t.equal(parse(text).payments.provider, 'dev', 'unset: an empty block is no sign of intent');
  t.match(refusal(text, { MOOVE_API_KEY: 'sk_live_1' }), 'payments.provider: expected moove, because payments.moove sets apiKey');
  t.equal(parse(yaml(...UPSTREAM, 'payments:', '  moove: {}')).payments.moove.baseUrl, 'https://api.moove.xyz', 'an empty block: defaults apply');
});

// SPEC §20: configured scopes are RFC 6749 scope-tokens.
t.test('scopes must be RFC 6749 scope-tokens: no space, quote, backslash, control or non-ASCII character', async (t) => {
  const base = ['server: { publicUrl: "https://gw.example.test/mcp" }', 'auth:', '  mode: oauth', '  issuer: https://id.example.test/', '  jwksUrl: https://id.example.test/jwks'];
  const bad = ['two words', 'a"b', 'a\\b', 'line\r\nX-Injected: 1', 'tab\there', 'caf\u00e9', ''];
  for (const scope of bad) {
    const required = refusal(yaml(...UPSTREAM, ...base, `  requiredScopes: [ok, ${JSON.stringify(scope)}]`));
    t.match(required, /^config\/test\.yaml:\d+:\d+ auth\.requiredScopes\[1\]: expected an RFC 6749 scope-token \(printable ASCII without spaces, " or \\\), found /, `requiredScopes ${JSON.stringify(scope)}`);
    const perTool = refusal(yaml(...UPSTREAM, ...base, `  toolScopes: { fetch_readable: [${JSON.stringify(scope)}] }`));
    t.match(perTool, /auth\.toolScopes\.fetch_readable\[0\]: expected an RFC 6749 scope-token/, `toolScopes ${JSON.stringify(scope)}`);
  }
  const good = parse(yaml(...UPSTREAM, ...base, '  requiredScopes: ["mcp:use", "https://api.example.test/read", "!#$%&\'()*+,-./[]^_`{|}~"]'));
  t.same(good.auth.requiredScopes, ['mcp:use', 'https://api.example.test/read', "!#$%&'()*+,-./[]^_`{|}~"]);
});

t.test('auth.mode oauth needs an issuer and an absolute jwksUrl', async (t) => {
  const message = refusal(yaml(...UPSTREAM, 'server: { publicUrl: "https://gw.example.test/mcp" }', 'auth:', '  mode: oauth', '  jwksUrl: /.well-known/jwks.json'));
  t.match(message, 'config/test.yaml:4:1 auth.issuer: expected a non-empty issuer because auth.mode is oauth, found nothing (no "issuer" key)');
  t.match(message, 'config/test.yaml:6:12 auth.jwksUrl: expected an absolute http(s) jwksUrl because auth.mode is oauth, found the string "/.well-known/jwks.json"');
});

t.test('auth.mode oauth needs an absolute server.publicUrl', async (t) => {
  const auth = ['auth:', '  mode: oauth', '  issuer: https://id.example.test/', '  jwksUrl: https://id.example.test/jwks'];
  t.equal(
    refusal(yaml(...UPSTREAM, ...auth)),
    'config/test.yaml:1:1 server.publicUrl: expected an absolute http(s) server.publicUrl because auth.mode is oauth, found nothing (no "publicUrl" key)',
  );
  t.match(refusal(yaml(...UPSTREAM, 'server: { publicUrl: /mcp }', ...auth)), 'config/test.yaml:3:22 server.publicUrl: expected an absolute http(s) URL');
  const config = parse(yaml(...UPSTREAM, 'server: { publicUrl: "https://gw.example.test/mcp" }', ...auth));
  t.equal(config.auth.audience, 'https://gw.example.test/mcp');
});

t.test('upstream needs exactly one of url and command', async (t) => {
  t.equal(
    refusal(yaml('upstream:', '  url: http://127.0.0.1:3001/mcp', '  command: [node, server.js]')),
    'config/test.yaml:2:3 upstream: expected exactly one of upstream.url or upstream.command, found both',
  );
  t.equal(refusal(yaml('upstream:', '  headers: {}')), 'config/test.yaml:2:3 upstream: expected exactly one of upstream.url or upstream.command, found neither');
  t.same(parse(yaml('upstream:', '  command: [node, server.js]')).upstream.command, ['node', 'server.js']);
});

t.test('store type redis needs exactly one of redis.url and redis.cluster', async (t) => {
  t.equal(
    refusal(yaml(...UPSTREAM, 'store:', '  type: redis')),
    'config/test.yaml:3:1 store.redis: expected exactly one of store.redis.url or store.redis.cluster when store.type is redis, found neither',
  );
  const both = refusal(yaml(...UPSTREAM, 'store:', '  type: redis', '  redis:', '    url: redis://127.0.0.1:6379', '    cluster: ["redis://10.0.0.1:7000"]'));
  t.equal(both, 'config/test.yaml:6:5 store.redis: expected exactly one of store.redis.url or store.redis.cluster when store.type is redis, found both');
  t.match(refusal(yaml(...UPSTREAM, 'store:', '  type: redis', '  redis: { url: "${REDIS_URL}" }')), 'found neither');
  t.equal(parse(yaml(...UPSTREAM, 'store:', '  type: redis', '  redis: { url: "${REDIS_URL}" }'), { REDIS_URL: 'redis://r:6379/0' }).store.redis?.url, 'redis://r:6379/0');
  t.equal(parse(yaml(...UPSTREAM, 'store:', '  type: memory', '  redis: { url: "${REDIS_URL}" }')).store.type, 'memory');
});

t.test('a value taken from the environment at a secret path is not echoed in the error', async (t) => {
  const message = refusal(yaml(...UPSTREAM, 'store:', '  type: redis', '  redis: { url: "${REDIS_URL}" }'), { REDIS_URL: 'http://user:hunter2@r:6379' });
  t.match(message, 'config/test.yaml:5:17 store.redis.url: expected a redis:// or rediss:// URL');
  t.notMatch(message, 'hunter2');
});

t.test('a YAML syntax error names its line and column', async (t) => {
  const message = refusal(yaml(...UPSTREAM, 'skus:', '  research: { label: "Research, amount: "5.00" }'));
  t.match(message, /^config\/test\.yaml:\d+:\d+ YAML syntax error: /);
  t.match(refusal('upstream:\n  url: [http://x\nserver: {}\n'), /^config\/test\.yaml:3:1 YAML syntax error: /);
});

t.test('a key written twice is a syntax error, not "the last one wins"', async (t) => {
  t.match(refusal(yaml(...UPSTREAM, 'payments:', '  provider: dev', '  provider: moove')), /^config\/test\.yaml:5:3 YAML syntax error: Map keys must be unique/);
});

t.test('an empty file is refused: upstream is required', async (t) => {
  t.match(refusal(''), 'config/test.yaml:1:1 (top level): expected a mapping');
});

t.test('every problem is listed, one per line, in file order', async (t) => {
  const lines = refusal(yaml('upstream:', '  url: ftp://x', 'server:', '  port: huge', 'handles: { ttl: 1m }')).split('\n');
  t.equal(lines.length, 3);
  t.match(lines[0], 'config/test.yaml:2:8 upstream.url: expected an absolute http(s) URL');
  t.match(lines[1], 'config/test.yaml:4:9 server.port: expected an integer, found the string "huge"');
  t.match(lines[2], 'config/test.yaml:5:17 handles.ttl: expected a duration of at least 1h');
});

t.test('defaults are applied and publicUrl/audience are derived', async (t) => {
  const config = parse(yaml(...UPSTREAM));
  t.same(config.server, {
    host: '127.0.0.1',
    port: 8080,
    mcpPath: '/mcp',
    publicUrl: 'http://127.0.0.1:8080/mcp',
    allowedOrigins: [],
    allowedHosts: [],
    bodyLimit: 4 * 1024 * 1024,
    trustProxy: false,
    drainTimeout: 15_000,
  });
  t.same(config.upstream, { url: 'http://127.0.0.1:3001/mcp', headers: {}, callDeadline: 20_000, taskDeadline: 3_600_000, maxResponseBytes: 16 * 1024 * 1024, inheritEnv: [], env: {} });
  t.equal(config.store.type, 'memory');
  t.same(config.payments, {
    provider: 'dev',
    chargeTtl: 3_600_000,
    moove: { apiKey: '', baseUrl: 'https://api.moove.xyz', webhookSecret: '' },
    settlement: { tolerance: 0.005, minimumFraction: 0.1 },
    reconcile: { interval: 60_000 },
    x402: { facilitatorUrl: '', network: 'eip155:8453', asset: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913', assetDecimals: 6, currency: 'USDC', payTo: '', maxTimeoutSeconds: 120 },
  });
  t.same(config.handles, { argumentName: 'tollboothToken', ttl: 30 * 86_400_000, hashSecret: '' });
  t.same(config.limits, { perHandle: { ratePerSecond: 2, burst: 10 }, challengesPerClient: { ratePerSecond: 0.2, burst: 5 }, newChargesPerSecond: 20 });
  t.equal(config.auth.mode, 'none');
  t.equal(config.auth.audience, 'http://127.0.0.1:8080/mcp');
  t.same(config.auth.algorithms, ['RS256', 'ES256', 'EdDSA']);
  t.same(config.metrics, { enabled: true, path: '/metrics' });
  t.same(config.logging, { level: 'info' });
  t.same(parse(yaml(...UPSTREAM, ...SKU, 'tools:', '  fetch_readable: { sku: research, cost: 1 }')).tools.fetch_readable, { sku: 'research', cost: 1, charge: 'success', hidden: false });
});

t.test('the loaded config is deep-frozen', async (t) => {
  const config = parse(yaml(...UPSTREAM, ...SKU));
  t.ok(Object.isFrozen(config));
  t.ok(Object.isFrozen(config.server));
  t.ok(Object.isFrozen(config.skus.research));
  t.ok(Object.isFrozen(config.auth.algorithms));
  t.throws(() => {
    (config.server as { port: number }).port = 1;
  }, TypeError);
});

t.test('loadConfig reads the file from disk; a missing file is TB_ERR_CONFIG_UNREADABLE naming it', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tollbooth-load-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'tollbooth.yaml');
  writeFileSync(file, yaml(...UPSTREAM, 'server:', '  port: ${PORT:-9090}x'));
  t.throws(() => loadConfig(file, {}), { code: 'TB_ERR_CONFIG_INVALID', message: `${file}:4:9 server.port: expected an integer, found the string "9090x" (from "\${PORT:-9090}x")` });
  writeFileSync(file, yaml(...UPSTREAM));
  t.equal(loadConfig(file, {}).server.port, 8080);
  const missing = join(dir, 'missing.yaml');
  t.throws(() => loadConfig(missing, {}), { code: 'TB_ERR_CONFIG_UNREADABLE', message: new RegExp(`^${missing.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: cannot read the config file`) });
});
