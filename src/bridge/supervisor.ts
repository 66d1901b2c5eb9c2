// Keeps one initialised stdio child alive: spawn, the gateway's own initialize handshake, restarts with
// exponential backoff (reset after a good life), and the readiness the request path waits on.
import { GatewayError } from '../errors.js';
import { isResponseLike, type JsonRpcResponse } from '../mcp/jsonrpc.js';
import type { Logger } from '../observability/logger.js';
import { StdioChild, type ChildExit } from './stdio-child.js';
import { CHILD_PROTOCOL_VERSION, parseInitializeResult, type ChildIdentity } from './stdio-router.js';

const INIT_TIMEOUT_MS = 10_000;
/** A request arriving while the child restarts waits this long for it before it is refused. */
const READY_WAIT_MS = 5_000;
/** A child that lived this long resets the restart backoff. */
const GOOD_LIFE_MS = 60_000;
const DEFAULT_BACKOFF = { initialMs: 250, maxMs: 10_000 };
const GATEWAY_CLIENT_INFO = { name: 'tollbooth-gateway', version: '0.1.0' };
/** Declared so the child may ask; each request is relayed only to a client that declared the same capability. */
const GATEWAY_CLIENT_CAPABILITIES = { sampling: {}, elicitation: { form: {}, url: {} }, roots: { listChanged: true } };

export interface SupervisorOptions {
  logger: Logger;
  env?: NodeJS.ProcessEnv;
  restartBackoff?: { initialMs: number; maxMs: number };
}

export interface SupervisorHandlers {
  /** A message from the current, initialised child (the handshake itself is not passed on). */
  onMessage(message: unknown): void;
  /** The current child is gone; a restart is already scheduled unless the supervisor is closing. */
  onExit(): void;
}

export const unavailable = (message: string, cause?: unknown): GatewayError => new GatewayError('TB_ERR_UPSTREAM_UNAVAILABLE', message, { cause });

export class StdioSupervisor {
  readonly #command: readonly string[];
  readonly #logger: Logger;
  readonly #env: NodeJS.ProcessEnv;
  readonly #backoff: { initialMs: number; maxMs: number };
  readonly #handlers: SupervisorHandlers;
  readonly #readyWaiters = new Set<(ok: boolean) => void>();
  #child: StdioChild | undefined;
  #identity: ChildIdentity | undefined;
  #ready = false;
  #pendingInit: { id: string; settle: (response: JsonRpcResponse | Error) => void } | undefined;
  #launches = 0;
  #nextBackoffMs: number;
  #restartTimer: NodeJS.Timeout | undefined;
  #closing = false;

  constructor(command: readonly string[], options: SupervisorOptions, handlers: SupervisorHandlers) {
    this.#command = command;
    this.#logger = options.logger;
    this.#env = options.env ?? process.env;
    this.#backoff = options.restartBackoff ?? DEFAULT_BACKOFF;
    this.#nextBackoffMs = this.#backoff.initialMs;
    this.#handlers = handlers;
  }

  /** The child's initialize result, kept across restarts (the last one that succeeded). */
  get identity(): ChildIdentity | undefined {
    return this.#identity;
  }

  get ready(): boolean {
    return this.#ready && this.#child?.alive === true;
  }

  get pid(): number | undefined {
    return this.#child?.pid;
  }

  /** Brings up the first child; rejects when it cannot be spawned or initialised. */
  start(): Promise<void> {
    return this.#launch();
  }

  /** Writes to the current child; false when there is none. */
  write(message: unknown): boolean {
    return this.#child?.write(message) === true;
  }

