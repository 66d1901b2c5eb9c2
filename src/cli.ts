#!/usr/bin/env node
// `tollbooth <verb>`: argv → start | check | admin verbs (SPEC §2). Thin on purpose: loading lives in
// config/load.ts, the verbs in admin.ts, the server in start.ts. Exit codes: 0 ok, 1 a config, store
// or look-up error (the message says what to fix), 2 a bad invocation (usage on stderr).
import { parseArgs, type ParseArgsConfig } from 'node:util';
import pino from 'pino';
import { stringify } from 'yaml';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { showBudgets } from './admin-budgets.js';
import { grantCredits, ledgerExport, ledgerVerify, ledgerVerifyFile, listCharges, listOrphans, showHandle, type AdminContext } from './admin.js';
import { adminSocketPath, callAdminChannel, type AdminRequest } from './admin-channel.js';
import { loadConfig } from './config/load.js';
import { applyOverrides, parsePort } from './config/overrides.js';
import type { GatewayConfig } from './config/schema.js';
import { printableConfig } from './config/mask.js';
import { GatewayError, isGatewayError } from './errors.js';
import { redactHandles } from './observability/fingerprint.js';
import { createLogger } from './observability/logger.js';
import { createStore } from './store/create.js';
import type { Store } from './store/store.js';

const DEFAULT_CONFIG = 'config/tollbooth.yaml';

const USAGE = `usage: tollbooth <command> [--config FILE]

commands:
  start [--port N] [--admin-socket PATH]   run the gateway (start --help)
  check                                    validate the config, print it (defaults applied, secrets masked)
  handle show <handle|fingerprint>         a handle's principal, balances, expiry and last ledger entries
  budget show <principal|handle>           the budgets and free allowances counting a principal's (sub:… or
                                           client:…) or a handle's calls, and their use in the current window
  credits grant <handle|fingerprint> --sku SKU --credits N --reason TEXT
                                           add credits by hand (logged as evt "admin_grant")
  charges list [--status pending|underpaid|settled|abandoned|expired]
  charges orphans                          payments the provider reported for charges the store does not know
  ledger export [--since T] [--until T] [--format jsonl|csv]
                                           every ledger entry in time order (T: ISO 8601 or epoch ms; until exclusive)
  ledger verify                            recompute every balance from the ledger; exit 1 listing each mismatch
  ledger verify --file EXPORT              check an exported file offline (hash chain, trailer, mac with
                                           ledger.signingKey from the config when there is one); exit 1 listing each problem
  bridge [--port N] -- <command…>          serve a stdio MCP server over Streamable HTTP, no paywall (--help)

--config FILE defaults to $TOLLBOOTH_CONFIG, else ${DEFAULT_CONFIG}.

On the memory store (store.type: memory) the handles, charges and ledger live inside the gateway
process: the admin verbs reach a running gateway through its admin socket (admin.socket; default
admin-<port>.sock in $XDG_STATE_HOME/tollbooth, else ~/.local/state/tollbooth; --admin-socket PATH
overrides) and say which process answered. On Redis they read the store directly.
`;

const START_USAGE = `usage: tollbooth start [--config FILE] [--port N] [--admin-socket PATH]

Runs the gateway until SIGTERM/SIGINT (drains calls in flight, then exits 0); SIGHUP reloads the config.

  --config FILE          the config (default $TOLLBOOTH_CONFIG, else ${DEFAULT_CONFIG})
  --port N               listen on port N instead of server.port (0 = any free port); a publicUrl
                         derived from the port follows it. Also: npm start -- --port N
  --admin-socket PATH    where a memory-store gateway serves the admin verbs (default: admin.socket,
                         else admin-<port>.sock in $XDG_STATE_HOME/tollbooth or ~/.local/state/tollbooth)
  -h, --help             this help
`;

type Options = NonNullable<ParseArgsConfig['options']>;
type Values = Record<string, string | boolean | undefined>;

interface Verb {
  positionals: string[]; // names, for the usage error
  options: Options;
  run: (configPath: string, positionals: string[], values: Values) => Promise<number | void>;
}

const stringOption = { type: 'string' } as const;

