// What a process remembers to keep SPEC §6.5 across config generations (SPEC §21; docs/decisions.md
// "Reload memory"): the priced-request registry (paid and released request ids per session) and the call
// deadlines of paid calls still pending. A reload builds a new gateway; both of these are handed to every
// gateway the process builds, so a call forwarded under the old config is still refused-by-id, concluded
// by a resumed stream, and released at its deadline once its gateway has drained and closed.
import type { Clock } from '../clock.js';
import { DeadlineQueue } from '../proxy/deadlines.js';
import { PricedRequests } from '../proxy/priced-requests.js';
import type { Store } from '../store/store.js';

export interface RequestMemory {
  registry: PricedRequests;
  deadlines: DeadlineQueue;
}

/** One per process (start.ts); `close` at shutdown, after the last gateway closed. */
export function createRequestMemory(store: Store, clock: Clock): RequestMemory & { close(): void } {
  const deadlines = new DeadlineQueue(clock);
  return { registry: new PricedRequests({ store, now: clock.now }), deadlines, close: () => deadlines.close() };
}
