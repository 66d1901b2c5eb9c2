// `tollbooth check` prints the effective config; every secret in it is masked, empty ones stay empty.
import t from 'tap';
import { parseConfigText } from '../../src/config/load.js';
import { MASK, maskSecrets, maskUrlSecrets, printableConfig } from '../../src/config/mask.js';

const withSecrets = `
upstream:
  url: http://127.0.0.1:3001/mcp
  headers: { Authorization: "Bearer up-secret", X-Empty: "" }
store:
  type: redis
  redis: { url: "redis://default:redis-secret@10.0.0.1:6379/0" }
payments:
  provider: moove
  moove: { apiKey: sk_live_secret, webhookSecret: whsec_secret }
handles:
  hashSecret: hash-secret
`;

t.test('apiKey, webhookSecret, hashSecret and upstream header values are replaced by ***', async (t) => {
  const masked = maskSecrets(parseConfigText(withSecrets, 'x.yaml', {}));
  t.equal(masked.payments.moove.apiKey, MASK);
  t.equal(masked.payments.moove.webhookSecret, MASK);
  t.equal(masked.handles.hashSecret, MASK);
  t.same(masked.upstream.headers, { Authorization: MASK, 'X-Empty': '' });
  t.notMatch(JSON.stringify(masked), /secret@|sk_live|whsec|hash-secret|up-secret/);
});

t.test('the password in a redis URL is masked, the rest of the URL kept', async (t) => {
  const masked = maskSecrets(parseConfigText(withSecrets, 'x.yaml', {}));
  t.equal(masked.store.redis?.url, 'redis://default:***@10.0.0.1:6379/0');
  t.equal(maskUrlSecrets('rediss://:pw@host:7000'), 'rediss://:***@host:7000');
  t.equal(maskUrlSecrets('redis://127.0.0.1:6379/0'), 'redis://127.0.0.1:6379/0');
});

t.test('cluster seed URLs are masked too', async (t) => {
  const config = parseConfigText('upstream: { url: "http://u/mcp" }\nstore: { type: redis, redis: { cluster: ["redis://:pw@a:7000", "redis://b:7000"] } }\n', 'x.yaml', {});
  t.same(maskSecrets(config).store.redis?.cluster, ['redis://:***@a:7000', 'redis://b:7000']);
});

t.test('empty secrets stay empty so an operator can see they are unset', async (t) => {
  const masked = maskSecrets(parseConfigText('upstream: { url: "http://u/mcp" }\n', 'x.yaml', {}));
  t.equal(masked.payments.moove.apiKey, '');
  t.equal(masked.payments.moove.webhookSecret, '');
  t.equal(masked.handles.hashSecret, '');
});

t.test('masking returns a copy and leaves the (frozen) config untouched', async (t) => {
  const config = parseConfigText(withSecrets, 'x.yaml', {});
  const masked = maskSecrets(config);
  t.not(masked, config);
  t.equal(config.payments.moove.apiKey, 'sk_live_secret');
  t.same({ ...masked, payments: config.payments, handles: config.handles, upstream: config.upstream, store: config.store }, config);
});

// SPEC §10: secrets inside connection strings, in every form a Redis URL takes.
const SENTINEL = 'redis://:master-pw-Zq1@10.0.0.1:26379,10.0.0.2:26379/0?sentinelMasterName=mymaster&sentinelPassword=sentinel-pw-Xk9';

t.test('a Sentinel URL keeps its hosts and master name; the master password and sentinelPassword are masked', async (t) => {
  t.equal(maskUrlSecrets(SENTINEL), 'redis://:***@10.0.0.1:26379,10.0.0.2:26379/0?sentinelMasterName=mymaster&sentinelPassword=***');
  const config = parseConfigText(`upstream: { url: "http://u/mcp" }\nstore: { type: redis, redis: { url: "${SENTINEL}" } }\n`, 'x.yaml', {});
  const printed = JSON.stringify(maskSecrets(config));
  t.notMatch(printed, /master-pw|sentinel-pw/);
  t.match(printed, /sentinelMasterName=mymaster/);
});