const VERBS: Record<string, Verb> = {
  start: {
    positionals: [],
    options: { port: stringOption, help: { type: 'boolean', short: 'h' } },
    run: async (configPath, _positionals, values) => {
      if (values.help === true) {
        process.stdout.write(START_USAGE);
        return 0;
      }
      const portText = asString(values.port);
      const port = portText === undefined ? undefined : parsePort(portText);
      if (port === null) throw new UsageError(`--port must be a port number from 0 to 65535, got ${JSON.stringify(portText)}`);
      const adjust = (config: GatewayConfig): GatewayConfig => applyOverrides(config, { port });
      // SPEC §22: a SIGHUP (or SIGTERM) while the config is read and the gateway loads is held, never fatal.
      const held = holdSignals();
      const file = loadConfig(configPath);
      // Loaded lazily: check and the admin verbs need neither fastify nor the upstream machinery.
      const { startGateway } = await import('./start.js');
      // The admin socket follows the file's port, not --port: the admin verbs read the same file and find it there.
      // startGateway listens for signals itself before its first await: nothing falls between the two.
      await startGateway(adjust(file), { configPath, adjust, adminSocket: asString(values['admin-socket']) ?? adminSocketPath(file), held: held.release() });
    },
  },
  check: {
    positionals: [],
    options: {},
    run: async (configPath) => {
      const config = loadConfig(configPath);
      process.stdout.write(`# ${configPath} is valid. Effective config: defaults applied, durations in ms, sizes in bytes, secrets masked.\n`);
      process.stdout.write(stringify(printableConfig(config)));
      return 0;
    },
  },
  'handle show': {
    positionals: ['handle|fingerprint'],
    options: {},
    run: (configPath, [reference], values) => withAdmin(configPath, { verb: 'handle show', positionals: [reference as string], values }, (context) => showHandle(context, reference as string)),
  },
  'budget show': {
    positionals: ['principal|handle'],
    options: {},
    run: (configPath, [reference], values) => withAdmin(configPath, { verb: 'budget show', positionals: [reference as string], values }, (context) => showBudgets(context, reference as string)),
  },
  'credits grant': {
    positionals: ['handle|fingerprint'],
    options: { sku: stringOption, credits: stringOption, reason: stringOption },
    run: (configPath, [reference], values) =>
      withAdmin(configPath, { verb: 'credits grant', positionals: [reference as string], values }, async (context) => {
        await grantCredits(context, reference as string, { sku: asString(values.sku), credits: asString(values.credits), reason: asString(values.reason) });
      }),
  },
  'charges list': {
    positionals: [],
    options: { status: stringOption },
    run: (configPath, _positionals, values) => withAdmin(configPath, { verb: 'charges list', positionals: [], values }, (context) => listCharges(context, asString(values.status))),
  },
  'charges orphans': {
    positionals: [],
    options: {},
    run: (configPath, _positionals, values) => withAdmin(configPath, { verb: 'charges orphans', positionals: [], values }, (context) => listOrphans(context)),
  },
  'ledger export': {
    positionals: [],
    options: { since: stringOption, until: stringOption, format: stringOption },
    run: (configPath, _positionals, values) =>
      withAdmin(configPath, { verb: 'ledger export', positionals: [], values }, (context) =>
        ledgerExport({ ...context, write: writeStdout }, { since: asString(values.since), until: asString(values.until), format: asString(values.format) }),
      ),
  },
  'ledger verify': {
    positionals: [],
    options: { file: stringOption },
    run: async (configPath, _positionals, values) => {
      const file = asString(values.file);
      if (file === undefined) return withAdmin(configPath, { verb: 'ledger verify', positionals: [], values }, (context) => ledgerVerify(context));
      // Offline: no store. The config only lends ledger.signingKey; without one (none given and no
      // default file) a signed trailer is reported as unchecked, never passed.
      const explicit = asString(values.config) !== undefined || process.env.TOLLBOOTH_CONFIG !== undefined;
      const signingKey = explicit || existsSync(configPath) ? loadConfig(configPath).ledger.signingKey : '';
      return ledgerVerifyFile((line) => process.stdout.write(`${line}\n`), file, signingKey);
    },
  },
};

class UsageError extends Error {}

/** Listens for SIGHUP/SIGTERM/SIGINT until release(), which hands over what came (start.ts applies it). */
function holdSignals(): { release(): { stop?: string; reload: boolean } } {
  const held: { stop?: string; reload: boolean } = { reload: false };
  const onHup = (): void => void (held.reload = true);
  const onStop = (signal: NodeJS.Signals): void => void (held.stop ??= signal);
  process.on('SIGHUP', onHup);
  process.on('SIGTERM', onStop);
  process.on('SIGINT', onStop);
  return {
    release() {
      process.off('SIGHUP', onHup);
      process.off('SIGTERM', onStop);
      process.off('SIGINT', onStop);
      return held;
    },
  };
}

async function main(argv: string[]): Promise<number> {
  if (argv.length === 0 || argv[0] === '--help' || argv[0] === '-h' || argv[0] === 'help') {
    (argv.length === 0 ? process.stderr : process.stdout).write(USAGE);
    return argv.length === 0 ? 2 : 0;
  }
  if (argv[0] === 'bridge') {
    // Its own argv shape (a command after "--"), and nothing of the gateway: loaded only when asked for.
    const { runBridgeCli } = await import('./bridge/cli.js');
    return runBridgeCli(argv.slice(1));
  }
  try {
    const { verb, rest } = findVerb(argv);
    const { values, positionals } = parseArgs({
      args: rest,
      options: { ...verb.options, config: stringOption, 'admin-socket': stringOption },
      allowPositionals: true,
      strict: true,
    });
    if (positionals.length !== verb.positionals.length) {
      const wanted = verb.positionals.length === 0 ? 'no arguments' : verb.positionals.map((name) => `<${name}>`).join(' ');
      throw new UsageError(`expected ${wanted}, got ${positionals.length === 0 ? 'none' : positionals.join(' ')}`);
    }
    const configPath = asString(values.config) ?? process.env.TOLLBOOTH_CONFIG ?? DEFAULT_CONFIG;
    return (await verb.run(configPath, positionals, values)) ?? 0;
  } catch (error) {
    return report(error);
  }
}

