// `tollbooth check` prints the effective config; every secret in it is masked, empty ones stay empty.
import t from 'tap';
import { parseConfigText } from '../../src/config/load.js';
import { MASK, maskSecrets, maskUrlPassword } from '../../src/config/mask.js';

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
  t.equal(maskUrlPassword('rediss://:pw@host:7000'), 'rediss://:***@host:7000');
  t.equal(maskUrlPassword('redis://127.0.0.1:6379/0'), 'redis://127.0.0.1:6379/0');
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
