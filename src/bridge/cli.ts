// `tollbooth bridge [--port N] -- <command…>` (SPEC §16): the bridge on its own, a stdio → Streamable HTTP
// bridge without the paywall on 127.0.0.1:N, with the fidelity rules of §5.5. It prints where it listens
// and stops cleanly (every child stopped) on SIGTERM/SIGINT.
import { parseArgs } from 'node:util';
import pino from 'pino';
import { byteSize, duration } from '../config/schema.js';
import { createLogger } from '../observability/logger.js';
import { childEnvironment } from './child-env.js';
import { startBridge } from './index.js';

export const BRIDGE_USAGE = `usage: tollbooth bridge [options] -- <command> [args…]

Serves a stdio MCP server as a Streamable HTTP endpoint on 127.0.0.1 (no paywall).

options:
  --port N               port to listen on (default 3001; 0 picks a free one)
  --sessions MODE        perClient (default: a child per client session) or shared (one child for all)
  --max-children N       most children at once (default 32)
  --idle-timeout D       stop a session's child after this long idle (default 10m)
  --max-line-bytes S     cap on one line the child writes (default 16mb)
  --init-timeout D       stop a child whose client has not completed initialize by then (default 10s)
  --kill-timeout D       SIGKILL a stopping child's process group this long after SIGTERM (default 5s)
  --inherit-env NAME     pass this variable of our environment to the children (repeatable; the children
                         otherwise get only PATH, HOME, LANG, LC_*, TZ and TMPDIR)
  --env NAME=VALUE       set this variable for the children (repeatable)
  --log-level L          fatal|error|warn|info|debug|trace|silent (default info; logs go to stderr)
`;

class BridgeUsageError extends Error {}

interface BridgeCliOptions {
  port: number;
  sessions: 'perClient' | 'shared';
  maxChildren: number;
  idleTimeoutMs: number;
  maxLineBytes: number;
  initTimeoutMs: number;
  killTimeoutMs: number;
  inheritEnv: string[];
  env: Record<string, string>;
  logLevel: string;
  command: string[];
}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