t.test('every query parameter that carries a secret is masked, whatever its case or encoding; others are kept', async (t) => {
  const url = 'rediss://h:6380/0?password=a1&Token=b2&secret=c3&api_key=d4&access_token=e5&sentinel%50assword=f6&sentinelMasterName=m&db=2&family=6';
  const masked = maskUrlSecrets(url);
  t.equal(masked, 'rediss://h:6380/0?password=***&Token=***&secret=***&api_key=***&access_token=***&sentinel%50assword=***&sentinelMasterName=m&db=2&family=6');
  t.equal(maskUrlSecrets('http://up.example/mcp?key=k1&page=2'), 'http://up.example/mcp?key=***&page=2');
  t.equal(maskUrlSecrets('redis://h:6379?password='), 'redis://h:6379?password=', 'an empty value stays empty');
});

t.test('a userinfo password is masked even when the URL has several hosts or does not parse', async (t) => {
  t.equal(maskUrlSecrets('redis://user:pw@a:1,b:2/0'), 'redis://user:***@a:1,b:2/0');
  t.equal(maskUrlSecrets('redis://user:p@ss:word@host:6379'), 'redis://user:***@host:6379', 'the last @ ends the userinfo');
  t.equal(maskUrlSecrets('redis://user@host:6379'), 'redis://user@host:6379', 'a user name alone is not a secret');
  t.equal(maskUrlSecrets('not a url but has:secret@inside'), MASK, 'no scheme, an @: show nothing');
});

t.test('cluster seeds carrying a password in userinfo or query are masked', async (t) => {
  const config = parseConfigText(
    'upstream: { url: "http://u/mcp" }\nstore: { type: redis, redis: { cluster: ["redis://:seed-pw-1@a:7000", "redis://b:7000?password=seed-pw-2"] } }\n',
    'x.yaml',
    {},
  );
  t.same(maskSecrets(config).store.redis?.cluster, ['redis://:***@a:7000', 'redis://b:7000?password=***']);
});

t.test('upstream, JWKS and Moove URLs have their secrets masked too', async (t) => {
  const config = parseConfigText(
    [
      'upstream: { url: "http://user:up-pw@u.example/mcp?token=up-token" }',
      'payments: { provider: moove, moove: { apiKey: k, baseUrl: "https://api.moove.test/?apikey=moove-q" } }',
      'server: { publicUrl: "https://gw.example/mcp" }',
      'auth: { mode: oauth, issuer: "https://id.example/", jwksUrl: "https://id.example/jwks?secret=jwks-q" }',
    ].join('\n'),
    'x.yaml',
    {},
  );
  const masked = maskSecrets(config);
  t.equal(masked.upstream.url, 'http://user:***@u.example/mcp?token=***');
  t.notMatch(JSON.stringify(masked), /up-pw|up-token|moove-q|jwks-q/);
});

t.test('printableConfig (what check prints) drops the moove block unless the provider is moove, so it parses again', async (t) => {
  const dev = parseConfigText('upstream: { url: "http://u/mcp" }\n', 'x.yaml', {});
  const printed = printableConfig(dev) as { payments: Record<string, unknown> };
  t.notOk('moove' in printed.payments);
  const { stringify } = await import('yaml');
  t.equal(parseConfigText(stringify(printed), 'printed.yaml', {}).payments.provider, 'dev');
  const moove = printableConfig(parseConfigText(withSecrets, 'x.yaml', {})) as { payments: { moove: { apiKey: string } } };
  t.equal(moove.payments.moove.apiKey, MASK, 'with provider moove the block stays, masked');
});

t.test('a stdio child\'s env values are masked (SPEC §22: its own credentials go there), their names kept', async (t) => {
  const config = parseConfigText('upstream:\n  command: [server]\n  env: { API_TOKEN: "child-secret", EMPTY: "" }\n', 'x.yaml', {});
  const masked = maskSecrets(config);
  t.same(masked.upstream.env, { API_TOKEN: MASK, EMPTY: '' });
  t.equal(config.upstream.env.API_TOKEN, 'child-secret', 'the running config keeps the value');
});
