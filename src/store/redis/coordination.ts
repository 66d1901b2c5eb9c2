// What replicas coordinate on, in the Redis store: per-client challenge token buckets, the
// reconciler lease, claimed provider events (a plain SET NX PX) and sessions bound to principals
// (SPEC §20: one string key per session hash, its own slot; each call is one script on one key).
// The scripts are in coordination.lua.ts.
import { RedisCore } from './core.js';

export class RedisCoordination {
  constructor(private readonly core: RedisCore) {}

  async takeChallengeToken(clientKey: string, bucket: { ratePerSecond: number; burst: number }): Promise<{ allowed: boolean; retryAfterMs: number }> {
    const wait = await this.core.call('takeChallengeToken', () => this.core.run('tbTakeChallengeToken', [this.core.keys.challengeBucket(clientKey)], [bucket.ratePerSecond, bucket.burst]));
    return { allowed: Number(wait) === 0, retryAfterMs: Number(wait) };
  }

  async acquireLease(name: string, owner: string, ttlMs: number): Promise<boolean> {
    return Number(await this.core.call('acquireLease', () => this.core.run('tbAcquireLease', [this.core.keys.lease(name)], [owner, Math.max(1, Math.ceil(ttlMs))]))) === 1;
  }

  async claimEvent(source: string, eventId: string, ttlMs: number): Promise<boolean> {
    const key = this.core.keys.event(source, eventId);
    const set = await this.core.call('claimEvent', () => this.core.client.set(key, '1', 'PX', Math.max(1, Math.ceil(ttlMs)), 'NX'));
    return set === 'OK';
  }

  async bindSession(sessionHash: string, principal: string, ttlMs: number): Promise<string> {
    const owner = await this.core.call('bindSession', () => this.core.run('tbBindSession', [this.core.keys.sessionOwner(sessionHash)], [principal, Math.max(1, Math.ceil(ttlMs))]));
    return String(owner);
  }

  async sessionPrincipal(sessionHash: string, ttlMs: number): Promise<string | null> {
    const owner = await this.core.call('sessionPrincipal', () => this.core.run('tbSessionPrincipal', [this.core.keys.sessionOwner(sessionHash)], [Math.max(1, Math.ceil(ttlMs))]));
    return typeof owner === 'string' ? owner : null;
  }
}
