#!/usr/bin/env node
// `tollbooth <verb>`: argv → start | check | admin verbs (SPEC §2). Thin on purpose: loading lives in
// config/load.ts, the verbs in admin.ts, the server in start.ts. Exit codes: 0 ok, 1 a config, store
// or look-up error (the message says what to fix), 2 a bad invocation (usage on stderr).
import { parseArgs, type ParseArgsConfig } from 'node:util';
import pino from 'pino';
import { stringify } from 'yaml';
import { once } from 'node:events';
import { grantCredits, ledgerExport, ledgerVerify, listCharges, showHandle, type AdminContext } from './admin.js';
import { loadConfig } from './config/load.js';
import { printableConfig } from './config/mask.js';
import { isGatewayError } from './errors.js';
import { redactHandles } from './observability/fingerprint.js';
import { createLogger } from './observability/logger.js';
import { createStore } from './store/create.js';

const DEFAULT_CONFIG = 'config/tollbooth.yaml';

const USAGE = `usage: tollbooth <command> [--config FILE]

commands:
  start                                    run the gateway
  check                                    validate the config, print it (defaults applied, secrets masked)
  handle show <handle|fingerprint>         a handle's principal, balances, expiry and last ledger entries
  credits grant <handle|fingerprint> --sku SKU --credits N --reason TEXT
                                           add credits by hand (logged as evt "admin_grant")
  charges list [--status pending|underpaid|settled|abandoned|expired]
  ledger export [--since T] [--until T] [--format jsonl|csv]
                                           every ledger entry in time order (T: ISO 8601 or epoch ms; until exclusive)
  ledger verify                            recompute every balance from the ledger; exit 1 listing each mismatch
  bridge [--port N] -- <command…>          serve a stdio MCP server over Streamable HTTP, no paywall (--help)

--config FILE defaults to $TOLLBOOTH_CONFIG, else ${DEFAULT_CONFIG}.
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
    options: {},
    run: async (configPath) => {
      // SPEC §22: a SIGHUP (or SIGTERM) while the config is read and the gateway loads is held, never fatal.
      const held = holdSignals();
      const config = loadConfig(configPath);
      // Loaded lazily: check and the admin verbs need neither fastify nor the upstream machinery.
      const { startGateway } = await import('./start.js');
      // startGateway listens for signals itself before its first await: nothing falls between the two.
      await startGateway(config, { configPath, held: held.release() });
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
    run: (configPath, [reference]) => withAdmin(configPath, (context) => showHandle(context, reference as string)),
  },
  'credits grant': {
    positionals: ['handle|fingerprint'],
    options: { sku: stringOption, credits: stringOption, reason: stringOption },
    run: (configPath, [reference], values) =>
      withAdmin(configPath, async (context) => {
        await grantCredits(context, reference as string, { sku: asString(values.sku), credits: asString(values.credits), reason: asString(values.reason) });
      }),
  },
  'charges list': {
    positionals: [],
    options: { status: stringOption },
    run: (configPath, _positionals, values) => withAdmin(configPath, (context) => listCharges(context, asString(values.status))),
  },
  'ledger export': {
    positionals: [],
    options: { since: stringOption, until: stringOption, format: stringOption },
    run: (configPath, _positionals, values) =>
      withAdmin(configPath, (context) => ledgerExport({ ...context, write: writeStdout }, { since: asString(values.since), until: asString(values.until), format: asString(values.format) })),
  },
  'ledger verify': {
    positionals: [],
    options: {},
    run: (configPath) => withAdmin(configPath, (context) => ledgerVerify(context)),
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
      options: { ...verb.options, config: stringOption },
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

async function withAdmin(configPath: string, verb: (context: AdminContext) => Promise<number | void>): Promise<number> {
  const config = loadConfig(configPath);
  // Logs (the admin_grant audit line) go to stderr so stdout stays the verb's readable output.
  const logger = createLogger(config.logging.level, pino.destination({ dest: 2, sync: true }));
  const store = await createStore(config, { logger });
  try {
    return (await verb({ store, config, out: (line) => process.stdout.write(`${line}\n`), logger })) ?? 0;
  } finally {
    await store.close();
  }
}

/** stdout with backpressure: an export of millions of lines never piles up in memory. */
async function writeStdout(chunk: string): Promise<void> {
  if (!process.stdout.write(chunk)) await once(process.stdout, 'drain');
}

function asString(value: string | boolean | undefined): string | undefined {
  return typeof value === 'string' ? value : undefined;
}

process.exitCode = await main(process.argv.slice(2));
