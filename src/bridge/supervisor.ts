// Keeps the one shared child alive (`sessions: shared`): the bridge's own initialize handshake, restarts
// with exponential backoff (reset after a good life), and the readiness requests wait on.
import type { Logger } from '../observability/logger.js';
import { describeExit, type ChildExit, type ChildOptions, type StdioChild } from './child.js';
import { startInitialisedChild } from './handshake.js';
import type { ChildIdentity } from './protocol.js';
import type { ChildPort } from './multiplexer.js';
import { systemClock } from '../clock.js';

/** A request arriving while the child restarts waits this long for it before it is refused. */
const READY_WAIT_MS = 5_000;
/** A child that lived this long resets the restart backoff. */
const GOOD_LIFE_MS = 60_000;

/** What the shared child is told about its client: everything a client may be asked for, relayed to one that declared it. */
export const SHARED_CHILD_CAPABILITIES = { sampling: {}, elicitation: { form: {}, url: {} }, roots: { listChanged: true } };

export interface SupervisorOptions {
  child: ChildOptions;
  logger: Logger;
  initializeTimeoutMs: number;
  restartBackoff: { initialMs: number; maxMs: number };
}

export interface SupervisorHandlers {
  onMessage(message: unknown, bytes: number): void;
  /** The current child is gone; a restart is already scheduled unless the supervisor is closing. */
  onExit(why: string): void;
}

export class StdioSupervisor implements ChildPort {
  readonly #options: SupervisorOptions;
  readonly #handlers: SupervisorHandlers;
  readonly #readyWaiters = new Set<(ok: boolean) => void>();
  #child: StdioChild | undefined;
  #identity: ChildIdentity | undefined;
  #nextBackoffMs: number;
  #restartTimer: NodeJS.Timeout | undefined;
  #closing = false;
  #lastFailure = 'not started yet';

  constructor(options: SupervisorOptions, handlers: SupervisorHandlers) {
    this.#options = options;
    this.#nextBackoffMs = options.restartBackoff.initialMs;
    this.#handlers = handlers;
  }

  /** The child's initialize result, kept across restarts (the last one that succeeded). */
  get identity(): ChildIdentity | undefined {
    return this.#identity;
  }

  get ready(): boolean {
    return this.#child?.alive === true;
  }

  get detail(): string {
    return this.ready ? `shared stdio child running (pid ${this.#child?.pid ?? '?'})` : `shared stdio child not running: ${this.#lastFailure}`;
  }

  /** Brings up the first child; rejects when it cannot be spawned or initialised. */
  start(): Promise<void> {
    return this.#launch();
  }

  write(message: unknown) {
    return this.#child?.write(message) ?? 'gone';
  }

  /** Resolves true once a child is initialised; false after READY_WAIT_MS, on abort, or on close. */
  async waitReady(signal?: AbortSignal): Promise<boolean> {
    if (this.ready) return true;
    if (this.#closing) return false;
    return new Promise<boolean>((resolve) => {
      const done = (result: boolean): void => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        this.#readyWaiters.delete(done);
        resolve(result);
      };
      const onAbort = (): void => done(false);
      const timer = setTimeout(() => done(false), READY_WAIT_MS);
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#readyWaiters.add(done);
    });
  }

  /** Stops restarting and kills the child (SIGTERM, SIGKILL after 2 s). */
  async close(): Promise<void> {
    this.#closing = true;
    clearTimeout(this.#restartTimer);
    for (const wake of this.#readyWaiters) wake(false);
    await this.#child?.kill();
  }

  async #launch(): Promise<void> {
    const startedAt = systemClock.monotonic();
    let current: StdioChild | undefined;
    try {
      const { child, identity } = await startInitialisedChild(
        this.#options.child,
        { capabilities: SHARED_CHILD_CAPABILITIES, timeoutMs: this.#options.initializeTimeoutMs },
        {
          onMessage: (message, bytes) => {
            if (current !== undefined && current === this.#child) this.#handlers.onMessage(message, bytes);
          },
          onExit: (exit) => {
            if (current !== undefined && current === this.#child) this.#onExit(current, exit);
          },
        },
      );
      current = child;
      if (this.#closing || !child.alive) {
        void child.kill();
        throw new Error(this.#closing ? 'the bridge is closing' : 'the stdio server exited right after initialize');
      }
      this.#child = child;
      this.#identity = identity;
    } catch (error) {
      this.#lastFailure = (error as Error).message;
      this.#scheduleRestart(startedAt);
      throw error;
    }
    for (const wake of this.#readyWaiters) wake(true);
    this.#options.logger.info({ evt: 'bridge_shared_ready', pid: this.#child.pid, protocolVersion: this.#identity.protocolVersion, server: this.#identity.serverInfo.name }, 'shared stdio child initialised');
  }

  #onExit(child: StdioChild, exit: ChildExit): void {
    this.#child = undefined;
    const why = describeExit(exit, this.#options.child.maxLineBytes);
    this.#lastFailure = why;
    this.#options.logger[this.#closing ? 'debug' : 'warn']({ evt: 'bridge_child_exit', pid: child.pid, code: exit.code, signal: exit.signal, why }, 'shared stdio child exited');
    this.#scheduleRestart(child.startedAt);
    this.#handlers.onExit(why);
  }

  #scheduleRestart(startedAt: number): void {
    if (this.#closing) return;
    if (systemClock.monotonic() - startedAt >= GOOD_LIFE_MS) this.#nextBackoffMs = this.#options.restartBackoff.initialMs;
    const delay = this.#nextBackoffMs;
    this.#nextBackoffMs = Math.min(delay * 2, this.#options.restartBackoff.maxMs);
    this.#options.logger.info({ evt: 'bridge_child_restart', inMs: delay }, 'restarting the shared stdio child');
    clearTimeout(this.#restartTimer);
    this.#restartTimer = setTimeout(() => {
      this.#restartTimer = undefined;
      this.#launch().catch((error: unknown) => this.#options.logger.warn({ evt: 'bridge_child_init_failed', err: (error as Error).message }, 'shared stdio child did not initialise'));
    }, delay);
    this.#restartTimer.unref();
  }
}
