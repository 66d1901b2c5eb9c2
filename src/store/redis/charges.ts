// Charges in the Redis store (SPEC §7): one script per decision on the handle's charges hash
// (charges.lua.ts); outside Cluster mode the same script writes the global indexes, in Cluster mode
// they are written here by companion commands (README.md, "Indexes and Cluster mode"). Dev links
// and orphan payments live as long as charges do.
import { GatewayError } from '../../errors.js';
import { indexMember, parseIndexMember } from '../keys.js';
import { chargeRecordEnd, devLinkEnd, newChargeRecord, OPENING_GRACE_MS, PENDING_REUSE_MARGIN_MS, RETENTION_MS } from '../policy.js';
import type { Attempt, BeginChargeResult, ChargeRecord, ChargeStatus, ClaimResult, DevLink, OpenChargeRequest, OrphanPayment, SettlementClaim } from '../store.js';
import { asArray, LISTING_BUDGET_MS, parseCharge, RedisCore } from './core.js';

/** An unreplicated charge is abandoned and polled again this soon (a payment on it is still granted). */
const FIRST_POLL_AFTER_UNREPLICATED_MS = 3_000;

export class RedisCharges {
  constructor(private readonly core: RedisCore) {}

  async beginCharge(request: OpenChargeRequest): Promise<BeginChargeResult> {
    const { handleHash, sku, nonce, now } = request;
    const charge = newChargeRecord(request);
    const k = this.core.keys.handle(handleHash);
    const member = indexMember(handleHash, nonce);
    const clock = this.core.now();
    const { allCharges, liveCharges } = this.core.keys;
    return this.core.call('beginCharge', async () => {
      const keys = this.core.clustered ? [k.handle, k.charges] : [k.handle, k.charges, allCharges, liveCharges];
      const opKey = this.core.keys.operation(handleHash, 'b', nonce);
      const mark = await this.core.mark(k.handle);
      const [kind, existing] = asArray(await this.core.once('tbBeginCharge', opKey, request.attempt, keys, [sku, nonce, JSON.stringify(charge), now, member, clock, OPENING_GRACE_MS, PENDING_REUSE_MARGIN_MS]));
      if (kind === 'existing') {
        const shared = parseCharge(existing) as ChargeRecord;
        // Its link is about to be shown again: only once this primary's replicas have the record. The
        // op record the script just wrote comes after the link in the replication stream, so WAIT covers
        // it. Without this a primary that resumed after being replaced answered with a link its
        // replacement never had; paid, it was granted nowhere (npm run chaos, Sentinel).
        if (shared.checkoutUrl && !(await this.core.replicated(mark))) {
          this.core.countUnreplicated('charge');
          throw new GatewayError('TB_ERR_STORE_UNAVAILABLE', `the pending charge was not acknowledged by ${this.core.durabilityText()}, so its link is not shown again (store.redis.durability: replicated)`);
        }
        return { kind: 'existing', charge: shared };
      }
      if (this.core.clustered) {
        const ends = chargeRecordEnd(charge);
        await Promise.all([this.core.indexAdd(allCharges, ends, member, ends, clock, 'end'), this.core.indexAdd(liveCharges, ends, member, ends, clock, 'end')]);
      }
      return { kind: 'begun', charge };
    });
  }

