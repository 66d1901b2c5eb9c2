// 2026-07-28 clients (SPEC §5.5): stateless requests served on top of a legacy child initialised with the
// capabilities the request declares (`_meta["io.modelcontextprotocol/clientCapabilities"]`). Requests that
// declare the same capability set share a child (`ModernPool`, one Multiplexer per set); in `shared` mode
// they all use the one shared child. The envelope is lifted before the child sees a request; results are
// stamped `resultType: "complete"` on the way out (the Multiplexer does both); `server/discover` is answered
// from the child's initialize result; closing the request's stream cancels the request in the child.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { errorResponse, resultResponse, type JsonObject, type JsonRpcRequest } from '../mcp/jsonrpc.js';
import type { Logger } from '../observability/logger.js';
import { StdioChild, describeExit, type ChildOptions } from './child.js';
import { startInitialisedChild } from './handshake.js';
import { GatewayError, RPC } from '../errors.js';
import { sendRpcError } from '../io/error-reply.js';
import { acceptsEventStream, sendJson } from './http.js';
import { ModernReply } from './modern-reply.js';
import { Multiplexer } from './multiplexer.js';
import { systemClock } from '../clock.js';
import {
  BRIDGE_ERROR, MODERN_VERSION, canonicalJson, discoverResult, modernClientCapabilities, modernClientInfo, modernVersionOf, oversizedClientState,
  type ChildIdentity,
} from './protocol.js';

export interface ModernTarget {
  mux: Multiplexer;
  identity: ChildIdentity;
  /** Marks the child used now (idle reaping). */
  touch(): void;
}

/** Finds (or starts) the child a request with these capabilities runs on; a string says why there is none. */
export type ModernTargets = (capabilities: JsonObject, clientInfo: JsonObject | undefined) => Promise<ModernTarget | { refused: string; reason: string }>;

export async function serveModernRequest(
  request: JsonRpcRequest,
  req: IncomingMessage,
  res: ServerResponse,
  context: { targets: ModernTargets; logger: Logger; maxBufferedBytes: number },
): Promise<void> {
  const id = request.id ?? null;
  const version = modernVersionOf(request.params);
  if (version !== MODERN_VERSION) {
    sendRpcError(res, new GatewayError('TB_ERR_UNSUPPORTED_PROTOCOL_VERSION', `Unsupported protocol version: ${String(version)}`), id, { supported: [MODERN_VERSION], requested: String(version) });
    return;
  }
  // 2026-07-28 cancels by closing the request's stream; its notifications have nothing to do on a legacy child.
  if (request.id === undefined) {
    res.writeHead(202).end();
    return;
  }
  if (request.method === 'initialize' || request.method === 'subscriptions/listen') {
    sendJson(res, 200, errorResponse(id, RPC.METHOD_NOT_FOUND, `Method not found: ${request.method}`));
    return;
  }
  const capabilities = modernClientCapabilities(request.params);
  const clientInfo = modernClientInfo(request.params);
  const oversized = oversizedClientState({ capabilities, clientInfo });
  if (oversized) {
    sendJson(res, 200, errorResponse(id, BRIDGE_ERROR.stateTooLarge.code, `${oversized.field} of ${oversized.bytes} bytes is over the bridge's 64 KiB limit for client state`, { reason: BRIDGE_ERROR.stateTooLarge.reason }));
    return;
  }
  const target = await context.targets(capabilities, clientInfo);
  if ('refused' in target) {
    sendJson(res, 200, errorResponse(id, target.reason === BRIDGE_ERROR.atCapacity.reason ? BRIDGE_ERROR.atCapacity.code : BRIDGE_ERROR.childGone.code, target.refused, { reason: target.reason }));
    return;
  }
  target.touch();
  if (request.method === 'server/discover') {
    sendJson(res, 200, resultResponse(id, discoverResult(target.identity)));
    return;
  }
  const reply = new ModernReply(res, acceptsEventStream(req), context.maxBufferedBytes, () =>
    context.logger.warn({ evt: 'bridge_slow_reader' }, 'a 2026-07-28 client stopped reading its stream; the stream was cut'),
  );
  const gone = new AbortController();
  res.once('close', () => {
    if (!res.writableFinished) gone.abort();
  });
  target.mux.forward(request, 'modern', undefined, reply, gone.signal);
}

interface PoolEntry {
  key: string;
  mux: Multiplexer;
  child: StdioChild | undefined;
  identity: ChildIdentity | undefined;
  starting: Promise<ModernTarget | { refused: string; reason: string }>;
  lastUsedAt: number;
}

export interface ModernPoolOptions {
  child: ChildOptions;
  logger: Logger;
  initializeTimeoutMs: number;
  /** Takes a child slot from the bridge's maxChildren budget (evicting an idle child if need be); false when none is free. */
  acquireSlot(): boolean;
  releaseSlot(): void;
}

