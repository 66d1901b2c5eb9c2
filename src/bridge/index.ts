// The bridge (SPEC §5.5, §16): a stdio MCP server served as a Streamable HTTP endpoint, so the gateway can
// proxy to it exactly as to any HTTP upstream. It knows nothing about the paywall. By default it listens on
// a Unix socket in a private (0700) temporary directory — nothing outside this process can reach it — and
// `dispatcher` is the undici Agent that connects there; `tollbooth bridge` passes `listen` for a loopback
// port instead. See README.md in this folder for the session model.
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, type Dispatcher } from 'undici';
import { GatewayError } from '../errors.js';
import { sendRpcError } from '../io/error-reply.js';
import type { Logger } from '../observability/logger.js';
import { Bridge, type StdioCapacity } from './bridge.js';
import { childEnvironment } from './child-env.js';
import { DEFAULT_EVENT_BUFFER, type EventBufferLimits } from './event-store.js';

export { MAX_CLIENT_STATE_BYTES } from './protocol.js';
export type { StdioCapacity } from './bridge.js';

export interface RunningBridge {
  /** Base URL the gateway proxies to, e.g. http://bridge.local/mcp. */
  url: string;
  /** An undici Agent that reaches it (connect.socketPath for the Unix socket). */
  dispatcher: Dispatcher;
  /** SPEC §4 readiness: a live initialised child (or, with none running, one can be spawned and initialised). */
  probe(): Promise<{ ok: boolean; detail: string; children: StdioCapacity }>;
  /** The children against maxChildren now (SPEC §22: /readyz, tollbooth_stdio_children). */
  capacity(): StdioCapacity;
  /** Stops every child, closes the listener. */
  close(): Promise<void>;
}

export interface BridgeOptions {
  command: string[];
  sessions: 'perClient' | 'shared';
  maxChildren: number;
  idleTimeoutMs: number;
  /** Cap on one line a child writes (= upstream.maxResponseBytes); a longer line stops the child. */
  maxLineBytes: number;
  logger: Logger;
  /** The children's whole environment (default: PATH, HOME, LANG, LC_*, TZ, TMPDIR of this process; child-env.ts). */
  env?: NodeJS.ProcessEnv;
  /** The children's working directory (default: this process's). */
  cwd?: string;
  /** A per-client child whose client has not completed initialize this long after the spawn is stopped (default 10 s). */
  initTimeoutMs?: number;
  /** Stopping a child: SIGTERM to its process group, SIGKILL this long after (default 5 s). */
  killTimeoutMs?: number;
  /** Listen on this loopback address instead of a private Unix socket (the standalone `tollbooth bridge`). */
  listen?: { host: string; port: number };
  /** The MCP path (default /mcp). */
  path?: string;
  /** Largest request body (default 4 MiB, the SDK transports' default). */
  maxBodyBytes?: number;
  /** Bytes that may wait in a child's stdin before requests are refused (default: maxLineBytes). */
  maxStdinBytes?: number;
  /** `shared` mode: most legacy sessions at once (default 1024). */
  maxSessions?: number;
  /** Per session, what is kept for Last-Event-ID (default 1000 events, 4 MiB). */
  eventBuffer?: EventBufferLimits;
  /** How long a child may take to answer initialize (default 30 s). */
  initializeTimeoutMs?: number;
  /** `shared` mode restarts (default 250 ms doubling to 10 s). */
  restartBackoff?: { initialMs: number; maxMs: number };
  /** At maxChildren, a child idle this long may be stopped for a new client (default 30 s; tests shorten it). */
  evictAfterIdleMs?: number;
}

