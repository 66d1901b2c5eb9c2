// Budgets and free allowances (SPEC §23): which of them count a priced call at this endpoint, whose
// counters they draw on, and the one store request that draws on them all or on none. The paywall
// (decide.ts) holds a call's draws beside its credit reservation and concludes them by the same rule.
// Counters are keyed by name + subject + window, never by the config generation: a hot reload that
// changes a cap applies it to new calls while the counts go on (§18).
import type { AllowanceConfig, BudgetConfig } from '../config/schema.js';
import type { HeldQuotas, QuotaCounter, QuotaDecision, QuotaDraw, QuotaRequest, QuotaUsage, Store } from '../store/store.js';
import { quotaWindowStart } from '../store/store.js';
import { challengeThrottleKey } from './client-key.js';

/** What decides which rules count a call: its tool at this endpoint and the tool's SKU. */
export interface QuotaCall {
  tool: string;
  sku: string;
  cost: number;
}

/** Who the caller is: the principal (oauth), the handle's keyed hash, the client key (PricedCall.clientKey). */
export interface QuotaCaller {
  principal: string | null;
  handleHash: string | null;
  clientKey: string | null;
}

/** A call's draws held in the store until the call's outcome (its id is the credit reservation's, or the allowance call's own). */
export type QuotaHold = HeldQuotas;

/** A call's budget draws for the store, and the hold they make once drawn. */
export interface BudgetRequest {
  request: Omit<QuotaRequest, 'attempt'>;
  hold: QuotaHold;
}

/** The allowance a call is served under, and its counter (for the receipt's `remaining`). */
export interface AllowanceHold extends QuotaHold {
  allowance: string;
  freeCalls: number;
  counter: QuotaCounter;
}

export interface BudgetExceeded {
  kind: 'budget_exceeded';
  budget: string;
  /** Epoch ms: the end of the budget's window. */
  resetsAt: number;
  retryAfterSeconds: number;
}

const BUDGET = 'budget:';
const ALLOWANCE = 'allowance:';

/** The subject of a counter for a caller, or null when the caller has none of that kind (the rule does not count the call). */
export function quotaSubject(per: BudgetConfig['per'] | AllowanceConfig['per'], caller: QuotaCaller): string | null {
  if (per === 'principal') return caller.principal === null ? null : `p:${caller.principal}`;
  if (per === 'handle') return caller.handleHash === null ? null : `h:${caller.handleHash}`;
  // The principal, else the IPv4 address or the IPv6 /64 (the challenge throttle's key, for the same reason).
  return caller.clientKey === null ? null : `c:${challengeThrottleKey(caller.clientKey)}`;
}

/** True when a rule's tools / sku / server (or none of them: every priced tool) covers the call at `server`. */
export function ruleCovers(rule: { tools?: string[] | undefined; sku?: string | undefined; server?: string | undefined }, call: QuotaCall, server: string): boolean {
  if (rule.tools !== undefined) return rule.tools.includes(call.tool);
  if (rule.sku !== undefined) return rule.sku === call.sku;
  if (rule.server !== undefined) return rule.server === server;
  return true;
}

export interface QuotaRules {
  budgets: readonly BudgetConfig[];
  allowances: readonly AllowanceConfig[];
}

export interface QuotaDeps {
  store: Store;
  now: () => number;
}

export class Quotas {
  readonly #rules: QuotaRules;
  readonly #server: string;
  readonly #deps: QuotaDeps;

  constructor(rules: QuotaRules, server: string, deps: QuotaDeps) {
    this.#rules = rules;
    this.#server = server;
    this.#deps = deps;
  }

  /** False when no budget or allowance is configured: the paywall then makes no quota round trip at all. */
  get active(): boolean {
    return this.#rules.budgets.length > 0 || this.#rules.allowances.length > 0;
  }

  /** False when no allowance is configured: no priced call can be a free one. */
  get hasAllowances(): boolean {
    return this.#rules.allowances.length > 0;
  }