/** The 2026-07-28 children of `sessions: perClient`: one per declared capability set. */
export class ModernPool {
  readonly #options: ModernPoolOptions;
  readonly #entries = new Map<string, PoolEntry>();

  constructor(options: ModernPoolOptions) {
    this.#options = options;
  }

  get size(): number {
    return this.#entries.size;
  }

  get liveChildren(): number {
    return [...this.#entries.values()].filter((entry) => entry.child?.alive === true).length;
  }

  readonly target: ModernTargets = (capabilities, clientInfo) => {
    const key = canonicalJson(capabilities);
    const existing = this.#entries.get(key);
    if (existing) return existing.starting;
    if (!this.#options.acquireSlot()) {
      return Promise.resolve({ refused: 'the bridge is running its maximum number of stdio children (maxChildren); try again later', reason: BRIDGE_ERROR.atCapacity.reason });
    }
    const entry: PoolEntry = { key, mux: undefined as unknown as Multiplexer, child: undefined, identity: undefined, starting: undefined as never, lastUsedAt: systemClock.monotonic() };
    entry.mux = new Multiplexer({ write: (message) => entry.child?.write(message) ?? 'gone', get identity() { return entry.identity; } }, this.#options.logger);
    this.#entries.set(key, entry); // before #start: a spawn that fails at once must find it to free the slot
    entry.starting = this.#start(entry, capabilities, clientInfo);
    return entry.starting;
  };

  /** The least recently used child with nothing running for at least `minIdleMs`, and how to stop it. */
  leastRecentlyUsedIdle(now: number, minIdleMs: number): { lastUsedAt: number; stop(why: string): void } | undefined {
    let victim: PoolEntry | undefined;
    for (const entry of this.#entries.values()) {
      if (entry.child?.alive !== true || entry.mux.running > 0 || now - entry.lastUsedAt < minIdleMs) continue;
      if (victim === undefined || entry.lastUsedAt < victim.lastUsedAt) victim = entry;
    }
    if (victim === undefined) return undefined;
    const chosen = victim;
    return { lastUsedAt: chosen.lastUsedAt, stop: (why) => this.#stop(chosen, why) };
  }

  /** Children still starting, and children with nothing running for at least `idleMs` (capacity). */
  census(now: number, idleMs: number): { starting: number; idle: number } {
    let starting = 0;
    let idle = 0;
    for (const entry of this.#entries.values()) {
      if (entry.child === undefined) starting += 1;
      else if (entry.child.alive && entry.mux.running === 0 && now - entry.lastUsedAt >= idleMs) idle += 1;
    }
    return { starting, idle };
  }

  /** Stops children idle (nothing running) for `idleMs`. */
  reap(now: number, idleMs: number): void {
    for (const entry of [...this.#entries.values()]) {
      if (entry.child?.alive === true && entry.mux.running === 0 && now - entry.lastUsedAt >= idleMs) this.#stop(entry, 'idle');
    }
  }

  async close(): Promise<void> {
    await Promise.all([...this.#entries.values()].flatMap((entry) => (entry.child ? [entry.child.kill()] : [])));
    this.#entries.clear();
  }

  async #start(entry: PoolEntry, capabilities: JsonObject, clientInfo: JsonObject | undefined): Promise<ModernTarget | { refused: string; reason: string }> {
    try {
      const started = await startInitialisedChild(
        this.#options.child,
        { capabilities, clientInfo, timeoutMs: this.#options.initializeTimeoutMs },
        {
          onMessage: (message, bytes) => entry.mux.fromChild(message, bytes),
          onExit: (exit) => {
            if (entry.child === undefined) return; // died during the handshake: #start reports it
            const why = describeExit(exit, this.#options.child.maxLineBytes);
            this.#forget(entry);
            entry.mux.childExited(why);
            this.#options.logger[exit.stoppedBecause === undefined ? 'info' : 'warn']({ evt: 'bridge_child_exit', pid: entry.child.pid, why }, '2026-07-28 stdio child exited');
          },
        },
      );
      entry.child = started.child;
      entry.identity = started.identity;
      if (!started.child.alive) this.#forget(entry);
      return { mux: entry.mux, identity: started.identity, touch: () => (entry.lastUsedAt = systemClock.monotonic()) };
    } catch (error) {
      this.#forget(entry);
      this.#options.logger.warn({ evt: 'bridge_child_init_failed', err: (error as Error).message }, '2026-07-28 stdio child did not initialise');
      return { refused: (error as Error).message, reason: BRIDGE_ERROR.childGone.reason };
    }
  }

  #stop(entry: PoolEntry, why: string): void {
    this.#options.logger.debug({ evt: 'bridge_child_stop', pid: entry.child?.pid, why }, 'stopping a 2026-07-28 stdio child');
    this.#forget(entry);
    void entry.child?.kill();
  }

  /** Removes the entry and frees its slot, once. */
  #forget(entry: PoolEntry): void {
    if (this.#entries.get(entry.key) !== entry) return;
    this.#entries.delete(entry.key);
    this.#options.releaseSlot();
  }
}
