// Budget and allowance counters of the single-process store (SPEC §23). Like the rest of the memory
// store, every method runs to completion without an `await`, so each is one atomic step. The layout
// mirrors the Redis store's (redis/quotas.ts): counters and hold parts are addressed by subject, a
// hold keeps one part per subject it draws on, and concluding or sweeping works part by part, so
// both stores give the same answers (test/store/quota-conformance.ts).
import { OP_RECORD_TTL_MS } from '../policy.js';
import { bySubject, checkDraw, counterEnd, counterField, QUOTA_GRACE_MS, windowEnd, withinCaps } from '../quota-policy.js';
import type { Attempt, HeldQuotas, QuotaCounter, QuotaDecision, QuotaDraw, QuotaRequest, QuotaUsage } from '../store.js';

const SWEEP_INTERVAL_MS = 60_000;

/** What one counter has used in its window: committed draws plus held ones. */
interface Counter {
  calls: number;
  credits: number;
  endsAt: number;
}

/** The draws one hold made on one subject's counters (field → draw), until `deadline`. */
interface HoldPart {
  deadline: number;
  draws: Map<string, { calls: number; credits: number }>;
  /** When the part is forgotten even if nobody concluded it (the counters it drew on are gone by then). */
  endsAt: number;
}

/** What a reserve decided to draw, part by part (those already here left out), before it draws. */
export interface QuotaPlan {
  kind: 'plan';
  holdId: string;
  deadline: number;
  parts: [string, QuotaDraw[]][];
}

const scoped = (subject: string, id: string): string => `${subject}\n${id}`;

export class MemoryQuotas {
  private readonly counters = new Map<string, Counter>();
  private readonly holds = new Map<string, HoldPart>();
  private readonly operations = new Map<string, { attempt: Attempt; reply: unknown; until: number }>();
  private nextSweepAt: number;

  constructor(private readonly clock: () => number) {
    this.nextSweepAt = clock() + SWEEP_INTERVAL_MS;
  }

  async reserveQuotas(request: QuotaRequest): Promise<QuotaDecision> {
    for (const draw of request.draws) checkDraw(draw);
    return this.once(`r:${request.holdId}`, request.attempt, () => this.reserveNow(request));
  }

  async concludeQuotas(holdId: string, counters: QuotaCounter[], outcome: 'commit' | 'release', attempt?: Attempt): Promise<void> {
    this.once(`c:${holdId}`, attempt, () => {
      this.concludeNow({ holdId, counters }, outcome);
      return 1;
    });
  }

  /**
   * The first half of a reserve, for the credit step that holds a budget beside its reservation
   * (handles.ts): the refusal, or what to draw once the credit is reserved (`draw`, in the same step).
   */
  plan(request: Omit<QuotaRequest, 'attempt'>): Extract<QuotaDecision, { kind: 'exceeded' }> | QuotaPlan {
    for (const draw of request.draws) checkDraw(draw);
    return this.planAt(request, this.now());
  }

  /** Draws what `plan` decided; must run in the same synchronous step as `plan`. */
  draw(plan: QuotaPlan): void {
    this.drawAt(plan, this.now());
  }

  /** Commits or releases a hold's parts at once (those already concluded or swept are left as they are). */
  concludeNow(held: HeldQuotas, outcome: 'commit' | 'release'): void {
    const now = this.now();
    for (const [subject] of bySubject(held.counters)) this.concludePart(subject, held.holdId, outcome, now);
  }

  async holdQuotas(holdId: string, counters: QuotaCounter[], deadline: number): Promise<boolean> {
    const now = this.now();
    let all = true;
    for (const [subject] of bySubject(counters)) {
      const part = this.livePart(subject, holdId, now);
      if (!part) {
        all = false;
        continue;
      }
      part.deadline = deadline;
      part.endsAt = Math.max(part.endsAt, deadline + QUOTA_GRACE_MS);
    }
    return all;
  }

  async releaseStaleQuotas(now: number, limit: number): Promise<number> {
    const clockNow = this.now();
    const stale: { key: string; deadline: number }[] = [];
    for (const [key, part] of this.holds) if (part.endsAt > clockNow && part.deadline < now) stale.push({ key, deadline: part.deadline });
    stale.sort((a, b) => a.deadline - b.deadline);
    const released = stale.slice(0, Math.max(0, limit));
    for (const { key } of released) {
      const at = key.indexOf('\n');
      this.concludePart(key.slice(0, at), key.slice(at + 1), 'release', clockNow);
    }
    return released.length;
  }

  async quotaUsage(counters: QuotaCounter[]): Promise<QuotaUsage[]> {
    const now = this.now();
    return counters.map((counter) => {
      const used = this.liveCounter(counter.subject, counterField(counter), now);
      return { name: counter.name, subject: counter.subject, windowMs: counter.windowMs, windowStart: counter.windowStart, calls: used?.calls ?? 0, credits: used?.credits ?? 0 };
    });
  }

