// The running upstreams of every endpoint (SPEC §16, §18): an HTTP agent per URL, a stdio bridge (and
// its children) per command. Keyed by what they run (endpoints.ts upstreamKey), so a config reload keeps
// an unchanged upstream alive, its sessions and children with it, and starts or closes only what changed.
import { childEnvironment } from '../bridge/child-env.js';
import { startBridge } from '../bridge/index.js';
import type { GatewayConfig, UpstreamConfig } from '../config/schema.js';
import type { Logger } from '../observability/logger.js';
import type { StdioChildrenReading } from '../observability/metrics.js';
import { httpUpstreamTarget, type UpstreamTarget } from '../proxy/upstream-target.js';
import { DEFAULT_ENDPOINT, endpointsOf, upstreamKey } from './endpoints.js';

export interface EndpointUpstreams {
  /** The default endpoint's. */
  upstream: UpstreamTarget;
  /** Each `servers` entry's, by key. */
  servers: Record<string, UpstreamTarget>;
  /** The pool keys in use by this config. */
  keys: Set<string>;
}

export class UpstreamPool {
  readonly #logger: Logger;
  readonly #cwd: string | undefined;
  readonly #running = new Map<string, Promise<UpstreamTarget>>();
  /** The started ones, with the endpoint each serves (for tollbooth_stdio_children). */
  readonly #started = new Map<string, { server: string; target: UpstreamTarget }>();

  /** @param deps.cwd where stdio children run: the config file's directory (relative command paths resolve there) */
  constructor(deps: { logger: Logger; cwd?: string }) {
    this.#logger = deps.logger;
    this.#cwd = deps.cwd;
  }

  /** The targets a config needs: those already running are reused, the others started. */
  async acquire(config: GatewayConfig): Promise<EndpointUpstreams> {
    const result: EndpointUpstreams = { upstream: undefined as unknown as UpstreamTarget, servers: {}, keys: new Set() };
    for (const endpoint of endpointsOf(config)) {
      const key = upstreamKey(endpoint.name, endpoint.upstream, config.server.bodyLimit);
      let target = this.#running.get(key);
      if (!target) {
        target = this.#start(endpoint.upstream, config.server.bodyLimit);
        this.#running.set(key, target);
        const server = endpoint.name;
        target.then((started) => this.#running.get(key) === target && this.#started.set(key, { server, target: started }), () => this.#running.delete(key));
      }
      result.keys.add(key);
      if (endpoint.name === DEFAULT_ENDPOINT) result.upstream = await target;
      else result.servers[endpoint.name] = await target;
    }
    return result;
  }

  /** Closes every running target whose key is not in `keep` (after a reload's old app has drained). */
  async retainOnly(keep: Set<string>): Promise<void> {
    const closing: Promise<unknown>[] = [];
    for (const [key, target] of this.#running) {
      if (keep.has(key)) continue;
      this.#running.delete(key);
      this.#started.delete(key);
      closing.push(target.then((t) => t.close()).catch(() => undefined));
    }
    await Promise.all(closing);
  }

  async closeAll(): Promise<void> {
    await this.retainOnly(new Set());
  }

  /** Every running stdio upstream's children by state, summed per endpoint (a reload may run two for one). */
  stdioChildren(): StdioChildrenReading[] {
    const byServer = new Map<string, StdioChildrenReading>();
    for (const { server, target } of this.#started.values()) {
      const capacity = target.capacity?.();
      if (capacity === undefined) continue;
      const reading = byServer.get(server) ?? { server, starting: 0, active: 0, idle: 0, free: 0 };
      reading.starting += capacity.starting;
      reading.active += capacity.active;
      reading.idle += capacity.idle;
      reading.free += capacity.free;
      byServer.set(server, reading);
    }
    return [...byServer.values()];
  }

  async #start(upstream: UpstreamConfig, bodyLimit: number): Promise<UpstreamTarget> {
    // A stdio upstream is served by the bridge on a private socket; the proxy reaches it like any HTTP upstream (SPEC §16).
    if (upstream.command && upstream.stdio) {
      return startBridge({
        command: upstream.command,
        sessions: upstream.stdio.sessions,
        maxChildren: upstream.stdio.maxChildren,
        idleTimeoutMs: upstream.stdio.idleTimeout,
        maxLineBytes: upstream.maxResponseBytes,
        maxBodyBytes: bodyLimit,
        initTimeoutMs: upstream.stdio.initTimeout,
        killTimeoutMs: upstream.stdio.killTimeout,
        // SPEC §22: given, never inherited — the gateway's secrets stay in the gateway.
        env: childEnvironment(process.env, { inheritEnv: upstream.inheritEnv, env: upstream.env }),
        cwd: this.#cwd,
        logger: this.#logger,
      });
    }
    return httpUpstreamTarget(upstream.url as string);
  }
}
