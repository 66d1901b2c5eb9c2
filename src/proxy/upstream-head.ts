// The start of an exchange's upstream reply (priced-call.ts, batch-call.ts): the first of the proxy's
// response hook (the head), its error hook and the call's deadline wins; whatever comes after is
// dropped (a head that arrives after the deadline has its body discarded, or goes to `late`).
import type { UpstreamHead } from './call-state.js';
import { discard } from '../io/body.js';
import { classifyUpstreamError, upstreamFailure, type UpstreamFailure } from './upstream-failure.js';

export type Head = { kind: 'head'; head: UpstreamHead } | { kind: 'failed'; failure: UpstreamFailure };

export class HeadRace {
  /** Resolves with the winner; never rejects. */
  readonly head: Promise<Head>;
  /** The call's deadline passed (set by the exchange before it fails the race). */
  expired = false;
  /** Takes a head that arrives after the race was decided (a call that may have created a task: priced-call.ts). */
  late: ((head: UpstreamHead) => void) | null = null;
  #resolve!: (head: Head) => void;
  #settled = false;

  constructor() {
    this.head = new Promise((resolve) => (this.#resolve = resolve));
  }

  onHead(head: UpstreamHead): void {
    if (this.#settled) return this.late ? this.late(head) : discard(head.stream); // the deadline came first
    this.#settled = true;
    this.#resolve({ kind: 'head', head });
  }

  /** An error before any head: past the deadline it is the deadline's headers timeout, else what it was. */
  onError(error: unknown): void {
    if (this.#settled) return;
    this.#settled = true;
    this.#resolve({ kind: 'failed', failure: this.expired ? upstreamFailure('headers_timeout', error, 'the upstream did not answer within upstream.callDeadline') : classifyUpstreamError(error) });
  }
}
