// Ledger reads and the expiry step in the Redis store (SPEC §17; README.md, "Ledger"). Entries are
// written by the scripts that move credits; what is here reads them, and runs the expiry step
// (ledger.lua.ts) that writes `expire` entries before a handle's keys vanish.
import type { Cluster } from 'ioredis';
import { tagValue } from '../keys.js';
import { parseStreamEntry, parseStreamId, streamBounds, type StreamItem } from '../ledger-stream.js';
import { SLOT_COUNT } from '../slots.js';
import type { LedgerAccount, LedgerCheckpoint, LedgerEntry, LedgerHolding, LedgerRange } from '../store.js';
import { ADMIN_SCAN_BUDGET_MS, asArray, LISTING_BUDGET_MS, PIPELINE_CHUNK, RedisCore, slotsByMaster, walkSlice } from './core.js';

/** Cluster expiry step: handle-expiry shards read per pass (all 16 384 every 16 passes). */
const EXPIRY_WALK_SLICE = 1_024;

export class RedisLedgerReads {
  /** Cluster expiry step: the first slot of the next slice of its rotating walk over the handle-expiry shards. */
  private expiryWalkCursor = 0;

  constructor(private readonly core: RedisCore) {}

  async expireHandles(now: number, limit: number): Promise<number> {
    if (limit <= 0) return 0;
    return this.core.call(
      'expireHandles',
      async () => {
        const due = this.core.clustered ? await this.expiredInShards(now, limit) : await this.core.client.zrangebyscore(this.core.keys.handleExpiry, '-inf', now, 'LIMIT', 0, limit);
        const ended = await Promise.all(
          due.map(async (handleHash) => {
            const k = this.core.keys.handle(handleHash);
            const keys = [k.handle, k.reservations, k.ledger, this.core.keys.handleExpiryOf(handleHash, this.core.clustered), this.core.keys.reservationIndexOf(handleHash, this.core.clustered)];
            const mark = await this.core.mark(k.handle);
            const [done] = asArray(await this.core.run('tbExpireHandle', keys, [handleHash, now, this.core.ledgerRetentionMs]));
            if (Number(done) !== 1) return 0;
            if (!(await this.core.replicated(mark))) await this.core.reportUnreplicated('expire', handleHash);
            return 1;
          }),
        );
        return ended.reduce<number>((sum, one) => sum + one, 0);
      },
      LISTING_BUDGET_MS,
    );
  }

  async ledgerTail(handleHash: string, count: number): Promise<LedgerEntry[]> {
    if (count <= 0) return [];
    const items = await this.core.call('ledgerTail', () => this.core.client.xrevrange(this.core.keys.handle(handleHash).ledger, '+', '-', 'COUNT', count));
    return (items as StreamItem[]).map(parseStreamEntry).reverse();
  }

  async *ledgerAccounts(options: { unledgeredHandles?: boolean } = {}): AsyncIterable<LedgerAccount> {
    // SCAN may return a key more than once (a rehash during the walk): each account is yielded once,
    // or verify and export count its entries twice (seen: 2,001 accounts and 100,050 entries for 2,000
    // and 100,000, test/ledger/export-memory). The set holds one string per account, not per entry.
    const seen = new Set<string>();
    const firstTime = (key: string): boolean => {
      if (seen.has(key)) return false;
      seen.add(key);
      return true;
    };
    for (const node of this.core.masters()) {
      for await (const keys of this.core.scan(node, this.core.keys.ledgerPattern)) {
        for (const key of keys) {
          const handleHash = tagValue(key, 'h');
          if (handleHash && firstTime(`h:${handleHash}`)) yield { kind: 'handle', handleHash };
        }
      }
      for await (const keys of this.core.scan(node, this.core.keys.paymentLedgerPattern)) {
        for (const key of keys) {
          const payer = tagValue(key, 'x402');
          if (payer && firstTime(`x402:${payer}`)) yield { kind: 'payer', payer };
        }
      }
      if (!options.unledgeredHandles) continue;
      for await (const keys of this.core.scan(node, this.core.keys.handlePattern)) {
        // A handle's ledger lives in its slot, so on this node: one pipelined EXISTS per batch.
        const hashes = keys.map((key) => tagValue(key, 'h')).filter((hash): hash is string => hash !== null && firstTime(`h:${hash}`));
        const pipeline = node.pipeline();
        for (const handleHash of hashes) pipeline.exists(this.core.keys.handle(handleHash).ledger);
        const replies = await this.core.call('ledgerAccounts', async () => (await pipeline.exec()) ?? [], ADMIN_SCAN_BUDGET_MS);
        for (const [i, handleHash] of hashes.entries()) {
          const [error, exists] = replies[i] ?? [null, 1];
          if (!error && Number(exists) === 0) yield { kind: 'handle', handleHash };
        }
      }
    }
  }