  private reserveNow(request: QuotaRequest): QuotaDecision {
    const now = this.now();
    // Decide first, then draw: one synchronous step, so nobody sees a half-drawn request.
    const plan = this.planAt(request, now);
    if (plan.kind === 'exceeded') return plan;
    this.drawAt(plan, now);
    return { kind: 'held' };
  }

  private planAt(request: Omit<QuotaRequest, 'attempt'>, now: number): Extract<QuotaDecision, { kind: 'exceeded' }> | QuotaPlan {
    const parts: QuotaPlan['parts'] = [];
    for (const [subject, draws] of bySubject(request.draws)) {
      // A part already there is this hold's own earlier draw (a re-run): never drawn twice.
      if (this.livePart(subject, request.holdId, now)) continue;
      const pending = new Map<string, { calls: number; credits: number }>();
      for (const draw of draws) {
        const field = counterField(draw);
        const stored = this.liveCounter(subject, field, now);
        const earlier = pending.get(field) ?? { calls: 0, credits: 0 };
        const used = { calls: (stored?.calls ?? 0) + earlier.calls, credits: (stored?.credits ?? 0) + earlier.credits };
        if (!withinCaps(used, draw)) {
          return { kind: 'exceeded', name: draw.name, subject, resetsAt: windowEnd(draw), usedCalls: stored?.calls ?? 0, usedCredits: stored?.credits ?? 0 };
        }
        pending.set(field, { calls: earlier.calls + draw.calls, credits: earlier.credits + draw.credits });
      }
      parts.push([subject, draws]);
    }
    return { kind: 'plan', holdId: request.holdId, deadline: request.deadline, parts };
  }

  private drawAt(plan: QuotaPlan, now: number): void {
    for (const [subject, draws] of plan.parts) {
      const part: HoldPart = { deadline: plan.deadline, draws: new Map(), endsAt: plan.deadline + QUOTA_GRACE_MS };
      for (const draw of draws) {
        const field = counterField(draw);
        const key = scoped(subject, field);
        const counter = this.liveCounter(subject, field, now) ?? { calls: 0, credits: 0, endsAt: counterEnd(draw) };
        counter.calls += draw.calls;
        counter.credits += draw.credits;
        this.counters.set(key, counter);
        const drawn = part.draws.get(field) ?? { calls: 0, credits: 0 };
        part.draws.set(field, { calls: drawn.calls + draw.calls, credits: drawn.credits + draw.credits });
        part.endsAt = Math.max(part.endsAt, counterEnd(draw));
      }
      this.holds.set(scoped(subject, plan.holdId), part);
    }
  }

  /** Commit keeps the part's draws in its counters; release takes them out. Either way the part is gone. */
  private concludePart(subject: string, holdId: string, outcome: 'commit' | 'release', now: number): void {
    const part = this.livePart(subject, holdId, now);
    if (!part) return;
    this.holds.delete(scoped(subject, holdId));
    if (outcome === 'commit') return;
    for (const [field, drawn] of part.draws) {
      // A counter already gone (its window and grace passed) has nothing left to give back to.
      const counter = this.liveCounter(subject, field, now);
      if (!counter) continue;
      counter.calls = Math.max(0, counter.calls - drawn.calls);
      counter.credits = Math.max(0, counter.credits - drawn.credits);
    }
  }

  private liveCounter(subject: string, field: string, now: number): Counter | null {
    const key = scoped(subject, field);
    const counter = this.counters.get(key);
    if (!counter) return null;
    if (counter.endsAt > now) return counter;
    this.counters.delete(key);
    return null;
  }

  private livePart(subject: string, holdId: string, now: number): HoldPart | null {
    const key = scoped(subject, holdId);
    const part = this.holds.get(key);
    if (!part) return null;
    if (part.endsAt > now) return part;
    this.holds.delete(key);
    return null;
  }

  /** Answers a re-run of the same attempt with the first run's reply, as the Redis store's operation records do. */
  private once<T>(operation: string, attempt: Attempt | undefined, run: () => T): T {
    if (attempt === undefined) return run();
    const now = this.clock();
    const recorded = this.operations.get(operation);
    if (recorded && recorded.attempt === attempt && recorded.until > now) return structuredClone(recorded.reply) as T;
    const reply = run();
    this.operations.set(operation, { attempt, reply: structuredClone(reply), until: now + OP_RECORD_TTL_MS });
    return reply;
  }

  private now(): number {
    const now = this.clock();
    if (now >= this.nextSweepAt) this.sweep(now);
    return now;
  }

  /** Drops counters past their window's grace, forgotten hold parts and old operation records. */
  sweep(now: number): void {
    this.nextSweepAt = now + SWEEP_INTERVAL_MS;
    for (const [key, counter] of this.counters) if (counter.endsAt <= now) this.counters.delete(key);
    for (const [key, part] of this.holds) if (part.endsAt <= now) this.holds.delete(key);
    for (const [key, recorded] of this.operations) if (recorded.until <= now) this.operations.delete(key);
  }

  /** Sizes, for the memory store's boundedness test. */
  sizes(): { counters: number; holds: number; operations: number } {
    return { counters: this.counters.size, holds: this.holds.size, operations: this.operations.size };
  }
}