export function parseBridgeArgs(argv: string[]): BridgeCliOptions {
  const separator = argv.indexOf('--');
  if (separator === -1 || separator === argv.length - 1) throw new BridgeUsageError('the command to run goes after "--"');
  const { values, positionals } = parseArgs({
    args: argv.slice(0, separator),
    options: {
      port: { type: 'string' },
      sessions: { type: 'string' },
      'max-children': { type: 'string' },
      'idle-timeout': { type: 'string' },
      'max-line-bytes': { type: 'string' },
      'init-timeout': { type: 'string' },
      'kill-timeout': { type: 'string' },
      'inherit-env': { type: 'string', multiple: true },
      env: { type: 'string', multiple: true },
      'log-level': { type: 'string' },
    },
    allowPositionals: true,
    strict: true,
  });
  if (positionals.length > 0) throw new BridgeUsageError(`unexpected ${positionals.join(' ')} before "--"`);
  const integer = (name: string, value: string | undefined, fallback: number, min: number, max = Number.MAX_SAFE_INTEGER): number => {
    if (value === undefined) return fallback;
    const parsed = Number(value);
    if (!Number.isInteger(parsed) || parsed < min || parsed > max) throw new BridgeUsageError(`--${name} must be an integer from ${min} to ${max}, got ${JSON.stringify(value)}`);
    return parsed;
  };
  const parsed = <T>(name: string, schema: { safeParse(value: unknown): { success: boolean; data?: T } }, value: string | undefined, fallback: T): T => {
    if (value === undefined) return fallback;
    const result = schema.safeParse(/^\d+$/.test(value) ? Number(value) : value);
    if (!result.success) throw new BridgeUsageError(`--${name}: ${JSON.stringify(value)} is not valid (e.g. ${name.endsWith('-timeout') ? '"10m", "30s"' : '"16mb", "512kb"'})`);
    return result.data as T;
  };
  const sessions = values.sessions ?? 'perClient';
  if (sessions !== 'perClient' && sessions !== 'shared') throw new BridgeUsageError(`--sessions must be perClient or shared, got ${JSON.stringify(sessions)}`);
  const logLevel = values['log-level'] ?? 'info';
  if (!['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].includes(logLevel)) throw new BridgeUsageError(`--log-level ${JSON.stringify(logLevel)} is not a level`);
  const inheritEnv = values['inherit-env'] ?? [];
  for (const name of inheritEnv) if (!ENV_NAME.test(name)) throw new BridgeUsageError(`--inherit-env ${JSON.stringify(name)} is not a variable name`);
  const env: Record<string, string> = {};
  for (const pair of values.env ?? []) {
    const equals = pair.indexOf('=');
    const name = equals === -1 ? '' : pair.slice(0, equals);
    if (!ENV_NAME.test(name)) throw new BridgeUsageError(`--env wants NAME=VALUE, got ${JSON.stringify(pair.slice(0, 40))}`);
    env[name] = pair.slice(equals + 1);
  }
  return {
    port: integer('port', values.port, 3001, 0, 65535),
    sessions,
    maxChildren: integer('max-children', values['max-children'], 32, 1),
    idleTimeoutMs: parsed('idle-timeout', duration, values['idle-timeout'], 600_000),
    maxLineBytes: parsed('max-line-bytes', byteSize, values['max-line-bytes'], 16 * 1024 ** 2),
    initTimeoutMs: parsed('init-timeout', duration, values['init-timeout'], 10_000),
    killTimeoutMs: parsed('kill-timeout', duration, values['kill-timeout'], 5_000),
    inheritEnv,
    env,
    logLevel,
    command: argv.slice(separator + 1),
  };
}

/** Runs until SIGTERM/SIGINT; the exit code (2 for a bad invocation). */
export async function runBridgeCli(argv: string[]): Promise<number> {
  if (argv[0] === '--help' || argv[0] === '-h') {
    process.stdout.write(BRIDGE_USAGE);
    return 0;
  }
  let options: BridgeCliOptions;
  try {
    options = parseBridgeArgs(argv);
  } catch (error) {
    const usage = error instanceof BridgeUsageError || (error as NodeJS.ErrnoException).code?.startsWith('ERR_PARSE_ARGS');
    if (!usage) throw error;
    process.stderr.write(`tollbooth bridge: ${(error as Error).message}\n\n${BRIDGE_USAGE}`);
    return 2;
  }
  const logger = createLogger(options.logLevel, pino.destination({ dest: 2, sync: false }));
  // Listening for the stop signals before anything starts: a SIGTERM during start-up stops the children too.
  const stopped = new Promise<NodeJS.Signals>((resolve) => {
    process.once('SIGTERM', () => resolve('SIGTERM'));
    process.once('SIGINT', () => resolve('SIGINT'));
  });
  let bridge: Awaited<ReturnType<typeof startBridge>>;
  try {
    bridge = await startBridge({
      command: options.command,
      sessions: options.sessions,
      maxChildren: options.maxChildren,
      idleTimeoutMs: options.idleTimeoutMs,
      maxLineBytes: options.maxLineBytes,
      initTimeoutMs: options.initTimeoutMs,
      killTimeoutMs: options.killTimeoutMs,
      // SPEC §22: the children's environment is given, never inherited.
      env: childEnvironment(process.env, { inheritEnv: options.inheritEnv, env: options.env }),
      logger,
      listen: { host: '127.0.0.1', port: options.port },
    });
  } catch (error) {
    // SPEC §22: one line naming the cause; startBridge left nothing running.
    logger.flush();
    process.stderr.write(`tollbooth bridge: ${startFailure(error, options.port)}\n`);
    return 1;
  }
  process.stdout.write(`tollbooth bridge: serving ${JSON.stringify(options.command.join(' '))} at ${bridge.url} (sessions: ${options.sessions}, maxChildren: ${options.maxChildren})\n`);
  const signal = await stopped;
  logger.info({ evt: 'bridge_stopping', signal }, 'stopping the bridge');
  await bridge.close();
  logger.flush();
  return 0;
}

function startFailure(error: unknown, port: number): string {
  const code = (error as NodeJS.ErrnoException).code;
  if (code === 'EADDRINUSE') return `cannot listen on 127.0.0.1:${port}: the port is in use (EADDRINUSE)`;
  if (code === 'EACCES') return `cannot listen on 127.0.0.1:${port}: permission denied (EACCES)`;
  return (error as Error).message.split('\n')[0] ?? String(error);
}