  async ledgerCheckpoint(account: LedgerAccount): Promise<LedgerCheckpoint | null> {
    if (account.kind === 'payer') {
      const [last] = (await this.core.call('ledgerCheckpoint', () => this.core.client.xrevrange(this.core.keys.paymentLedger(account.payer), '+', '-', 'COUNT', 1))) as StreamItem[];
      if (!last) return null;
      const entry = parseStreamEntry(last);
      return { account, fingerprint: '', lastSeq: entry.seq, lastAt: entry.at, holdings: {} };
    }
    const k = this.core.keys.handle(account.handleHash);
    const [lastId, fingerprint, ...flat] = asArray(await this.core.call('ledgerCheckpoint', () => this.core.run('tbLedgerCheckpoint', [k.handle, k.reservations, k.ledger], [])));
    const holdings: Record<string, LedgerHolding> = {};
    for (let i = 0; i + 2 < flat.length; i += 3) holdings[String(flat[i])] = { balance: Number(flat[i + 1]), reserved: Number(flat[i + 2]) };
    if (typeof lastId !== 'string' && Object.keys(holdings).length === 0) return null;
    const [lastAt, lastSeq] = typeof lastId === 'string' ? parseStreamId(lastId) : [0, 0];
    return { account, fingerprint: String(fingerprint ?? ''), lastSeq, lastAt, holdings };
  }

  async readLedger(account: LedgerAccount, range: LedgerRange): Promise<LedgerEntry[]> {
    if (range.limit <= 0) return [];
    const key = account.kind === 'handle' ? this.core.keys.handle(account.handleHash).ledger : this.core.keys.paymentLedger(account.payer);
    const [start, end] = streamBounds(range);
    const items = await this.core.call('readLedger', () => this.core.client.xrange(key, start, end, 'COUNT', range.limit), LISTING_BUDGET_MS);
    return (items as StreamItem[]).map(parseStreamEntry);
  }

  /**
   * Cluster: handles due for the expiry step, from the next EXPIRY_WALK_SLICE handle-expiry shards of
   * a rotating walk over all 16 384 slots (each master asked about its own slots, pipelined). The
   * grace period (days) dwarfs a full walk (16 passes of the reconciler's ≤ 3 s tick), so no
   * directory is needed as for reservations.
   */
  private async expiredInShards(now: number, limit: number): Promise<string[]> {
    const cluster = this.core.client as Cluster;
    const slots = walkSlice(this.expiryWalkCursor, EXPIRY_WALK_SLICE);
    this.expiryWalkCursor = (this.expiryWalkCursor + EXPIRY_WALK_SLICE) % SLOT_COUNT;
    const byNode = slotsByMaster(cluster, slots);
    const found: string[] = [];
    await Promise.all(
      [...byNode].map(async ([node, nodeSlots]) => {
        for (let start = 0; start < nodeSlots.length; start += PIPELINE_CHUNK) {
          const pipeline = node.pipeline();
          for (const slot of nodeSlots.slice(start, start + PIPELINE_CHUNK)) pipeline.zrangebyscore(this.core.keys.handleExpiryShard(slot), '-inf', now, 'LIMIT', 0, limit);
          // A slot that moved since the slot map was read answers MOVED: it is read on a later walk.
          for (const [error, reply] of (await pipeline.exec()) ?? []) if (!error && Array.isArray(reply)) found.push(...(reply as string[]));
        }
      }),
    );
    return found.slice(0, limit);
  }
}
