// Opening the Redis client (src/store/redis-connection.ts) when the store cannot be reached: the
// error says where it tried and why, the log lines say the same, and neither carries a secret of the
// connection string (SPEC §10) — for a Sentinel URL (master password in userinfo, sentinelPassword in
// the query) and for Cluster seed URLs.
import { createServer } from 'node:net';
import { Writable } from 'node:stream';
import t from 'tap';
import { createLogger } from '../../src/observability/logger.js';
import { openRedisClient } from '../../src/store/redis-connection.js';

const MASTER_PASSWORD = 'master-pw-Hq7r';
const SENTINEL_PASSWORD = 'sentinel-pw-Vb2k';
const SEED_PASSWORD = 'seed-pw-Lm4t';
const SEED_TOKEN = 'seed-token-Rz8w';
const SECRETS = new RegExp([MASTER_PASSWORD, SENTINEL_PASSWORD, SEED_PASSWORD, SEED_TOKEN].join('|'));

/** A port nothing listens on: bound once by us, then released. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

function capturingLogger(): { logger: ReturnType<typeof createLogger>; text: () => string } {
  const chunks: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      chunks.push(chunk.toString('utf8'));
      done();
    },
  });
  return { logger: createLogger('info', sink), text: () => chunks.join('') };
}

t.test('an unreachable Sentinel set: the error and the logs name the sentinels with every secret masked', async (t) => {
  const [a, b] = [await closedPort(), await closedPort()];
  const url = `redis://:${MASTER_PASSWORD}@127.0.0.1:${a},127.0.0.1:${b}/0?sentinelMasterName=mymaster&sentinelPassword=${SENTINEL_PASSWORD}`;
  const { logger, text } = capturingLogger();
  const failure = (await openRedisClient({ url, keyPrefix: 'tb:' }, logger).catch((err: unknown) => err)) as Error & { code?: string };
  t.equal(failure.code, 'TB_ERR_STORE_UNAVAILABLE');
  t.match(failure.message, `cannot use the Redis store at redis://:***@127.0.0.1:${a},127.0.0.1:${b}/0?sentinelMasterName=mymaster&sentinelPassword=***`);
  t.notMatch(failure.message, SECRETS, 'the error carries no secret');
  t.notMatch(String(failure.stack), SECRETS, 'nor does its stack');
  t.match(text(), /"evt":"store_error"/, 'the failure was logged');
  t.notMatch(text(), SECRETS, 'the log carries no secret');
});

t.test('a Sentinel URL whose only secret is sentinelPassword is masked too', async (t) => {
  const port = await closedPort();
  const url = `redis://127.0.0.1:${port}/0?sentinelMasterName=mymaster&sentinelPassword=${SENTINEL_PASSWORD}`;
  const { logger, text } = capturingLogger();
  const failure = (await openRedisClient({ url, keyPrefix: 'tb:' }, logger).catch((err: unknown) => err)) as Error;
  t.match(failure.message, `sentinelPassword=***`);
  t.notMatch(failure.message, SECRETS);
  t.notMatch(text(), SECRETS);
});

t.test('unreachable Cluster seeds: the error and the logs name the seeds with every secret masked', async (t) => {
  const [a, b] = [await closedPort(), await closedPort()];
  const cluster = [`redis://:${SEED_PASSWORD}@127.0.0.1:${a}`, `redis://127.0.0.1:${b}?password=${SEED_TOKEN}`];
  const { logger, text } = capturingLogger();
  const failure = (await openRedisClient({ url: undefined, cluster, keyPrefix: 'tb:' }, logger).catch((err: unknown) => err)) as Error & { code?: string };
  t.equal(failure.code, 'TB_ERR_STORE_UNAVAILABLE');
  t.match(failure.message, `cluster redis://:***@127.0.0.1:${a}, redis://127.0.0.1:${b}?password=***`);
  t.notMatch(failure.message, SECRETS);
  t.notMatch(text(), SECRETS);
});
