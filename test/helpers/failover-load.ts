// The failover runs' workload and their count from outside (SPEC §21 "After any failover"), shared by
// the Sentinel and Cluster runs. Two store instances stand for two gateway replicas; each paid call
// is what the gateway does on the store for it (reserve before forwarding, commit after the answer:
// the result is delivered only when the commit answered), and payments land meanwhile (a charge is
// opened, its link shown only once attachLink answered, the provider then reports it paid and the
// payer's retry claims it). Afterwards a reconciler pass reads every paid charge again, and the
// ledger is counted.
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { verifyLedger } from '../../src/ledger/verify.js';
import type { RedisStore } from '../../src/store/redis.js';

const HOUR = 3_600_000;
const SKU = 'research';
const SNAPSHOT = { label: 'pack', amount: '5.00', currency: 'USD', credits: 10, tool: 'fetch_readable' };

export interface FailoverCount {
  seconds: number;
  /** Paid calls whose result was delivered (their commit answered), and per second. */
  delivered: number;
  deliveredPerSecond: number;
  /** Paid calls refused because the store failed (nothing delivered). */
  refused: number;
  /** Links shown to payers, all paid at the provider. */
  paid: number;
  /** Spend entries in the ledger; delivered results without one. */
  spends: number;
  uncovered: number;
  /** Commits WAIT did not see replicated (the exceptions the contract allows). */
  unreplicatedCommits: number;
  /** Paid charges granted exactly once / not at all / more than once (grant entries with credits per nonce). */
  grantedOnce: number;
  notGranted: number;
  grantedTwice: number;
  /** Paid charges whose record a failover erased (shown, paid, unknown to the store). */
  erasedCharges: number;
  verifyMismatches: number;
}

export async function runFailoverLoad(options: {
  stores: RedisStore[];
  /** Runs the failovers while the load goes on; resolves when they are done. */
  failovers: () => Promise<void>;
  workers: number;
  handles: number;
}): Promise<FailoverCount> {
  const { stores } = options;
  const first = stores[0] as RedisStore;
  const handles: string[] = [];
  for (let i = 0; i < options.handles; i++) {
    const handleHash = `f${randomBytes(8).toString('hex')}`;
    await first.createHandle({ handleHash, fingerprint: `tb_s_${handleHash.slice(1, 5)}..${handleHash.slice(5, 9)}`, principal: null, ttlMs: HOUR });
    await first.grantCredits(handleHash, SKU, 1_000_000);
    handles.push(handleHash);
  }
  const delivered = new Map<string, number>(handles.map((h) => [h, 0]));
  const paid: { handleHash: string; nonce: string }[] = [];
  let refused = 0;
  let running = true;
  let n = 0;
  const started = performance.now();

  const paidCalls = async (worker: number): Promise<void> => {
    const store = stores[worker % stores.length] as RedisStore;
    while (running) {
      const handleHash = handles[n++ % handles.length] as string;
      const reservationId = randomBytes(9).toString('base64url');
      try {
        const decision = await store.reserve({ handleHash, principal: null, sku: SKU, cost: 1, reservationId, reservationDeadline: Date.now() + 30_000, ttlMs: HOUR, bucket: null });
        if (decision.kind !== 'reserved') throw new Error(decision.kind);
        if ((await store.commit(handleHash, reservationId, 'fetch_readable')) === null) throw new Error('reservation gone');
        delivered.set(handleHash, (delivered.get(handleHash) ?? 0) + 1);
      } catch {
        refused++;
        await sleep(20); // a client backing off while the store fails over
      }
    }
  };

  const payments = async (worker: number): Promise<void> => {
    const store = stores[worker % stores.length] as RedisStore;
    while (running) {
      const handleHash = handles[n++ % handles.length] as string;
      const nonce = randomBytes(12).toString('base64url');
      try {
        const begun = await store.beginCharge({ handleHash, sku: 'pack', nonce, snapshot: SNAPSHOT, now: Date.now(), ttlMs: 30 * 60_000, firstPollDelayMs: 3_000 });
        if (begun.kind === 'begun' && (await store.attachLink(handleHash, nonce, { providerRef: `ref-${nonce}`, checkoutUrl: `https://pay.test/${nonce}` }))) {
          paid.push({ handleHash, nonce }); // shown, so the payer pays it
          await store.claimSettlement({ handleHash, nonce, outcome: 'settled', credits: 10, receivedAmount: '5' }).catch(() => undefined);
        }
      } catch {
        await sleep(20);
      }
      await sleep(50);
    }
  };

  const load = [...Array.from({ length: options.workers }, (_, i) => paidCalls(i)), payments(0), payments(1)];
  await options.failovers();
  running = false;
  await Promise.all(load);
  const seconds = (performance.now() - started) / 1000;

  // The reconciler: every charge the provider reports paid is read again and claimed (idempotent by nonce).
  let erasedCharges = 0;
  for (const { handleHash, nonce } of paid) {
    for (let attempt = 0; ; attempt++) {
      try {
        const claim = await first.claimSettlement({ handleHash, nonce, outcome: 'settled', credits: 10, receivedAmount: '5' });
        if (!claim.charge) erasedCharges++;
        break;
      } catch (error) {
        if (attempt > 20) throw error;
        await sleep(100);
      }
    }
  }

  let spends = 0;
  let uncovered = 0;
  const grants = new Map<string, number>();
  for (const handleHash of handles) {
    const entries = await first.readLedger({ kind: 'handle', handleHash }, { limit: 10_000_000 });
    const spent = entries.filter((entry) => entry.kind === 'spend').length;
    spends += spent;
    uncovered += Math.max(0, (delivered.get(handleHash) ?? 0) - spent);
    for (const entry of entries) if (entry.kind === 'grant' && entry.credits > 0 && entry.ref) grants.set(entry.ref, (grants.get(entry.ref) ?? 0) + 1);
  }
  const grantCounts = paid.map(({ nonce }) => grants.get(nonce) ?? 0);
  const report = await verifyLedger(first, () => undefined);
  const total = [...delivered.values()].reduce((a, b) => a + b, 0);
  return {
    seconds,
    delivered: total,
    deliveredPerSecond: Math.round(total / seconds),
    refused,
    paid: paid.length,
    spends,
    uncovered,
    unreplicatedCommits: stores.reduce((sum, store) => sum + (store.unreplicatedWrites().commit ?? 0), 0),
    grantedOnce: grantCounts.filter((c) => c === 1).length,
    notGranted: grantCounts.filter((c) => c === 0).length,
    grantedTwice: grantCounts.filter((c) => c > 1).length,
    erasedCharges,
    verifyMismatches: report.mismatches,
  };
}