  async attachLink(handleHash: string, nonce: string, link: { providerRef: string; checkoutUrl: string }, attempt?: Attempt): Promise<ChargeRecord | null> {
    const k = this.core.keys.handle(handleHash);
    const member = indexMember(handleHash, nonce);
    const refKey = this.core.keys.providerRef(link.providerRef);
    const clock = this.core.now();
    const { dueCharges, liveCharges, allCharges } = this.core.keys;
    return this.core.call('attachLink', async () => {
      const keys = this.core.clustered ? [k.charges, k.handle] : [k.charges, k.handle, dueCharges, liveCharges, allCharges, refKey];
      const opKey = this.core.keys.operation(handleHash, 'a', nonce);
      // Cluster: the provider-ref key and the indexes live in other slots, so they are written first.
      // Once the script makes the charge pending its link can be shown (to this caller, or to a retry
      // that finds it), so a webhook must already be able to find it by its ref; if these writes fail,
      // the charge is still opening and the caller aborts it. Written after, a failed SET left a
      // showable link no webhook could find: its payment became an orphan (`npm run chaos`, Cluster).
      const mark = await this.core.mark(k.handle, refKey, dueCharges, liveCharges, allCharges);
      if (this.core.clustered) await this.indexOpening(handleHash, nonce, refKey, clock);
      const charge = parseCharge(await this.core.once('tbAttachLink', opKey, attempt, keys, [nonce, link.providerRef, link.checkoutUrl, member, clock]));
      // Cluster: the provider-ref key and the reconciler's indexes live in slots of their own; a webhook
      // finds the charge by the first, the reconciler by the second, so each is waited for too.
      if (charge && !(await this.core.replicated(mark))) {
        // A failover could erase this record and leave a link that can be paid and never granted:
        // the link is never shown, and the charge leaves the pending state for good (still polled,
        // so a payment on it is granted all the same).
        this.core.countUnreplicated('charge');
        await this.abandonCharge(handleHash, nonce, clock + FIRST_POLL_AFTER_UNREPLICATED_MS).catch(() => false);
        throw new GatewayError('TB_ERR_STORE_UNAVAILABLE', `the new charge was not acknowledged by ${this.core.durabilityText()}, so its link is not shown (store.redis.durability: replicated)`);
      }
      return charge;
    });
  }

  /** Cluster: a charge's entries outside its slot, from its opening record, as attaching its link will make them. */
  private async indexOpening(handleHash: string, nonce: string, refKey: string, clock: number): Promise<void> {
    const opening = parseCharge(await this.core.client.hget(this.core.keys.handle(handleHash).charges, nonce));
    if (!opening || (opening.status !== 'opening' && opening.status !== 'pending')) return; // the script answers for it
    const member = indexMember(handleHash, nonce);
    const ends = chargeRecordEnd({ ...opening, status: 'pending' });
    const { dueCharges, liveCharges, allCharges } = this.core.keys;
    await Promise.all([
      this.core.indexAdd(dueCharges, opening.nextPollAt, member, ends, clock, ''),
      this.core.indexAdd(liveCharges, ends, member, ends, clock, 'end'),
      this.core.indexAdd(allCharges, ends, member, ends, clock, 'end'),
      this.core.client.set(refKey, member, 'PX', Math.max(1_000, ends - clock)),
    ]);
  }

  async abortCharge(handleHash: string, nonce: string): Promise<void> {
    const k = this.core.keys.handle(handleHash);
    const member = indexMember(handleHash, nonce);
    const { allCharges, liveCharges } = this.core.keys;
    await this.core.call('abortCharge', async () => {
      const keys = this.core.clustered ? [k.handle, k.charges] : [k.handle, k.charges, allCharges, liveCharges];
      const aborted = Number(await this.core.run('tbAbortCharge', keys, [nonce, member, this.core.now()])) === 1;
      if (aborted && this.core.clustered) await Promise.all([this.core.client.zrem(allCharges, member), this.core.client.zrem(liveCharges, member)]);
    });
  }

  async getCharge(handleHash: string, nonce: string): Promise<ChargeRecord | null> {
    const raw = await this.core.call('getCharge', () => this.core.client.hget(this.core.keys.handle(handleHash).charges, nonce));
    return this.liveCharge(parseCharge(raw));
  }

  async findChargeByRef(providerRef: string): Promise<ChargeRecord | null> {
    return this.core.call('findChargeByRef', async () => {
      const target = parseIndexMember((await this.core.client.get(this.core.keys.providerRef(providerRef))) ?? '');
      if (!target) return null;
      const charge = this.liveCharge(parseCharge(await this.core.client.hget(this.core.keys.handle(target.handleHash).charges, target.id)));
      return charge?.providerRef === providerRef ? charge : null;
    });
  }

  async takePollSlot(handleHash: string, nonce: string, now: number, minIntervalMs: number, nextPollAt: number): Promise<boolean> {
    const k = this.core.keys.handle(handleHash);
    const member = indexMember(handleHash, nonce);
    const clock = this.core.now();
    return this.core.call('takePollSlot', async () => {
      const keys = this.core.clustered ? [k.charges] : [k.charges, this.core.keys.dueCharges];
      const [taken, status, ends] = asArray(await this.core.run('tbTakePollSlot', keys, [nonce, now, minIntervalMs, nextPollAt, member, clock]));
      // Cluster: (re)index a polled charge; a claim racing this leaves a member dueCharges drops.
      const polled = status === 'pending' || status === 'abandoned';
      if (Number(taken) === 1 && polled && this.core.clustered) await this.core.indexAdd(this.core.keys.dueCharges, nextPollAt, member, Number(ends), clock, '');
      return Number(taken) === 1;
    });
  }

