// The durable outbox (SPEC §21; docs/operations.md "Outbox"): records whose money already moved outside
// the store — today an x402 settlement the facilitator executed — are written to the store when it is up,
// and otherwise to a local file (store/outbox-file.ts) that is retried until the store has it. Each store
// write is idempotent by the record's reference (store/redis/x402.lua.ts), so a record written twice — a lost
// reply, two processes draining one directory, a restart between the write and the file's removal — is
// stored once. Every process drains its own directory on its own timer (not the reconciler's lease: a
// replica's files are on its own disk), from start-up on, so a restart while the store is down loses
// nothing: the files are read again at the next start.
import { type Clock, type ClockTimer } from '../clock.js';
import type { Logger } from '../observability/logger.js';
import { OutboxFiles, type OutboxEntry } from './outbox-file.js';
import type { Store, X402SettlementRecord } from './store.js';

export type OutboxRecord = { kind: 'x402_settle'; record: X402SettlementRecord };

export interface OutboxDeps {
  store: Pick<Store, 'recordX402Settlement'>;
  /** Where records wait (outboxDirFor); null: no local file (the memory store dies with the process anyway). */
  dir: string | null;
  logger: Logger;
  clock: Clock;
  /** Called with the number of records waiting in the file whenever it changes (tollbooth_outbox_pending). */
  onDepth?: (pending: number) => void;
}

/** The first retry after a failed write; doubled per failed drain, up to MAX_RETRY_MS. */
const FIRST_RETRY_MS = 1_000;
const MAX_RETRY_MS = 30_000;

export class Outbox {
  readonly #deps: OutboxDeps;
  readonly #files: OutboxFiles | null;
  /** File names waiting, as this process knows them. */
  readonly #pending = new Set<string>();
  #timer: ClockTimer | null = null;
  #retryMs = FIRST_RETRY_MS;
  #draining: Promise<void> | null = null;
  #closed = false;

  constructor(deps: OutboxDeps) {
    this.#deps = deps;
    this.#files = deps.dir === null ? null : new OutboxFiles(deps.dir);
  }

  get pending(): number {
    return this.#pending.size;
  }

  /** Reads what an earlier run left in the file and starts draining it. */
  async start(): Promise<void> {
    if (!this.#files) return;
    const { entries, unreadable } = await this.#files.list();
    for (const name of unreadable) this.#deps.logger.error({ evt: 'outbox_unreadable', file: name, dir: this.#files.dir }, 'an outbox file could not be read and is left in place: move it aside after checking it by hand (docs/operations.md, Outbox)');
    for (const { name } of entries) this.#pending.add(name);
    this.#depthChanged();
    if (entries.length > 0) {
      this.#deps.logger.warn({ evt: 'outbox_loaded', pending: entries.length }, 'records left in the outbox by an earlier run are being written to the store');
      this.#schedule(0);
    }
  }

  /**
   * Stores the record now if the store takes it ('stored'), else writes it to the local file and retries
   * it from there ('queued'). Rejects only when neither worked (no file, or the file could not be written).
   */
  async submit(record: OutboxRecord): Promise<'stored' | 'queued'> {
    try {
      await this.#write(record);
      return 'stored';
    } catch (error) {
      if (!this.#files) throw error;
      const name = await this.#files.write(entryOf(record, this.#deps.clock.now()));
      this.#pending.add(name);
      this.#depthChanged();
      this.#deps.logger.warn({ evt: 'outbox_queued', kind: record.kind, pending: this.#pending.size, code: (error as { code?: string }).code }, 'the store could not take a payment record: it waits in the outbox file and is retried until stored');
      this.#schedule(this.#retryMs);
      return 'queued';
    }
  }

  /** One pass over the waiting records, oldest first; stops at the first the store refuses. Resolves with the number still waiting. */
  async drain(): Promise<number> {
    this.#draining ??= this.#drainOnce().finally(() => (this.#draining = null));
    await this.#draining;
    return this.#pending.size;
  }

  /** Stops retrying; what is waiting stays in the file for the next start. */
  close(): void {
    this.#closed = true;
    if (this.#timer) this.#deps.clock.clearTimeout(this.#timer);
    this.#timer = null;
  }

  async #drainOnce(): Promise<void> {
    const files = this.#files;
    if (!files || this.#pending.size === 0) return;
    const { entries } = await files.list();
    const known = new Set(entries.map(({ name }) => name));
    for (const name of this.#pending) if (!known.has(name)) this.#pending.delete(name); // another process on this directory stored it
    for (const { name, entry } of entries) {
      this.#pending.add(name);
      try {
        await this.#write({ kind: entry.kind, record: entry.record });
      } catch (error) {
        this.#depthChanged();
        this.#retryMs = Math.min(this.#retryMs * 2, MAX_RETRY_MS);
        this.#deps.logger.debug({ evt: 'outbox_retry', pending: this.#pending.size, code: (error as { code?: string }).code }, 'the store still refuses the outbox records; retrying');
        this.#schedule(this.#retryMs);
        return;
      }
      await files.remove(name);
      this.#pending.delete(name);
      this.#deps.logger.info({ evt: 'outbox_stored', kind: entry.kind, queuedAt: entry.queuedAt, pending: this.#pending.size }, 'a payment record waiting in the outbox was written to the store');
    }
    this.#retryMs = FIRST_RETRY_MS;
    this.#depthChanged();
  }

  async #write(record: OutboxRecord): Promise<void> {
    await this.#deps.store.recordX402Settlement(record.record);
  }

  #schedule(ms: number): void {
    if (this.#closed || this.#timer) return;
    this.#timer = this.#deps.clock.setTimeout(() => {
      this.#timer = null;
      this.drain().catch((error: unknown) => {
        this.#deps.logger.error({ evt: 'outbox_retry', code: (error as { code?: string }).code }, 'the outbox file could not be read or updated; retrying');
        this.#schedule(MAX_RETRY_MS);
      });
    }, ms);
    this.#timer.unref();
  }

  #depthChanged(): void {
    this.#deps.onDepth?.(this.#pending.size);
  }
}

function entryOf(record: OutboxRecord, now: number): OutboxEntry {
  const { network, asset, payer, nonce } = record.record;
  return { v: 1, kind: record.kind, ref: `${network}:${asset}:${payer}:${nonce}`.toLowerCase(), queuedAt: now, record: record.record };
}
