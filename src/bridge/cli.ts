// `tollbooth bridge [--port N] -- <command…>` (SPEC §16): the bridge on its own, a stdio → Streamable HTTP
// bridge without the paywall on 127.0.0.1:N, with the fidelity rules of §5.5. It prints where it listens
// and stops cleanly (every child stopped) on SIGTERM/SIGINT.
import { parseArgs } from 'node:util';
import pino from 'pino';
import { byteSize, duration } from '../config/schema.js';
import { createLogger } from '../observability/logger.js';
import { startBridge } from './index.js';

export const BRIDGE_USAGE = `usage: tollbooth bridge [options] -- <command> [args…]

Serves a stdio MCP server as a Streamable HTTP endpoint on 127.0.0.1 (no paywall).

options:
  --port N               port to listen on (default 3001; 0 picks a free one)
  --sessions MODE        perClient (default: a child per client session) or shared (one child for all)
  --max-children N       most children at once (default 32)
  --idle-timeout D       stop a session's child after this long idle (default 10m)
  --max-line-bytes S     cap on one line the child writes (default 16mb)
  --log-level L          fatal|error|warn|info|debug|trace|silent (default info; logs go to stderr)
`;

class BridgeUsageError extends Error {}

interface BridgeCliOptions {
  port: number;
  sessions: 'perClient' | 'shared';
  maxChildren: number;
  idleTimeoutMs: number;
  maxLineBytes: number;
  logLevel: string;
  command: string[];
}

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
    if (!result.success) throw new BridgeUsageError(`--${name}: ${JSON.stringify(value)} is not valid (e.g. ${name === 'idle-timeout' ? '"10m", "30s"' : '"16mb", "512kb"'})`);
    return result.data as T;
  };
  const sessions = values.sessions ?? 'perClient';
  if (sessions !== 'perClient' && sessions !== 'shared') throw new BridgeUsageError(`--sessions must be perClient or shared, got ${JSON.stringify(sessions)}`);
  const logLevel = values['log-level'] ?? 'info';
  if (!['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].includes(logLevel)) throw new BridgeUsageError(`--log-level ${JSON.stringify(logLevel)} is not a level`);
  return {
    port: integer('port', values.port, 3001, 0, 65535),
    sessions,
    maxChildren: integer('max-children', values['max-children'], 32, 1),
    idleTimeoutMs: parsed('idle-timeout', duration, values['idle-timeout'], 600_000),
    maxLineBytes: parsed('max-line-bytes', byteSize, values['max-line-bytes'], 16 * 1024 ** 2),
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
  const bridge = await startBridge({
    command: options.command,
    sessions: options.sessions,
    maxChildren: options.maxChildren,
    idleTimeoutMs: options.idleTimeoutMs,
    maxLineBytes: options.maxLineBytes,
    logger,
    listen: { host: '127.0.0.1', port: options.port },
  });
  process.stdout.write(`tollbooth bridge: serving ${JSON.stringify(options.command.join(' '))} at ${bridge.url} (sessions: ${options.sessions}, maxChildren: ${options.maxChildren})\n`);
  const signal = await new Promise<NodeJS.Signals>((resolve) => {
    process.once('SIGTERM', () => resolve('SIGTERM'));
    process.once('SIGINT', () => resolve('SIGINT'));
  });
  logger.info({ evt: 'bridge_stopping', signal }, 'stopping the bridge');
  await bridge.close();
  logger.flush();
  return 0;
}
