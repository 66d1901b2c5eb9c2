// The admin channel: how the operator's verbs (admin.ts) reach a running gateway's memory store. The
// memory store lives inside the gateway process, so a CLI process that opened its own would see an empty
// store and say "no live handle". A gateway on the memory store listens on a Unix socket (mode 0600, in a
// 0700 directory: only the same user reaches it) and runs the verbs there, against its own store and
// config, streaming their output back; the CLI prints which process it talked to.
//
// Wire: newline-delimited JSON. The gateway greets `{hello: {pid, url, configPath}}`; the CLI sends
// `{verb, positionals, values}`; the gateway answers `{out: text}`… then `{exit: n}` or `{error: {code,
// message}}`. One request per connection.
import { chmodSync, existsSync, mkdirSync, unlinkSync } from 'node:fs';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { once } from 'node:events';
import { grantCredits, ledgerExport, ledgerVerify, listCharges, listOrphans, showHandle, type AdminContext } from './admin.js';
import { showBudgets } from './admin-budgets.js';
import type { GatewayConfig } from './config/schema.js';
import { ERROR_CODES, GatewayError, isGatewayError, type ErrorCode } from './errors.js';
import type { Logger } from './observability/logger.js';
import type { Store } from './store/store.js';

/** What the CLI sends: the verb as typed (`handle show`), its positionals and its option values. */
export interface AdminRequest {
  verb: string;
  positionals: string[];
  values: Record<string, string | undefined>;
}

/** Who answered: printed by the CLI so the operator knows which process's store it read. */
export interface AdminPeer {
  pid: number;
  url: string;
  configPath: string | null;
}

type AdminVerb = (context: AdminContext, request: AdminRequest) => Promise<number | void>;

/** The verbs the channel serves: every admin verb of the CLI, run on the gateway's own store. */
const VERBS: Record<string, AdminVerb> = {
  'handle show': (context, { positionals }) => showHandle(context, positionals[0] ?? ''),
  'credits grant': async (context, { positionals, values }) => {
    await grantCredits(context, positionals[0] ?? '', { sku: values.sku, credits: values.credits, reason: values.reason });
  },
  'charges list': (context, { values }) => listCharges(context, values.status),
  'charges orphans': (context) => listOrphans(context),
  'ledger export': (context, { values }) => ledgerExport(context, { since: values.since, until: values.until, format: values.format }),
  'ledger verify': (context) => ledgerVerify(context),
  'budget show': (context, { positionals }) => showBudgets(context, positionals[0] ?? ''),
};

export const ADMIN_VERBS: readonly string[] = Object.keys(VERBS);

/**
 * Where the admin socket is: `admin.socket` when set, else `admin-<port>.sock` in the state directory
 * (`$XDG_STATE_HOME/tollbooth`, else `~/.local/state/tollbooth`). The port tells apart gateways on one
 * machine, and both the gateway and the CLI read it from the same config file.
 */
export function adminSocketPath(config: GatewayConfig, env: NodeJS.ProcessEnv = process.env): string {
  if (config.admin.socket !== '') return config.admin.socket;
  const stateHome = env.XDG_STATE_HOME && env.XDG_STATE_HOME.startsWith('/') ? env.XDG_STATE_HOME : join(homedir(), '.local', 'state');
  return join(stateHome, 'tollbooth', `admin-${config.server.port}.sock`);
}

export interface AdminChannel {
  readonly path: string;
  close(): Promise<void>;
}

/**
 * Listens on `path` for the admin verbs. A socket file left by a gateway that died (nothing answers on
 * it) is removed first; one a live process answers on is not taken over: that is an error.
 */
export async function openAdminChannel(path: string, deps: { store: Store; config: () => GatewayConfig; peer: AdminPeer; logger: Logger }): Promise<AdminChannel> {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  if (existsSync(path)) {
    if (await answers(path)) {
      throw new GatewayError('TB_ERR_CONFIG_INVALID', `another running gateway serves the admin socket ${path}: stop it, or set admin.socket to another path`);
    }
    unlinkSync(path); // stale: its gateway is gone
  }
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    socket.on('error', () => undefined); // a CLI that goes away mid-answer
    serve(socket, deps).catch(() => socket.destroy());
  });
  server.listen(path);
  await once(server, 'listening');
  chmodSync(path, 0o600);
  deps.logger.info({ evt: 'admin_channel', path }, 'admin verbs reach this gateway\'s memory store through the admin socket');
  return {
    path,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve())); // unlinks the socket file
      if (existsSync(path)) unlinkSync(path);
    },
  };
}

