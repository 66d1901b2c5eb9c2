// The bridge's HTTP endpoint: which session, which era, which limits. One POST/GET/DELETE path; a request
// is modern iff its body's `_meta` carries the protocol version (SPEC §5.1). Legacy requests without a
// session must be an initialize: it opens a session (a new child in `perClient` mode, within maxChildren);
// with a session id they go to that session (404 when it is unknown or ended). The sessions, the modern
// children and the shared child live here, and so do the idle reaper and the readiness probe.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { errorResponse, isObject, isRequestLike, type JsonObject, type JsonRpcId } from '../mcp/jsonrpc.js';
import type { Logger } from '../observability/logger.js';
import type { ChildOptions } from './child.js';
import { DirectSession } from './direct-session.js';
import type { EventBufferLimits } from './event-store.js';
import { startInitialisedChild } from './handshake.js';
import { GatewayError, type ErrorCode } from '../errors.js';
import { sendRpcError } from '../io/error-reply.js';
import { readBody, sendJson } from './http.js';
import { ModernPool, serveModernRequest, type ModernTargets } from './modern.js';
import { Multiplexer } from './multiplexer.js';
import { BRIDGE_ERROR, isModernRequest, oversizedClientState } from './protocol.js';
import { SharedSession } from './shared-session.js';
import { StdioSupervisor } from './supervisor.js';
import { systemClock } from '../clock.js';

/** How long a readiness answer from a probe spawn stays good (no child running meanwhile). */
const PROBE_TTL_MS = 30_000;
/** SPEC §22: at maxChildren, a child idle at least this long may be stopped to make room for a new client. */
export const EVICT_AFTER_IDLE_MS = 30_000;

/** The children against maxChildren, for /readyz and tollbooth_stdio_children{state}. */
export interface StdioCapacity {
  max: number;
  /** Spawned, the client has not completed initialize yet. */
  starting: number;
  /** Initialised and in use (or idle for less than the eviction threshold). */
  active: number;
  /** Idle long enough to be stopped for a new client. */
  idle: number;
  /** Slots nobody holds. */
  free: number;
}

export interface BridgeSettings {
  command: readonly string[];
  sessions: 'perClient' | 'shared';
  maxChildren: number;
  idleTimeoutMs: number;
  logger: Logger;
  child: ChildOptions;
  path: string;
  maxBodyBytes: number;
  maxSessions: number;
  eventBuffer: EventBufferLimits;
  /** A stream whose reader lags by more than this is cut (shared and 2026-07-28 children, which cannot be paused for one reader). */
  maxBufferedBytes: number;
  initializeTimeoutMs: number;
  /** A per-client child whose client has not completed initialize this long after the spawn is stopped (default 10 s). */
  initTimeoutMs?: number;
  /** At maxChildren, the least recently used child idle this long is stopped for a new client (default 30 s). */
  evictAfterIdleMs?: number;
  restartBackoff: { initialMs: number; maxMs: number };
}

type LegacySession = DirectSession | SharedSession;

export class Bridge {
  readonly #settings: BridgeSettings;
  readonly #logger: Logger;
  readonly #sessions = new Map<string, LegacySession>();
  /** Every per-client session holding a child, with or without an id yet (the budget counts them all). */
  readonly #direct = new Set<DirectSession>();
  readonly #pool: ModernPool | undefined;
  readonly #shared: { supervisor: StdioSupervisor; mux: Multiplexer } | undefined;
  readonly #reaper: NodeJS.Timeout;
  #children = 0;
  #lastProbe: { at: number; result: { ok: boolean; detail: string } } | undefined;
  #probing: Promise<{ ok: boolean; detail: string }> | undefined;
  #closing = false;
  #allowedHosts: readonly string[] | undefined;

