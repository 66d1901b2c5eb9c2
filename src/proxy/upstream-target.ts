// Where the proxy sends MCP traffic (SPEC §16): a URL and the undici Dispatcher that reaches it. An HTTP
// upstream is its own URL behind an Agent of ours; a stdio upstream is the bridge's private endpoint
// (src/bridge/) with the bridge's dispatcher. Both have the same shape, so every rule of §5 and §6 has
// one implementation.
import { Agent, request, type Dispatcher } from 'undici';
import type { StdioCapacity } from '../bridge/index.js';
import { discard } from '../io/body.js';

export interface UpstreamTarget {
  /** The MCP endpoint's URL, e.g. http://127.0.0.1:8080/mcp (for a bridge, a private origin its dispatcher reaches). */
  url: string;
  dispatcher: Dispatcher;
  /** §4 readyz: an HTTP answer of any status within 1 s, or a live initialised stdio child. */
  probe(): Promise<{ ok: boolean; detail: string; children?: StdioCapacity }>;
  /** A stdio upstream's children against maxChildren (SPEC §22); absent for an HTTP upstream. */
  capacity?(): StdioCapacity;
  close(): Promise<void>;
}

const PROBE_TIMEOUT_MS = 1_000;
const CLOSE_GRACE_MS = 1_000;

/**
 * An HTTP upstream. No idle timeouts on the agent: event streams may be quiet for hours and a free
 * call may take as long as its tool (SPEC §5.2); a priced call's deadline is the gateway's own timer.
 */
export function httpUpstreamTarget(url: string): UpstreamTarget {
  const agent = new Agent({ headersTimeout: 0, bodyTimeout: 0, keepAliveTimeout: 10_000, connections: 256, pipelining: 1 });
  return {
    url,
    dispatcher: agent,
    async probe() {
      try {
        const response = await request(url, { method: 'GET', headers: { accept: 'text/event-stream' }, signal: AbortSignal.timeout(PROBE_TIMEOUT_MS), dispatcher: agent });
        discard(response.body); // a GET may open a stream: the status is all we need
        return { ok: true, detail: `upstream answered HTTP ${response.statusCode}` };
      } catch {
        return { ok: false, detail: 'upstream did not answer within 1 s' };
      }
    },
    async close() {
      // Graceful for a second (requests in flight finish), then whatever is still open is cut.
      let timer: NodeJS.Timeout | undefined;
      const graceful = agent.close().then(() => true, () => false);
      const closed = await Promise.race([graceful, new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), CLOSE_GRACE_MS)))]);
      clearTimeout(timer);
      if (!closed) await agent.destroy().catch(() => undefined);
    },
  };
}