export async function startBridge(options: BridgeOptions): Promise<RunningBridge> {
  if (options.command.length === 0) throw new GatewayError('TB_ERR_CONFIG_INVALID', 'the bridge needs a command to run');
  const path = options.path ?? '/mcp';
  let socketDir: string | undefined;
  const bridge = new Bridge({
    command: options.command,
    sessions: options.sessions,
    maxChildren: options.maxChildren,
    idleTimeoutMs: options.idleTimeoutMs,
    logger: options.logger,
    child: {
      command: options.command,
      env: options.env ?? childEnvironment(process.env),
      cwd: options.cwd,
      killTimeoutMs: options.killTimeoutMs ?? 5_000,
      logger: options.logger,
      maxLineBytes: options.maxLineBytes,
      maxStdinBytes: options.maxStdinBytes ?? options.maxLineBytes,
    },
    path,
    maxBodyBytes: options.maxBodyBytes ?? 4 * 1024 * 1024,
    maxSessions: options.maxSessions ?? 1024,
    eventBuffer: options.eventBuffer ?? DEFAULT_EVENT_BUFFER,
    maxBufferedBytes: options.maxLineBytes + 1024 * 1024,
    initializeTimeoutMs: options.initializeTimeoutMs ?? 30_000,
    initTimeoutMs: options.initTimeoutMs ?? 10_000,
    evictAfterIdleMs: options.evictAfterIdleMs,
    restartBackoff: options.restartBackoff ?? { initialMs: 250, maxMs: 10_000 },
  });
  try {
    await bridge.start();
  } catch (error) {
    await bridge.close();
    throw new GatewayError('TB_ERR_UPSTREAM_UNAVAILABLE', `the stdio server ${JSON.stringify(options.command.join(' '))} did not start and initialise: ${(error as Error).message}`, { cause: error });
  }

  const server = createServer((req, res) => {
    bridge.handle(req, res).catch((error: unknown) => {
      options.logger.error({ evt: 'bridge_request_failed', err: (error as Error).message }, 'the bridge failed to serve a request');
      sendRpcError(res, new GatewayError('TB_ERR_INTERNAL', 'bridge error', { cause: error }), null);
    });
  });
  // Streams stay open as long as the client wants them (§5.2: no idle timeout on streams).
  server.requestTimeout = 0;
  server.keepAliveTimeout = 60_000;

  let url: string;
  let dispatcher: Dispatcher;
  try {
    if (options.listen) {
      await listen(server, { host: options.listen.host, port: options.listen.port });
      const { port } = server.address() as AddressInfo;
      const host = options.listen.host.includes(':') ? `[${options.listen.host}]` : options.listen.host;
      url = `http://${host}:${port}${path}`;
      bridge.restrictHosts([`${host}:${port}`, `localhost:${port}`]);
      dispatcher = new Agent();
    } else {
      socketDir = await mkdtemp(join(tmpdir(), 'tollbooth-bridge-')); // mkdtemp creates it 0700
      const socketPath = join(socketDir, 'mcp.sock');
      await listen(server, { path: socketPath });
      url = `http://bridge.local${path}`;
      dispatcher = new Agent({ connect: { socketPath } });
    }
  } catch (error) {
    await bridge.close();
    if (socketDir) await rm(socketDir, { recursive: true, force: true });
    throw error;
  }
  options.logger.info({ evt: 'bridge_listening', url, sessions: options.sessions, maxChildren: options.maxChildren, socket: socketDir !== undefined }, 'stdio bridge listening');

  let closing: Promise<void> | undefined;
  return {
    url,
    dispatcher,
    probe: async () => ({ ...(await bridge.probe()), children: bridge.capacity() }),
    capacity: () => bridge.capacity(),
    close: () =>
      (closing ??= (async () => {
        server.close();
        await bridge.close();
        server.closeAllConnections();
        await dispatcher.close().catch(() => undefined);
        if (socketDir) await rm(socketDir, { recursive: true, force: true });
      })()),
  };
}

function listen(server: Server, target: { host: string; port: number } | { path: string }): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    const done = (): void => {
      server.off('error', reject);
      resolve();
    };
    if ('path' in target) server.listen(target.path, done);
    else server.listen(target.port, target.host, done);
  });
}