  /** Resolves once a child is initialised; refuses after READY_WAIT_MS, on abort, or on close. */
  async waitReady(signal: AbortSignal): Promise<void> {
    if (this.ready) return;
    if (this.#closing) throw unavailable('the stdio upstream is shutting down');
    const ok = await new Promise<boolean>((resolve) => {
      const done = (result: boolean): void => {
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        this.#readyWaiters.delete(done);
        resolve(result);
      };
      const onAbort = (): void => done(false);
      const timer = setTimeout(() => done(false), READY_WAIT_MS);
      signal.addEventListener('abort', onAbort, { once: true });
      this.#readyWaiters.add(done);
    });
    if (ok) return;
    if (signal.aborted) throw new GatewayError('TB_ERR_UPSTREAM_TIMEOUT', 'the upstream request was aborted');
    throw unavailable('stdio child not running');
  }

  /** Stops restarting and kills the child (SIGTERM, SIGKILL after 2 s). */
  async close(): Promise<void> {
    this.#closing = true;
    clearTimeout(this.#restartTimer);
    for (const wake of this.#readyWaiters) wake(false);
    await this.#child?.kill();
  }

  async #launch(): Promise<void> {
    let child: StdioChild;
    try {
      child = StdioChild.spawn(this.#command, this.#env, this.#logger, {
        onMessage: (message) => {
          if (child !== this.#child) return;
          if (this.#pendingInit !== undefined && isResponseLike(message) && message.id === this.#pendingInit.id) this.#pendingInit.settle(message);
          else this.#handlers.onMessage(message);
        },
        onExit: (exit) => this.#onExit(child, exit),
      });
    } catch (error) {
      this.#scheduleRestart(Date.now());
      throw error;
    }
    this.#child = child;
    this.#ready = false;
    // A string id: the request path numbers its own requests, so the two can never meet.
    const id = `tollbooth-init-${++this.#launches}`;
    const answer = await new Promise<JsonRpcResponse | Error>((resolve) => {
      const timer = setTimeout(() => resolve(new Error(`no answer to initialize within ${INIT_TIMEOUT_MS} ms`)), INIT_TIMEOUT_MS);
      this.#pendingInit = {
        id,
        settle: (response) => {
          clearTimeout(timer);
          this.#pendingInit = undefined;
          resolve(response);
        },
      };
      child.write({
        jsonrpc: '2.0',
        id,
        method: 'initialize',
        params: { protocolVersion: CHILD_PROTOCOL_VERSION, capabilities: GATEWAY_CLIENT_CAPABILITIES, clientInfo: GATEWAY_CLIENT_INFO },
      });
    });
    const identity = answer instanceof Error ? undefined : parseInitializeResult(answer.result);
    if (identity === undefined) {
      void child.kill(); // its exit schedules the next attempt
      if (answer instanceof Error) throw answer;
      throw new Error(answer.error ? `the child refused initialize: ${answer.error.message}` : 'the child answered initialize with something else than an initialize result');
    }
    this.#identity = identity;
    child.write({ jsonrpc: '2.0', method: 'notifications/initialized' });
    this.#ready = true;
    for (const wake of this.#readyWaiters) wake(true);
    this.#logger.info({ evt: 'upstream_ready', pid: child.pid, protocolVersion: identity.protocolVersion, server: identity.serverInfo.name }, 'stdio upstream initialised');
  }

  #onExit(child: StdioChild, exit: ChildExit): void {
    if (child !== this.#child) return;
    this.#child = undefined;
    this.#ready = false;
    this.#pendingInit?.settle(new Error(`the child exited during initialize (code ${String(exit.code)}${exit.error ? `, ${exit.error.message}` : ''})`));
    this.#logger[this.#closing ? 'debug' : 'warn']({ evt: 'upstream_exit', code: exit.code, signal: exit.signal, err: exit.error?.message }, 'stdio upstream exited');
    this.#scheduleRestart(child.startedAt);
    this.#handlers.onExit();
  }

  #scheduleRestart(startedAt: number): void {
    if (this.#closing) return;
    if (Date.now() - startedAt >= GOOD_LIFE_MS) this.#nextBackoffMs = this.#backoff.initialMs;
    const delay = this.#nextBackoffMs;
    this.#nextBackoffMs = Math.min(delay * 2, this.#backoff.maxMs);
    this.#logger.info({ evt: 'upstream_restart', inMs: delay }, 'restarting the stdio upstream');
    this.#restartTimer = setTimeout(() => {
      this.#restartTimer = undefined;
      this.#launch().catch((error: unknown) => this.#logger.warn({ evt: 'upstream_init_failed', err: String(error) }, 'stdio upstream did not initialise'));
    }, delay);
  }
}
