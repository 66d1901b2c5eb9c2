// Opening the ioredis client for the Redis store: standalone, Sentinel or Cluster, with the failure
// behaviour SPEC §8 asks for — no offline queue, a 500 ms command timeout, reconnect with backoff,
// never resend a command whose reply was lost — and a clear error when Redis is unusable at start.
import { Cluster, Redis, type ClusterOptions, type RedisOptions } from 'ioredis';
import { systemClock } from '../clock.js';
import { maskUrlSecrets } from '../config/mask.js';
import type { GatewayConfig } from '../config/schema.js';
import { GatewayError } from '../errors.js';
import { withBudget } from '../io/budget.js';
import type { Logger } from '../observability/logger.js';

export type RedisClient = Redis | Cluster;
type RedisConfig = Pick<NonNullable<GatewayConfig['store']['redis']>, 'url' | 'cluster' | 'keyPrefix'>;

const COMMAND_TIMEOUT_MS = 500;
const CONNECT_TIMEOUT_MS = 5_000;
const ERROR_LOG_INTERVAL_MS = 10_000;

/**
 * Connects and answers a PING, or throws TB_ERR_STORE_UNAVAILABLE naming the target (its secrets masked, SPEC §10).
 * `monotonic`: the clock the error-log throttle measures its interval on.
 */
export async function openRedisClient(redis: RedisConfig, logger: Logger, monotonic: () => number = systemClock.monotonic): Promise<RedisClient> {
  const target = redis.url !== undefined ? maskUrlSecrets(redis.url) : `cluster ${(redis.cluster ?? []).map(maskUrlSecrets).join(', ')}`;
  const client = redis.url !== undefined ? new Redis(standaloneOptions(redis.url)) : new Cluster(clusterNodes(redis.cluster ?? []), clusterOptions(redis.cluster ?? []));
  watchConnection(client, logger, target, monotonic);
  // The socket error (ECONNREFUSED, auth, TLS) says more than the "Connection is closed" connect() rejects with.
  let socketError: unknown;
  const remember = (err: unknown): void => void (socketError ??= err);
  client.on('error', remember);
  try {
    await withBudget(client.connect(), CONNECT_TIMEOUT_MS, `no connection within ${CONNECT_TIMEOUT_MS} ms`);
    await withBudget(client.ping(), CONNECT_TIMEOUT_MS, 'no answer to PING');
    return client;
  } catch (err) {
    client.disconnect();
    throw new GatewayError(
      'TB_ERR_STORE_UNAVAILABLE',
      `cannot use the Redis store at ${target}: ${errorMessage(socketError ?? err)}. Start Redis or fix store.redis in the config; the gateway never falls back to the memory store`,
      { cause: socketError ?? err },
    );
  } finally {
    client.off('error', remember);
  }
}

const COMMON_OPTIONS = {
  lazyConnect: true,
  enableOfflineQueue: false,
  commandTimeout: COMMAND_TIMEOUT_MS,
  connectTimeout: 2_000,
  maxRetriesPerRequest: 1,
  // A command whose reply was lost may have run: never send it again (a reserve would run twice).
  autoResendUnfulfilledCommands: false,
} satisfies RedisOptions;

const reconnectBackoff = (attempt: number): number => Math.min(100 * 2 ** Math.min(attempt, 5), 2_000);

/**
 * `redis://[user:pass@]host:port[/db]`, or `rediss://…` for TLS. Sentinel:
 * `redis://[:pass@]sentinel1:26379,sentinel2:26379[/db]?sentinelMasterName=mymaster` (password for
 * the master; `sentinelPassword=` in the query if the sentinels need one).
 */
function standaloneOptions(url: string): RedisOptions {
  const base: RedisOptions = { ...COMMON_OPTIONS, retryStrategy: reconnectBackoff };
  const sentinel = parseSentinelUrl(url);
  if (!sentinel) return { ...base, ...urlOptions(url) };
  return { ...base, ...sentinel, sentinelRetryStrategy: reconnectBackoff };
}

function urlOptions(url: string): RedisOptions {
  const parsed = new URL(url);
  const options: RedisOptions = { host: parsed.hostname.replace(/^\[|\]$/g, ''), port: Number(parsed.port || 6379) };
  if (parsed.username) options.username = decodeURIComponent(parsed.username);
  if (parsed.password) options.password = decodeURIComponent(parsed.password);
  const db = parsed.pathname.slice(1);
  if (db) options.db = Number(db);
  if (parsed.protocol === 'rediss:') options.tls = {};
  return options;
}

function parseSentinelUrl(url: string): RedisOptions | null {
  const match = /^(rediss?):\/\/(?:([^:@/]*)(?::([^@/]*))?@)?([^/?#]+)(?:\/(\d*))?(?:\?([^#]*))?$/.exec(url);
  if (!match) return null;
  const [, scheme, user, pass, hosts = '', db, query] = match;
  const params = new URLSearchParams(query ?? '');
  const name = params.get('sentinelMasterName');
  if (!name) return null;
  const options: RedisOptions = {
    name,
    sentinels: hosts.split(',').map((hostPort) => {
      const at = hostPort.lastIndexOf(':');
      return at > 0 ? { host: hostPort.slice(0, at).replace(/^\[|\]$/g, ''), port: Number(hostPort.slice(at + 1)) } : { host: hostPort, port: 26379 };
    }),
  };
  if (user) options.username = decodeURIComponent(user);
  if (pass) options.password = decodeURIComponent(pass);
  const sentinelPassword = params.get('sentinelPassword');
  if (sentinelPassword) options.sentinelPassword = sentinelPassword;
  if (db) options.db = Number(db);
  if (scheme === 'rediss') Object.assign(options, { tls: {}, enableTLSForSentinelMode: true });
  return options;
}

function clusterNodes(seeds: string[]): { host: string; port: number }[] {
  return seeds.map((seed) => {
    const { host = '127.0.0.1', port = 6379 } = urlOptions(seed);
    return { host, port };
  });
}

function clusterOptions(seeds: string[]): ClusterOptions {
  const first = seeds[0] ? urlOptions(seeds[0]) : {};
  const redisOptions: RedisOptions = { ...COMMON_OPTIONS };
  if (first.username) redisOptions.username = first.username;
  if (first.password) redisOptions.password = first.password;
  if (first.tls) redisOptions.tls = first.tls;
  return {
    lazyConnect: true,
    enableOfflineQueue: false,
    enableReadyCheck: true,
    maxRedirections: 4,
    retryDelayOnFailover: 100,
    retryDelayOnClusterDown: 100,
    retryDelayOnTryAgain: 100,
    slotsRefreshTimeout: 1_000,
    clusterRetryStrategy: reconnectBackoff,
    redisOptions,
  };
}

/** Connection errors repeat on every reconnect attempt: log the first, then at most one per interval. */
function watchConnection(client: RedisClient, logger: Logger, target: string, monotonic: () => number): void {
  let lastLoggedAt = Number.NEGATIVE_INFINITY;
  let failing = false;
  client.on('error', (err: unknown) => {
    failing = true;
    const now = monotonic();
    if (now - lastLoggedAt < ERROR_LOG_INTERVAL_MS) return;
    lastLoggedAt = now;
    logger.warn({ evt: 'store_error', target, err: errorMessage(err) }, 'Redis store unreachable: priced calls are refused until it is back');
  });
  client.on('ready', () => {
    if (failing) logger.info({ evt: 'store_ready', target }, 'Redis store reachable again');
    failing = false;
  });
}

export const errorMessage = (err: unknown): string => (err instanceof Error ? err.message : String(err)).replace(/\.$/, '');
