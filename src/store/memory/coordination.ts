// What replicas coordinate on, in the memory store: per-client challenge token buckets, the
// reconciler lease, claimed provider events (webhook replay, §20) and sessions bound to principals
// (SPEC §20: session hash → owner; no await between the look-up and the write, so the first binding
// wins; expired bindings are dropped on access and by the periodic sweep).
import { newBucket, takeToken, type BucketParams } from '../policy.js';
import { MemoryCore } from './core.js';

export class MemoryCoordination {
  constructor(private readonly core: MemoryCore) {}

  async takeChallengeToken(clientKey: string, bucket: BucketParams): Promise<{ allowed: boolean; retryAfterMs: number }> {
    const now = this.core.now();
    let state = this.core.challengeBuckets.get(clientKey);
    if (!state) this.core.challengeBuckets.set(clientKey, (state = newBucket(bucket.burst, now)));
    const retryAfterMs = takeToken(state, bucket, now);
    return { allowed: retryAfterMs === 0, retryAfterMs };
  }

  async acquireLease(name: string, owner: string, ttlMs: number): Promise<boolean> {
    const now = this.core.now();
    const lease = this.core.leases.get(name);
    if (lease && lease.owner !== owner && lease.expiresAt > now) return false;
    this.core.leases.set(name, { owner, expiresAt: now + ttlMs });
    return true;
  }

  async claimEvent(source: string, eventId: string, ttlMs: number): Promise<boolean> {
    const now = this.core.now();
    const key = `${source}\n${eventId}`;
    const forgetAt = this.core.events.get(key);
    if (forgetAt !== undefined && forgetAt > now) return false;
    this.core.events.set(key, now + ttlMs);
    return true;
  }

  async bindSession(sessionHash: string, principal: string, ttlMs: number): Promise<string> {
    const now = this.core.now();
    const bound = this.liveSessionOwner(sessionHash, now);
    if (bound) return bound.principal;
    this.core.sessionOwners.set(sessionHash, { principal, expiresAt: now + ttlMs });
    return principal;
  }

  async sessionPrincipal(sessionHash: string, ttlMs: number): Promise<string | null> {
    const now = this.core.now();
    const bound = this.liveSessionOwner(sessionHash, now);
    if (!bound) return null;
    bound.expiresAt = now + ttlMs;
    return bound.principal;
  }

  private liveSessionOwner(sessionHash: string, now: number): { principal: string; expiresAt: number } | null {
    const bound = this.core.sessionOwners.get(sessionHash);
    if (!bound) return null;
    if (bound.expiresAt > now) return bound;
    this.core.sessionOwners.delete(sessionHash);
    return null;
  }
}