  constructor(settings: BridgeSettings) {
    this.#settings = settings;
    this.#logger = settings.logger;
    if (settings.sessions === 'shared') {
      let mux!: Multiplexer;
      const supervisor = new StdioSupervisor(
        { child: settings.child, logger: settings.logger, initializeTimeoutMs: settings.initializeTimeoutMs, restartBackoff: settings.restartBackoff },
        { onMessage: (message, bytes) => mux.fromChild(message, bytes), onExit: (why) => mux.childExited(why) },
      );
      mux = new Multiplexer(supervisor, settings.logger);
      this.#shared = { supervisor, mux };
    } else {
      this.#pool = new ModernPool({
        child: settings.child,
        logger: settings.logger,
        initializeTimeoutMs: settings.initializeTimeoutMs,
        acquireSlot: () => this.#acquireSlot() || (this.#evictIdle() && this.#acquireSlot()),
        releaseSlot: () => this.#releaseSlot(),
      });
    }
    const sweepMs = Math.max(50, Math.min(30_000, Math.floor(settings.idleTimeoutMs / 4)));
    this.#reaper = setInterval(() => this.#reap(), sweepMs);
    this.#reaper.unref();
  }

  /** Shared: the child is up. perClient: the command spawns and initialises (then that child is stopped). */
  async start(): Promise<void> {
    if (this.#shared) {
      await this.#shared.supervisor.start();
      return;
    }
    const result = await this.#probeSpawn();
    if (!result.ok) throw new Error(result.detail);
  }

  /** SPEC §4: a live initialised child, or (perClient, none running) a child that can be spawned and initialised. */
  async probe(): Promise<{ ok: boolean; detail: string }> {
    if (this.#closing) return { ok: false, detail: 'the bridge is closing' };
    if (this.#shared) return { ok: this.#shared.supervisor.ready, detail: this.#shared.supervisor.detail };
    const live = [...this.#direct].filter((session) => session.alive).length + (this.#pool?.liveChildren ?? 0);
    if (live > 0) return { ok: true, detail: `${live} stdio ${live === 1 ? 'child' : 'children'} running` };
    if (this.#lastProbe && systemClock.monotonic() - this.#lastProbe.at < PROBE_TTL_MS) return this.#lastProbe.result;
    return this.#probeSpawn();
  }

  /** How the children stand against maxChildren (perClient; shared: the sessions against maxSessions). */
  capacity(): StdioCapacity {
    const now = systemClock.monotonic();
    const evictAfter = this.#evictAfterIdleMs;
    if (this.#shared) {
      const max = this.#settings.maxSessions;
      let idle = 0;
      for (const session of this.#sessions.values()) if (!session.channel.connected && session.idleFor(now) >= evictAfter) idle += 1;
      return { max, starting: 0, active: this.#sessions.size - idle, idle, free: max - this.#sessions.size };
    }
    let starting = 0;
    let idle = 0;
    for (const session of this.#direct) {
      if (!session.initialised) starting += 1;
      else if (!session.connected && session.idleFor(now) >= evictAfter) idle += 1;
    }
    const pool = this.#pool?.census(now, evictAfter) ?? { starting: 0, idle: 0 };
    starting += pool.starting;
    idle += pool.idle;
    const max = this.#settings.maxChildren;
    return { max, starting, idle, active: this.#children - starting - idle, free: max - this.#children };
  }

  /** From now on a Host header not in the list gets 403 (the standalone bridge on a loopback port: DNS rebinding). */
  restrictHosts(hosts: readonly string[]): void {
    this.#allowedHosts = hosts;
  }

  async close(): Promise<void> {
    this.#closing = true;
    clearInterval(this.#reaper);
    const ending = [...this.#sessions.values(), ...this.#direct].map((session) => session.end('the bridge is closing'));
    await Promise.all([...ending, this.#pool?.close(), this.#shared?.supervisor.close()]);
  }

  async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0];
    if (path !== this.#settings.path) return refuse(res, 'TB_ERR_NOT_FOUND', `Not found: the MCP endpoint is ${this.#settings.path}`);
    if (this.#allowedHosts && !this.#allowedHosts.includes(req.headers.host ?? '')) {
      return refuse(res, 'TB_ERR_HOST_FORBIDDEN', `Forbidden: Host ${JSON.stringify(req.headers.host ?? '')} is not this bridge`);
    }
    if (this.#closing) return refuse(res, 'TB_ERR_BRIDGE_UNAVAILABLE', 'the bridge is shutting down');
    switch (req.method) {
      case 'POST':
        return this.#post(req, res);
      case 'GET':
      case 'DELETE': {
        const session = this.#sessionOf(req, res);
        if (session) await session.handle(req, res);
        return;
      }
      default:
        return void sendRpcError(res, new GatewayError('TB_ERR_METHOD_NOT_ALLOWED', 'Method not allowed.', { headers: { allow: 'GET, POST, DELETE' } }), null);
    }
  }

  async #post(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const read = await readBody(req, this.#settings.maxBodyBytes);
    if ('tooLarge' in read) return refuse(res, 'TB_ERR_BODY_TOO_LARGE', `Payload Too Large: Request body must not exceed ${this.#settings.maxBodyBytes} bytes`);
    const contentType = (req.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase() ?? '';
    if (contentType !== 'application/json' && !contentType.endsWith('+json')) {
      return refuse(res, 'TB_ERR_UNSUPPORTED_MEDIA_TYPE', 'Unsupported Media Type: Content-Type must be application/json');
    }
    let body: unknown;
    try {
      body = JSON.parse(read.text);
    } catch {
      return refuse(res, 'TB_ERR_PARSE', 'Parse error: Invalid JSON');
    }
    const messages: unknown[] = Array.isArray(body) ? body : [body];
    if (!Array.isArray(body) && isRequestLike(body) && isModernRequest(body.params)) {
      return serveModernRequest(body, req, res, { targets: this.#modernTargets, logger: this.#logger, maxBufferedBytes: this.#settings.maxBufferedBytes });
    }
    if (messages.some((entry) => isRequestLike(entry) && isModernRequest(entry.params))) {
      return refuse(res, 'TB_ERR_INVALID_REQUEST', 'Invalid Request: 2026-07-28 has no batches');
    }
    const initialize = messages.find((entry) => isRequestLike(entry) && entry.method === 'initialize' && entry.id !== undefined);
    if (initialize !== undefined && req.headers['mcp-session-id'] === undefined) {
      if (messages.length > 1) return refuse(res, 'TB_ERR_INVALID_REQUEST', 'Invalid Request: Only one initialization request is allowed');
      return this.#openSession(initialize as { id: JsonRpcId; params?: unknown }, body, req, res);
    }
    const session = this.#sessionOf(req, res);
    if (session === undefined) return;
    if (session instanceof DirectSession && !session.hasRoomFor(Buffer.byteLength(read.text))) {
      // The child is not reading its input: refuse before anything is queued for it.
      const single = !Array.isArray(body) && isRequestLike(body) && body.id !== undefined ? body.id : undefined;
      const message = 'the stdio server is not reading its input; the request was refused (try again later)';
      if (single !== undefined) return sendJson(res, 200, errorResponse(single, BRIDGE_ERROR.stdinFull.code, message, { reason: BRIDGE_ERROR.stdinFull.reason }));
      return void sendRpcError(res, new GatewayError('TB_ERR_BRIDGE_UNAVAILABLE', message), null, { reason: BRIDGE_ERROR.stdinFull.reason });
    }
    await session.handle(req, res, body);
  }

  async #openSession(initialize: { id: JsonRpcId; params?: unknown }, body: unknown, req: IncomingMessage, res: ServerResponse): Promise<void> {
    const params: JsonObject = isObject(initialize.params) ? initialize.params : {};
    const oversized = oversizedClientState({ capabilities: params.capabilities, clientInfo: params.clientInfo });
    if (oversized) {
      return sendJson(res, 200, errorResponse(initialize.id, BRIDGE_ERROR.stateTooLarge.code, `${oversized.field} of ${oversized.bytes} bytes is over the bridge's 64 KiB limit for client state`, { reason: BRIDGE_ERROR.stateTooLarge.reason }));
    }
    const accept = req.headers.accept ?? '';
    if (!accept.includes('application/json') || !accept.includes('text/event-stream')) {
      // The SDK transport would refuse it too; refusing first spares a spawn.
      return refuse(res, 'TB_ERR_NOT_ACCEPTABLE', 'Not Acceptable: Client must accept both application/json and text/event-stream');
    }
    const session = this.#shared ? this.#newSharedSession() : this.#newDirectSession();
    if (typeof session === 'string') {
      this.#logger.warn({ evt: 'bridge_at_capacity', sessions: this.#settings.sessions, limit: this.#shared ? this.#settings.maxSessions : this.#settings.maxChildren }, session);
      return sendJson(res, 200, errorResponse(initialize.id, BRIDGE_ERROR.atCapacity.code, session, { reason: BRIDGE_ERROR.atCapacity.reason }));
    }
    await session.handle(req, res, body);
    // The transport refused the initialize (e.g. not a valid JSON-RPC message): no session came of it.
    if (session.sessionId === undefined) await session.end('initialize refused');
    // The client left before the child answered: it never learnt the session id, nobody can use the child.
    else if (session instanceof DirectSession && !session.initializeAnswered) await session.end('the client left before initialize was answered');
  }

  #newDirectSession(): DirectSession | string {
    if (!this.#acquireSlot() && !(this.#evictIdle() && this.#acquireSlot())) {
      return `the bridge is running its maximum number of stdio children (maxChildren: ${this.#settings.maxChildren}); end a session or try again later`;
    }
    const session = new DirectSession({
      child: this.#settings.child,
      logger: this.#logger,
      eventBuffer: this.#settings.eventBuffer,
      maxBufferedBytes: this.#settings.maxBufferedBytes,
      initializeTimeoutMs: this.#settings.initializeTimeoutMs,
      initTimeoutMs: this.#settings.initTimeoutMs ?? 10_000,
      onSessionId: (s, id) => this.#sessions.set(id, s),
      onEnded: (s) => {
        if (!this.#direct.delete(s)) return;
        if (s.sessionId !== undefined && this.#sessions.get(s.sessionId) === s) this.#sessions.delete(s.sessionId);
        this.#releaseSlot();
      },
    });
    this.#direct.add(session);
    return session;
  }

  #newSharedSession(): SharedSession | string {
    if (this.#sessions.size >= this.#settings.maxSessions) {
      return `the bridge holds its maximum number of sessions on the shared stdio child (${this.#settings.maxSessions}); end a session or try again later`;
    }
    const shared = this.#shared as { supervisor: StdioSupervisor; mux: Multiplexer };
    return new SharedSession({
      mux: shared.mux,
      supervisor: shared.supervisor,
      logger: this.#logger,
      eventBuffer: this.#settings.eventBuffer,
      maxBufferedBytes: this.#settings.maxBufferedBytes,
      onSessionId: (s, id) => this.#sessions.set(id, s),
      onEnded: (s) => {
        if (this.#sessions.get(s.id) === s) this.#sessions.delete(s.id);
      },
    });
  }

  #sessionOf(req: IncomingMessage, res: ServerResponse): LegacySession | undefined {
    const id = req.headers['mcp-session-id'];
    if (typeof id !== 'string' || id === '') {
      refuse(res, 'TB_ERR_INVALID_REQUEST', 'Bad Request: Mcp-Session-Id header is required');
      return undefined;
    }
    const session = this.#sessions.get(id);
    if (session === undefined) refuse(res, 'TB_ERR_SESSION_NOT_FOUND', 'Session not found');
    return session;
  }

  readonly #modernTargets: ModernTargets = async (capabilities, clientInfo) => {
    if (this.#pool) return this.#pool.target(capabilities, clientInfo);
    const { supervisor, mux } = this.#shared as { supervisor: StdioSupervisor; mux: Multiplexer };
    const ready = supervisor.ready || (await supervisor.waitReady());
    const identity = supervisor.identity;
    if (!ready || identity === undefined) return { refused: supervisor.detail, reason: BRIDGE_ERROR.childGone.reason };
    return { mux, identity, touch: () => undefined };
  };

  #acquireSlot(): boolean {
    if (this.#children >= this.#settings.maxChildren) return false;
    this.#children += 1;
    return true;
  }

  #releaseSlot(): void {
    this.#children -= 1;
  }

  get #evictAfterIdleMs(): number {
    return this.#settings.evictAfterIdleMs ?? EVICT_AFTER_IDLE_MS;
  }

  /**
   * SPEC §22: at maxChildren, the least recently used child idle for at least the threshold (a per-client
   * session whose client holds nothing open and has sent nothing, or a 2026-07-28 child with nothing
   * running) is stopped, and its slot is free at once. False when no child qualifies.
   */
  #evictIdle(): boolean {
    const now = systemClock.monotonic();
    const evictAfter = this.#evictAfterIdleMs;
    let session: DirectSession | undefined;
    for (const candidate of this.#direct) {
      if (!candidate.initialised || candidate.connected || candidate.idleFor(now) < evictAfter) continue;
      if (session === undefined || candidate.lastActivityAt < session.lastActivityAt) session = candidate;
    }
    const modern = this.#pool?.leastRecentlyUsedIdle(now, evictAfter);
    if (modern !== undefined && (session === undefined || modern.lastUsedAt < session.lastActivityAt)) {
      modern.stop('evicted to make room for a new client');
      return true;
    }
    if (session === undefined) return false;
    this.#logger.info({ evt: 'bridge_child_evicted', session: session.sessionId, pid: session.pid, idleMs: Math.round(session.idleFor(now)) }, 'at maxChildren: the least recently used idle stdio child was stopped to make room');
    void session.end('evicted to make room for a new client');
    return true;
  }

  #reap(): void {
    const now = systemClock.monotonic();
    const idleMs = this.#settings.idleTimeoutMs;
    for (const session of [...this.#sessions.values()]) if (session.idleFor(now) >= idleMs) void session.end('idle');
    this.#pool?.reap(now, idleMs);
  }

  #probeSpawn(): Promise<{ ok: boolean; detail: string }> {
    this.#probing ??= (async () => {
      let result: { ok: boolean; detail: string };
      try {
        const { child, identity } = await startInitialisedChild(this.#settings.child, { capabilities: {}, timeoutMs: this.#settings.initializeTimeoutMs }, { onMessage: () => undefined, onExit: () => undefined });
        await child.kill();
        result = { ok: true, detail: `the stdio server starts and initialises (${typeof identity.serverInfo.name === 'string' ? identity.serverInfo.name : 'unnamed'})` };
      } catch (error) {
        result = { ok: false, detail: (error as Error).message };
      }
      this.#lastProbe = { at: systemClock.monotonic(), result };
      this.#probing = undefined;
      return result;
    })();
    return this.#probing;
  }
}

/** The bridge's own refusal of an HTTP request: a coded GatewayError, written like the gateway's (io/error-reply.ts). */
function refuse(res: ServerResponse, code: ErrorCode, message: string): void {
  sendRpcError(res, new GatewayError(code, message), null);
}