  async markChargeRead(handleHash: string, nonce: string, polledAt: number): Promise<void> {
    await this.core.call('markChargeRead', () => this.core.run('tbMarkChargeRead', [this.core.keys.handle(handleHash).charges], [nonce, polledAt, this.core.now()]));
  }

  async claimSettlement(claim: SettlementClaim): Promise<ClaimResult> {
    const k = this.core.keys.handle(claim.handleHash);
    const member = indexMember(claim.handleHash, claim.nonce);
    const { dueCharges, liveCharges } = this.core.keys;
    return this.core.call('claimSettlement', async () => {
      const ledgerKeys = [k.handle, k.charges, k.reservations, k.ledger, this.core.keys.handleExpiryOf(claim.handleHash, this.core.clustered)];
      const keys = this.core.clustered ? ledgerKeys : [...ledgerKeys, dueCharges, liveCharges];
      const received = claim.receivedAmount === null ? ['0', ''] : ['1', claim.receivedAmount];
      const args = [claim.nonce, claim.outcome, claim.credits, ...received, member, this.core.now(), this.core.ledgerRetentionMs, claim.handleHash];
      const opKey = this.core.keys.operation(claim.handleHash, 's', claim.nonce);
      const mark = await this.core.mark(k.handle);
      const [claimed, raw, balance] = asArray(await this.core.once('tbClaimSettlement', opKey, claim.attempt, keys, args));
      if (Number(claimed) === 1 && this.core.clustered) await Promise.all([this.core.client.zrem(dueCharges, member), this.core.client.zrem(liveCharges, member)]);
      if (Number(claimed) === 1 && !(await this.core.replicated(mark))) {
        // Treated as not done: nobody is told of the grant. The claim is idempotent by the charge's
        // nonce, so the reconciler's next read grants it once, here or on a promoted replica.
        this.core.countUnreplicated('claim');
        throw new GatewayError('TB_ERR_STORE_UNAVAILABLE', `the settlement was not acknowledged by ${this.core.durabilityText()}: it counts as not done until the reconciler reads the charge again`);
      }
      return { claimed: Number(claimed) === 1, charge: parseCharge(raw), balance: Number(balance) };
    });
  }

  async abandonCharge(handleHash: string, nonce: string, nextPollAt: number): Promise<boolean> {
    const k = this.core.keys.handle(handleHash);
    const member = indexMember(handleHash, nonce);
    const { dueCharges, liveCharges } = this.core.keys;
    const clock = this.core.now();
    return this.core.call('abandonCharge', async () => {
      const keys = this.core.clustered ? [k.handle, k.charges] : [k.handle, k.charges, dueCharges, liveCharges];
      const ends = Number(await this.core.run('tbAbandonCharge', keys, [nonce, member, clock, nextPollAt]));
      // Cluster: it stays due (late payments); a lost ZADD is restored by the next takePollSlot of a retry.
      if (ends > 0 && this.core.clustered) await Promise.all([this.core.indexAdd(dueCharges, nextPollAt, member, ends, clock, ''), this.core.client.zrem(liveCharges, member)]);
      return ends > 0;
    });
  }

  async expireCharge(handleHash: string, nonce: string, now: number): Promise<boolean> {
    const k = this.core.keys.handle(handleHash);
    const member = indexMember(handleHash, nonce);
    const { dueCharges, liveCharges, allCharges } = this.core.keys;
    const clock = this.core.now();
    return this.core.call('expireCharge', async () => {
      const keys = this.core.clustered ? [k.handle, k.charges] : [k.handle, k.charges, dueCharges, liveCharges, allCharges];
      const charge = parseCharge(await this.core.run('tbExpireCharge', keys, [nonce, member, now, clock]));
      if (!charge) return false;
      const ends = chargeRecordEnd(charge);
      const companions: Promise<unknown>[] = [];
      // The provider-ref key lives in its own slot: extended beside the script (a webhook may still name the link).
      if (charge.providerRef) companions.push(this.core.client.pexpireat(this.core.keys.providerRef(charge.providerRef), ends));
      if (this.core.clustered) companions.push(this.core.client.zrem(dueCharges, member), this.core.client.zrem(liveCharges, member), this.core.indexAdd(allCharges, ends, member, ends, clock, 'end'));
      await Promise.all(companions);
      return true;
    });
  }