function findVerb(argv: string[]): { verb: Verb; rest: string[] } {
  const [first = '', second = ''] = argv;
  const two = VERBS[`${first} ${second}`];
  if (two) return { verb: two, rest: argv.slice(2) };
  const one = VERBS[first];
  if (one && !first.includes(' ')) return { verb: one, rest: argv.slice(1) };
  throw new UsageError(`unknown command ${JSON.stringify(argv.slice(0, 2).join(' '))}`);
}

function report(error: unknown): number {
  // SPEC §20: a message may quote an argument; a handle typed there is shown as its fingerprint.
  const write = (text: string): void => void process.stderr.write(redactHandles(text));
  // parseArgs throws TypeErrors with ERR_PARSE_ARGS_* codes for unknown or malformed flags.
  const parseArgsError = typeof (error as NodeJS.ErrnoException).code === 'string' && (error as NodeJS.ErrnoException).code?.startsWith('ERR_PARSE_ARGS');
  if (error instanceof UsageError || parseArgsError) {
    write(`tollbooth: ${(error as Error).message}\n\n${USAGE}`);
    return 2;
  }
  if (isGatewayError(error)) {
    const heading = error.code === 'TB_ERR_CONFIG_INVALID' ? 'invalid configuration:\n' : '';
    write(`tollbooth: ${heading}${error.message}\n`);
    return error.code === 'TB_ERR_INVALID_PARAMS' ? 2 : 1;
  }
  write(`tollbooth: ${(error as Error)?.stack ?? String(error)}\n`);
  return 1;
}

/**
 * Runs an admin verb: on Redis against the store itself; on the memory store in the running gateway
 * (its admin socket), since a store opened here would be a new, empty one.
 */
async function withAdmin(configPath: string, request: { verb: string; positionals: string[]; values: Values }, verb: (context: AdminContext) => Promise<number | void>): Promise<number> {
  const config = loadConfig(configPath);
  // Logs (the admin_grant audit line) go to stderr so stdout stays the verb's readable output.
  const logger = createLogger(config.logging.level, pino.destination({ dest: 2, sync: true }));
  if (config.store.type === 'memory') {
    const answered = await viaGateway(config, configPath, request);
    if (typeof answered === 'number') return answered;
    // No gateway: the verb still checks its arguments (a usage error stays exit 2); its first store access says where the store is.
    return (await verb({ store: unreachableStore(answered), config, out: (line) => process.stdout.write(`${line}\n`), logger })) ?? 0;
  }
  const store = await createStore(config, { logger });
  try {
    return (await verb({ store, config, out: (line) => process.stdout.write(`${line}\n`), logger })) ?? 0;
  } finally {
    await store.close();
  }
}

/** The verb's exit code from the running gateway, or (none answered) the error that says where the memory store is. */
async function viaGateway(config: GatewayConfig, configPath: string, request: { verb: string; positionals: string[]; values: Values }): Promise<number | GatewayError> {
  const socket = asString(request.values['admin-socket']) ?? adminSocketPath(config);
  const values: AdminRequest['values'] = {};
  for (const [key, value] of Object.entries(request.values)) if (typeof value === 'string' && key !== 'config' && key !== 'admin-socket') values[key] = value;
  const result = await callAdminChannel(socket, { verb: request.verb, positionals: request.positionals, values }, {
    // stderr, so stdout stays the verb's output (an export piped to a file).
    peer: (peer) => void process.stderr.write(`tollbooth: the memory store of the running gateway pid ${peer.pid} (${peer.url}, config ${peer.configPath ?? 'unknown'}), through ${socket}\n`),
    write: writeStdout,
  });
  if (result.kind === 'answered') return result.exit;
  const found = result.stale ? `the admin socket ${socket} is left from a gateway that is no longer running` : `no gateway is running with this config (no admin socket at ${socket})`;
  return new GatewayError(
    'TB_ERR_NOT_FOUND',
    `${configPath} uses the memory store, which lives inside the gateway process, and ${found}. Start it (tollbooth start --config ${configPath}; npm start) and run this again: the admin verbs then reach its store through the admin socket. To read handles, charges and the ledger without a running gateway, use a shared store (store.type: redis).`,
  );
}

/** A store every operation of which fails with `error`: the memory store is in the gateway process, not here. */
function unreachableStore(error: GatewayError): Store {
  return new Proxy({} as Store, {
    get: (_target, key) => (key === 'then' ? undefined : () => Promise.reject(error)),
  });
}

/** stdout with backpressure: an export of millions of lines never piles up in memory. */
async function writeStdout(chunk: string): Promise<void> {
  if (!process.stdout.write(chunk)) await once(process.stdout, 'drain');
}

function asString(value: string | boolean | undefined): string | undefined {
  return typeof value === 'string' ? value : undefined;
}

process.exitCode = await main(process.argv.slice(2));
