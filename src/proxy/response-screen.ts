// §6.5 on every path a result can take: a JSON-RPC response that turns up on a stream that is not the
// request's own — a GET stream, a Last-Event-ID replay, another request's POST stream — is looked up in
// the priced-request registry (only such responses are: a request's own expected response never pays a
// store round trip). Unknown: passed. A priced request's: passed with its receipt if committed, dropped
// if released, concluded here if still in flight (paywall/decide.ts, concludeResumed). A failed look-up
// drops the response (fail closed).
import type { JsonRpcId, JsonRpcResponse } from '../mcp/jsonrpc.js';
import { isResponseLike } from '../mcp/jsonrpc.js';
import { DROP_DATA, type SseReplacement } from '../mcp/sse.js';
import type { Logger } from '../observability/logger.js';
import type { Paywall } from '../paywall/decide.js';
import type { PricedRequests } from './priced-requests.js';
import { sameId } from './reply-reader.js';

export class ResponseScreen {
  readonly #registry: PricedRequests;
  readonly #paywall: Paywall;
  readonly #logger: Logger;

  constructor(deps: { registry: PricedRequests; paywall: Paywall; logger: Logger }) {
    this.#registry = deps.registry;
    this.#paywall = deps.paywall;
    this.#logger = deps.logger;
  }

  /** True when `value` holds a response that is not one of `ownIds` (cheap: no I/O). */
  holdsForeignResponse(value: unknown, ownIds: readonly JsonRpcId[]): boolean {
    if (Array.isArray(value)) return value.some((item) => isForeign(item, ownIds));
    return isForeign(value, ownIds);
  }

  /**
   * The event data to send for `value` (a message or an array) seen in `sessionId`: undefined when it
   * goes as it came (or as `changed` already says), DROP_DATA when nothing of it may go.
   */
  async screen(sessionId: string, value: unknown, ownIds: readonly JsonRpcId[], changed: boolean): Promise<SseReplacement> {
    if (!Array.isArray(value)) {
      if (!isForeign(value, ownIds)) return changed ? JSON.stringify(value) : undefined;
      const decided = await this.#decide(sessionId, value as JsonRpcResponse);
      if (decided === null) return DROP_DATA;
      return decided !== value || changed ? JSON.stringify(decided) : undefined;
    }
    const kept: unknown[] = [];
    let edited = changed;
    for (const item of value) {
      if (!isForeign(item, ownIds)) {
        kept.push(item);
        continue;
      }
      const decided = await this.#decide(sessionId, item as JsonRpcResponse);
      if (decided !== item) edited = true;
      if (decided !== null) kept.push(decided);
    }
    if (kept.length === 0) return DROP_DATA;
    return edited ? JSON.stringify(kept) : undefined;
  }

  async #decide(sessionId: string, response: JsonRpcResponse): Promise<JsonRpcResponse | null> {
    try {
      const found = await this.#registry.lookup(sessionId, response.id);
      if (!found) return response;
      const decided = await this.#paywall.concludeResumed(found.key, found.record, response);
      if (decided === null) this.#logger.info({ evt: 'priced_response_dropped', tool: found.record.tool, state: found.record.state }, 'a response to a paid call that was not charged was dropped from a stream');
      return decided;
    } catch (error) {
      this.#logger.warn({ evt: 'priced_response_dropped', reason: 'lookup_failed', code: (error as { code?: string }).code }, 'a response could not be checked against the paid calls and was dropped');
      return null;
    }
  }
}

function isForeign(value: unknown, ownIds: readonly JsonRpcId[]): boolean {
  if (!isResponseLike(value)) return false;
  for (const id of ownIds) if (sameId(value.id, id)) return false;
  return true;
}
