// The rules both stores apply to budget and allowance counters (SPEC §23), once: how long a counter
// and a hold live, how a draw is checked against its caps, and how counters are grouped by subject
// (in Redis each subject's counters share one hash tag, so one script per subject decides).
import { GatewayError } from '../errors.js';
import type { QuotaCounter, QuotaDraw } from './store.js';

/**
 * A counter outlives its window by this much, and a hold its deadline: replicas whose clocks disagree
 * by less than this still draw on, and conclude, the same counter. Past its window a counter is only
 * read by quotaUsage of that window, so the margin costs memory, never a wrong decision.
 */
export const QUOTA_GRACE_MS = 3_600_000;

/** When a counter may be forgotten: the end of its window plus the grace. */
export const counterEnd = (counter: QuotaCounter): number => counter.windowStart + counter.windowMs + QUOTA_GRACE_MS;

/** The end of a counter's window: when a refused call may try again. */
export const windowEnd = (counter: QuotaCounter): number => counter.windowStart + counter.windowMs;

/**
 * One counter of one subject: name, window length and start. The window length is part of it so an
 * operator who changes a budget's window starts fresh counters instead of reading old ones wrongly.
 */
export const counterField = (counter: Pick<QuotaCounter, 'name' | 'windowMs' | 'windowStart'>): string => `${counter.name}|${counter.windowMs}|${counter.windowStart}`;

/** Draws are whole, non-negative counts: anything else is a bug in the caller, refused before anything moves. */
export function checkDraw(draw: QuotaDraw): void {
  for (const n of [draw.calls, draw.credits, draw.windowMs, draw.windowStart]) {
    if (!Number.isSafeInteger(n) || n < 0) throw new GatewayError('TB_ERR_INTERNAL', `quota draw on ${draw.name} has a count that is not a whole non-negative number`);
  }
  if (draw.windowMs === 0) throw new GatewayError('TB_ERR_INTERNAL', `quota counter ${draw.name} has an empty window`);
}

/** True if `used` plus `draw` stays within every cap the draw carries (null: no cap of that kind). */
export function withinCaps(used: { calls: number; credits: number }, draw: QuotaDraw): boolean {
  if (draw.maxCalls !== null && used.calls + draw.calls > draw.maxCalls) return false;
  if (draw.maxCredits !== null && used.credits + draw.credits > draw.maxCredits) return false;
  return true;
}

/** Groups counters (or draws) by subject, subjects in ascending order: the order every store draws in. */
export function bySubject<T extends QuotaCounter>(counters: readonly T[]): [string, T[]][] {
  // The usual call: one budget, or several of one subject. No map and no sort then (this runs twice per paid call).
  const first = counters[0];
  if (first === undefined) return [];
  if (counters.every((counter) => counter.subject === first.subject)) return [[first.subject, counters.slice()]];
  const groups = new Map<string, T[]>();
  for (const counter of counters) {
    let group = groups.get(counter.subject);
    if (!group) groups.set(counter.subject, (group = []));
    group.push(counter);
  }
  return [...groups].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}
