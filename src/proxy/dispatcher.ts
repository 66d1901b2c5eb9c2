// The dispatcher reply-from forwards through (it accepts any object with `request(opts, callback)`):
// the target's own (an Agent for an HTTP upstream, the bridge's for a stdio one), plus one thing
// reply-from has no option for — each upstream request gets its call's abort signal, so a free call
// whose client goes away and a priced call at its deadline are aborted before the upstream's headers
// too (reply-from only destroys a response once it has one). And no idle timeouts, whatever the
// target's own dispatcher defaults to (SPEC §5.2: a stream may be quiet for hours; a priced call's
// deadline is the gateway's timer). docs/decisions.md, "The proxy".
import type { Dispatcher } from 'undici';
import { kCall, type McpCall } from './call-state.js';

type RequestOptions = Dispatcher.RequestOptions & { headers?: Record<string | symbol, unknown>; signal?: unknown; headersTimeout?: number | null; bodyTimeout?: number | null };

export class CallDispatcher {
  readonly #inner: Dispatcher;
  readonly #now: () => number;

  constructor(inner: Dispatcher, now: () => number) {
    this.#inner = inner;
    this.#now = now;
  }

  request(options: RequestOptions, callback: (error: Error | null, data: Dispatcher.ResponseData) => void): void {
    // reply-from passes both as undefined when no per-request timeout is set: 0 means none.
    options.headersTimeout ??= 0;
    options.bodyTimeout ??= 0;
    const call = options.headers?.[kCall] as McpCall | undefined;
    if (call) {
      options.signal = call;
      call.forwardedAt = this.#now();
      // Tracing on: the upstream CLIENT span, and `traceparent` naming it in the headers sent.
      if (call.trace !== null) callback = call.trace.forward(options, callback);
    }
    this.#inner.request(options as Dispatcher.RequestOptions, callback);
  }
}
