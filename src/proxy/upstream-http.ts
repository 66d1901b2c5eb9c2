// The HTTP upstream: a thin undici call. Policy lives before it (paywall, classify); every transport
// failure becomes a typed GatewayError with the original as `cause`.
import { Agent, request } from 'undici';
import { GatewayError } from '../errors.js';
import { discard } from './body.js';
import type { Upstream, UpstreamRequest, UpstreamResponse } from './upstream.js';

const PROBE_TIMEOUT_MS = 1_000;

export class HttpUpstream implements Upstream {
  readonly kind = 'http' as const;
  readonly #url: URL;
  readonly #agent: Agent;

  constructor(url: string) {
    this.#url = new URL(url);
    // No idle timeouts: event streams may be quiet for hours (SPEC §5.2). Deadlines come from AbortSignals.
    this.#agent = new Agent({ headersTimeout: 0, bodyTimeout: 0, keepAliveTimeout: 10_000, connections: 256, pipelining: 1 });
  }

  async send(upstreamRequest: UpstreamRequest): Promise<UpstreamResponse> {
    const target = this.#target(upstreamRequest.path);
    try {
      const response = await request(target, {
        method: upstreamRequest.method,
        headers: upstreamRequest.headers,
        body: upstreamRequest.body,
        signal: upstreamRequest.signal,
        dispatcher: this.#agent,
      });
      return { status: response.statusCode, headers: response.headers as Record<string, string | string[]>, body: response.body };
    } catch (error) {
      if (upstreamRequest.signal.aborted) throw new GatewayError('TB_ERR_UPSTREAM_TIMEOUT', 'the upstream request was aborted', { cause: error });
      throw new GatewayError('TB_ERR_UPSTREAM_UNAVAILABLE', 'the upstream MCP server could not be reached', { cause: error });
    }
  }

  async probe(): Promise<{ ok: boolean; detail: string }> {
    try {
      const response = await request(this.#url, { method: 'GET', headers: { accept: 'text/event-stream' }, signal: AbortSignal.timeout(PROBE_TIMEOUT_MS), dispatcher: this.#agent });
      discard(response.body); // a GET may open a stream: the status is all we need
      return { ok: true, detail: `upstream answered HTTP ${response.statusCode}` };
    } catch {
      return { ok: false, detail: 'upstream did not answer within 1 s' };
    }
  }

  async close(): Promise<void> {
    await this.#agent.close().catch(() => this.#agent.destroy());
  }

  /** The client's path is relative to the gateway's mcpPath; the upstream's own URL path is kept and the query appended. */
  #target(path: string): URL {
    const target = new URL(this.#url);
    const query = path.indexOf('?');
    if (query !== -1) target.search = path.slice(query);
    return target;
  }
}