  async dueCharges(now: number, limit: number): Promise<ChargeRecord[]> {
    if (limit <= 0) return [];
    const index = this.core.keys.dueCharges;
    return this.core.call(
      'dueCharges',
      async () => {
        const members = await this.core.client.zrangebyscore(index, '-inf', now, 'LIMIT', 0, limit);
        const charges = await this.readCharges(members);
        // Members whose charge is gone or no longer polled (possible in Cluster mode) are dropped.
        const polled = (charge: ChargeRecord | null): charge is ChargeRecord => charge?.status === 'pending' || charge?.status === 'abandoned';
        const stale = members.filter((_, i) => !polled(charges[i] ?? null));
        if (stale.length > 0) await this.core.client.zrem(index, ...stale);
        return charges
          .filter((charge): charge is ChargeRecord => polled(charge) && charge.nextPollAt <= now)
          .sort((a, b) => a.nextPollAt - b.nextPollAt);
      },
      LISTING_BUDGET_MS,
    );
  }

  async listCharges(status?: ChargeStatus): Promise<ChargeRecord[]> {
    const clock = this.core.now();
    return this.core.call(
      'listCharges',
      async () => {
        const members = await this.core.client.zrangebyscore(this.core.keys.allCharges, `(${clock}`, '+inf');
        return (await this.readCharges(members))
          .filter((charge): charge is ChargeRecord => charge !== null && (status === undefined || charge.status === status))
          .sort((a, b) => a.openedAt - b.openedAt);
      },
      LISTING_BUDGET_MS,
    );
  }

  async countPendingCharges(): Promise<number> {
    const clock = this.core.now();
    return this.core.call('countPendingCharges', () => this.core.client.zcount(this.core.keys.liveCharges, `(${clock}`, '+inf'));
  }

  async putDevLink(link: DevLink): Promise<void> {
    const ttl = Math.max(1_000, devLinkEnd(link) - this.core.now());
    await this.core.call('putDevLink', () => this.core.client.set(this.core.keys.devLink(link.id), JSON.stringify(link), 'PX', ttl));
  }

  async getDevLink(id: string): Promise<DevLink | null> {
    const raw = await this.core.call('getDevLink', () => this.core.client.get(this.core.keys.devLink(id)));
    return raw === null ? null : (JSON.parse(raw) as DevLink);
  }

  async payDevLink(id: string, receivedAmount: string): Promise<boolean> {
    return Number(await this.core.call('payDevLink', () => this.core.run('tbPayDevLink', [this.core.keys.devLink(id)], [receivedAmount, this.core.now()]))) === 1;
  }

  async recordOrphanPayment(orphan: OrphanPayment): Promise<boolean> {
    const key = this.core.keys.orphanPayments;
    return this.core.call('recordOrphanPayment', async () => {
      const added = await this.core.client.hsetnx(key, orphan.providerRef, JSON.stringify(orphan));
      await this.core.client.pexpire(key, RETENTION_MS); // the hash lives as long as its newest orphan
      return added === 1;
    });
  }

  async listOrphanPayments(): Promise<OrphanPayment[]> {
    const now = this.core.now();
    const values = await this.core.call('listOrphanPayments', () => this.core.client.hvals(this.core.keys.orphanPayments), LISTING_BUDGET_MS);
    return values.map((raw) => JSON.parse(raw) as OrphanPayment).filter((orphan) => orphan.noticedAt + RETENTION_MS > now).sort((a, b) => a.noticedAt - b.noticedAt);
  }

  /** Reads the charges named by index members, in order; null where a charge is gone. */
  private async readCharges(members: string[]): Promise<(ChargeRecord | null)[]> {
    return Promise.all(
      members.map(async (member) => {
        const target = parseIndexMember(member);
        if (!target) return null;
        return this.liveCharge(parseCharge(await this.core.client.hget(this.core.keys.handle(target.handleHash).charges, target.id)));
      }),
    );
  }

  /** A charge past its end (link expiry + retention) reads as gone, as in the memory store. */
  private liveCharge(charge: ChargeRecord | null): ChargeRecord | null {
    return charge && chargeRecordEnd(charge) > this.core.now() ? charge : null;
  }
}