async function serve(socket: Socket, deps: { store: Store; config: () => GatewayConfig; peer: AdminPeer; logger: Logger }): Promise<void> {
  const send = async (message: unknown): Promise<void> => {
    if (!socket.write(`${JSON.stringify(message)}\n`)) await once(socket, 'drain');
  };
  await send({ hello: deps.peer });
  const request = await readRequest(socket);
  const verb = request ? VERBS[request.verb] : undefined;
  if (!request || !verb) {
    await send({ error: { code: 'TB_ERR_INVALID_PARAMS', message: `the admin channel serves ${ADMIN_VERBS.join(', ')}` } });
    socket.end();
    return;
  }
  const context: AdminContext = {
    store: deps.store,
    config: deps.config(),
    out: (line) => void send({ out: `${line}\n` }),
    write: (chunk) => send({ out: chunk }),
    logger: deps.logger,
  };
  try {
    const code = (await verb(context, request)) ?? 0;
    await send({ exit: code });
  } catch (error) {
    const code = isGatewayError(error) ? error.code : 'TB_ERR_INTERNAL';
    await send({ error: { code, message: (error as Error).message } });
  }
  socket.end();
}

/** The request line. Read with listeners, not `for await`: leaving that loop would destroy the socket the answer goes out on. */
function readRequest(socket: Socket): Promise<AdminRequest | null> {
  return new Promise((resolve) => {
    let text = '';
    const finish = (request: AdminRequest | null): void => {
      socket.off('data', onData);
      socket.off('end', onEnd);
      resolve(request);
    };
    const onEnd = (): void => finish(null);
    const onData = (chunk: Buffer): void => {
      text += chunk.toString('utf8');
      const end = text.indexOf('\n');
      if (end < 0) {
        if (text.length > MAX_REQUEST_BYTES) finish(null);
        return;
      }
      try {
        const parsed = JSON.parse(text.slice(0, end)) as AdminRequest;
        finish(typeof parsed.verb === 'string' && Array.isArray(parsed.positionals) && typeof parsed.values === 'object' && parsed.values !== null ? parsed : null);
      } catch {
        finish(null);
      }
    };
    socket.on('data', onData);
    socket.on('end', onEnd);
  });
}

const MAX_REQUEST_BYTES = 64 * 1024;

/** True when a process accepts connections on the socket. */
function answers(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection(path);
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/** The CLI's side: what happened when it tried the running gateway. */
export type AdminCallResult =
  | { kind: 'answered'; peer: AdminPeer; exit: number }
  | { kind: 'no_gateway'; stale: boolean };

/**
 * Runs one verb in the gateway serving `path`: `peer` is called once it greeted (before any output),
 * `write` with each piece of output. An error the verb raised there is raised here with its code.
 */
export async function callAdminChannel(path: string, request: AdminRequest, io: { peer: (peer: AdminPeer) => void; write: (text: string) => Promise<void> }): Promise<AdminCallResult> {
  if (!existsSync(path)) return { kind: 'no_gateway', stale: false };
  const socket = createConnection(path);
  try {
    await once(socket, 'connect');
  } catch {
    socket.destroy();
    return { kind: 'no_gateway', stale: true }; // a file nobody listens on: a gateway that died
  }
  socket.write(`${JSON.stringify(request)}\n`);
  let peer: AdminPeer | null = null;
  let buffered = '';
  for await (const chunk of socket) {
    buffered += (chunk as Buffer).toString('utf8');
    let end: number;
    while ((end = buffered.indexOf('\n')) >= 0) {
      const message = JSON.parse(buffered.slice(0, end)) as { hello?: AdminPeer; out?: string; exit?: number; error?: { code: string; message: string } };
      buffered = buffered.slice(end + 1);
      if (message.hello) {
        peer = message.hello;
        io.peer(peer);
      } else if (message.out !== undefined) await io.write(message.out);
      else if (message.error) {
        const code = (ERROR_CODES as string[]).includes(message.error.code) ? (message.error.code as ErrorCode) : 'TB_ERR_INTERNAL';
        throw new GatewayError(code, message.error.message);
      }
      else if (message.exit !== undefined && peer) {
        socket.destroy();
        return { kind: 'answered', peer, exit: message.exit };
      }
    }
  }
  throw new GatewayError('TB_ERR_INTERNAL', `the gateway on the admin socket ${path} closed the connection before the verb finished`);
}