  /** The budgets counting this call, and the subject of each (budgets whose subject the caller lacks are left out). */
  budgetDraws(call: QuotaCall, caller: QuotaCaller, credits: number, now: number): QuotaDraw[] {
    const draws: QuotaDraw[] = [];
    for (const budget of this.#rules.budgets) {
      if (!ruleCovers(budget, call, this.#server)) continue;
      const subject = quotaSubject(budget.per, caller);
      if (subject === null) continue;
      draws.push(drawOf(BUDGET + budget.name, subject, budget.window, now, credits, budget.maxCalls ?? null, budget.maxCredits ?? null));
    }
    return draws;
  }

  /** The first allowance (in config order) covering this call for this caller, as a draw of one free call. */
  allowanceDraw(call: QuotaCall, caller: QuotaCaller, now: number): { draw: QuotaDraw; allowance: AllowanceConfig } | null {
    for (const allowance of this.#rules.allowances) {
      if (!ruleCovers(allowance, call, this.#server)) continue;
      const subject = quotaSubject(allowance.per, caller);
      if (subject === null) continue;
      return { draw: drawOf(ALLOWANCE + allowance.name, subject, allowance.window, now, 0, allowance.freeCalls, null), allowance };
    }
    return null;
  }

  /**
   * §23: the budgets of a call about to reserve `cost` credits, as the store takes them beside the
   * reservation (`SpendRequest.quotas`) and the hold they become (null: no budget counts the call).
   */
  budgetRequest(call: QuotaCall, caller: QuotaCaller, holdId: string, deadline: number): BudgetRequest | null {
    const draws = this.budgetDraws(call, caller, call.cost, this.#deps.now());
    if (draws.length === 0) return null;
    return { request: { holdId, draws, deadline }, hold: { holdId, counters: draws.map(counterOf) } };
  }

  /** Holds a call's budgets on their own (Redis Cluster: not in the credit's slot), or names the budget over its cap. Throws when the store fails. */
  async hold(budgets: BudgetRequest): Promise<QuotaHold | BudgetExceeded> {
    const { holdId, draws, deadline } = budgets.request;
    const decision = await this.#reserve(holdId, draws, deadline);
    return decision.kind === 'exceeded' ? this.refusal(decision) : budgets.hold;
  }

  /** The refusal for a budget counter the store found over its cap. */
  refusal(over: { name: string; resetsAt: number }): BudgetExceeded {
    return exceeded(over.name, over.resetsAt, this.#deps.now());
  }

  /**
   * §23: one free call of the allowance covering this call, held together with the budgets that count it
   * (one call, no credits). null: no allowance covers the call, or it is used up (the usual path follows).
   * A budget over its cap refuses the call (BudgetExceeded). Throws when the store fails.
   */
  async holdAllowance(call: QuotaCall, caller: QuotaCaller, holdId: string, deadline: number): Promise<AllowanceHold | BudgetExceeded | null> {
    const now = this.#deps.now();
    const free = this.allowanceDraw(call, caller, now);
    if (!free) return null;
    // No handle on a free call: a per-handle budget cannot tell whose it is, so only principal budgets count it.
    const draws = [free.draw, ...this.budgetDraws(call, { ...caller, handleHash: null }, 0, now)];
    const decision = await this.#reserve(holdId, draws, deadline);
    if (decision.kind === 'exceeded') return decision.name.startsWith(BUDGET) ? exceeded(decision.name, decision.resetsAt, now) : null;
    return { holdId, counters: draws.map(counterOf), allowance: free.allowance.name, freeCalls: free.allowance.freeCalls, counter: counterOf(free.draw) };
  }

  /**
   * One store request for all the draws. A store error may come after some subjects were drawn (Cluster):
   * they are given back at once where the store still answers, else by the stale sweep after `deadline`.
   */
  async #reserve(holdId: string, draws: QuotaDraw[], deadline: number): Promise<QuotaDecision> {
    try {
      return await this.#deps.store.reserveQuotas({ holdId, draws, deadline });
    } catch (error) {
      await this.#deps.store.concludeQuotas(holdId, draws.map(counterOf), 'release').catch(() => undefined);
      throw error;
    }
  }

  /** Commits (the call's credit was committed, or its free call was used) or releases a hold. */
  async conclude(hold: QuotaHold, keep: boolean): Promise<void> {
    await this.#deps.store.concludeQuotas(hold.holdId, hold.counters, keep ? 'commit' : 'release');
  }

  /** A call answered with a task holds its draws to the task's end (SPEC §24). */
  async extend(hold: QuotaHold, deadline: number): Promise<boolean> {
    return this.#deps.store.holdQuotas(hold.holdId, hold.counters, deadline);
  }

  /** Free calls left of an allowance after this call (for its receipt). */
  async allowanceRemaining(hold: AllowanceHold): Promise<number> {
    const [usage] = await this.#deps.store.quotaUsage([hold.counter]);
    return Math.max(0, hold.freeCalls - (usage?.calls ?? 0));
  }

  /**
   * §23, the caller's own price list: for each budget and allowance covering `call`, what is left in the
   * current window (null: none covers it). Budgets: the smaller of calls and credits left, in calls of this tool.
   */
  async remainingFor(call: QuotaCall, caller: QuotaCaller): Promise<{ allowanceRemaining: number | null; budgetRemaining: number | null }> {
    const now = this.#deps.now();
    const free = this.allowanceDraw(call, caller, now);
    const budgets = this.budgetDraws(call, caller, call.cost, now);
    const counters = [...(free ? [free.draw] : []), ...budgets];
    if (counters.length === 0) return { allowanceRemaining: null, budgetRemaining: null };
    const usage = await this.#deps.store.quotaUsage(counters.map(counterOf));
    const used = (draw: QuotaDraw): QuotaUsage | undefined => usage.find((u) => u.name === draw.name && u.subject === draw.subject && u.windowStart === draw.windowStart);
    const allowanceRemaining = free ? Math.max(0, free.allowance.freeCalls - (used(free.draw)?.calls ?? 0)) : null;
    let budgetRemaining: number | null = null;
    for (const draw of budgets) {
      const u = used(draw);
      const byCalls = draw.maxCalls === null ? Infinity : draw.maxCalls - (u?.calls ?? 0);
      const byCredits = draw.maxCredits === null ? Infinity : Math.floor((draw.maxCredits - (u?.credits ?? 0)) / Math.max(1, call.cost));
      const left = Math.max(0, Math.min(byCalls, byCredits));
      budgetRemaining = budgetRemaining === null ? left : Math.min(budgetRemaining, left);
    }
    return { allowanceRemaining, budgetRemaining };
  }
}

function counter(name: string, subject: string, windowMs: number, now: number): QuotaCounter {
  return { name, subject, windowMs, windowStart: quotaWindowStart(now, windowMs) };
}

/**
 * One call's draw on a counter, built as one literal: this runs on every priced call, and spreading
 * `counter()` into it measured 4.4 µs a draw (V8's generic object-spread path plus the garbage) against
 * well under 1 µs this way (bench/RESULTS.md, "Budget in the credit's step").
 */
function drawOf(name: string, subject: string, windowMs: number, now: number, credits: number, maxCalls: number | null, maxCredits: number | null): QuotaDraw {
  return { name, subject, windowMs, windowStart: quotaWindowStart(now, windowMs), calls: 1, credits, maxCalls, maxCredits };
}

function counterOf(draw: QuotaDraw): QuotaCounter {
  return { name: draw.name, subject: draw.subject, windowMs: draw.windowMs, windowStart: draw.windowStart };
}

function exceeded(name: string, resetsAt: number, now: number): BudgetExceeded {
  return { kind: 'budget_exceeded', budget: name.slice(BUDGET.length), resetsAt, retryAfterSeconds: Math.max(1, Math.ceil((resetsAt - now) / 1000)) };
}

/** One budget or allowance counting a principal's or a handle's calls, and its counter in the current window. */
export interface QuotaOfSubject {
  kind: 'budget' | 'allowance';
  name: string;
  windowMs: number;
  /** Caps: maxCalls / maxCredits for a budget, freeCalls (as maxCalls) for an allowance; null: none. */
  maxCalls: number | null;
  maxCredits: number | null;
  counter: QuotaCounter;
}

/**
 * The budgets and allowances counting a principal's calls (per principal, and per client: a principal is
 * its own client) or a handle's (per handle), with their counters in the window holding `now` (`budget show`).
 */
export function quotasOf(rules: QuotaRules, who: { principal: string } | { handleHash: string }, now: number): QuotaOfSubject[] {
  const caller: QuotaCaller = 'principal' in who ? { principal: who.principal, handleHash: null, clientKey: `p:${who.principal}` } : { principal: null, handleHash: who.handleHash, clientKey: null };
  const out: QuotaOfSubject[] = [];
  for (const budget of rules.budgets) {
    const subject = quotaSubject(budget.per, caller);
    if (subject !== null) out.push({ kind: 'budget', name: budget.name, windowMs: budget.window, maxCalls: budget.maxCalls ?? null, maxCredits: budget.maxCredits ?? null, counter: counter(BUDGET + budget.name, subject, budget.window, now) });
  }
  for (const allowance of rules.allowances) {
    const subject = quotaSubject(allowance.per, caller);
    if (subject !== null) out.push({ kind: 'allowance', name: allowance.name, windowMs: allowance.window, maxCalls: allowance.freeCalls, maxCredits: null, counter: counter(ALLOWANCE + allowance.name, subject, allowance.window, now) });
  }
  return out;
}

export function isBudgetExceeded(value: QuotaHold | BudgetExceeded | null): value is BudgetExceeded {
  return value !== null && 'kind' in value && value.kind === 'budget_exceeded';
}

/** The caller of a priced call as the quota rules see it. */
export function quotaCaller(priced: { principal: string | null; clientKey: string }, handleHash: string | null): QuotaCaller {
  return { principal: priced.principal, handleHash, clientKey: priced.clientKey };
}
