// The caller's own price list (SPEC §23): for a tools/list from a known caller — a principal, or a
// request naming its handle — what each priced tool would cost this caller now: the credits of its SKU
// the handle holds, the free calls and budget left, and whether the next call goes through without
// payment. Nothing is disclosed about a handle bound to another principal (it reads as no handle).
import type { PriceTag } from '../mcp/tools-list.js';
import type { HandleState, Store } from '../store/store.js';
import { createHandleHasher, isWellFormedHandle } from './handles.js';
import { quotaCaller, type Quotas } from './quotas.js';

/** What `_meta["xyz.tollbooth/price"]` gains for one tool. null: unknown (no handle named; no allowance / budget covers the tool). */
export type CallerPrice = {
  balance: number | null;
  allowanceRemaining: number | null;
  budgetRemaining: number | null;
  /** True when the next call would be served without payment: a free call left, or the balance covers it; and no budget in the way. */
  affordable: boolean;
};

export interface CallerOfList {
  principal: string | null;
  /** PricedCall.clientKey: `p:<principal>` or `ip:<address>`. */
  clientKey: string;
  handle: string | null;
}

export interface PriceListDeps {
  store: Store;
  quotas: Quotas;
  hashSecret: string;
  /** The endpoint's priced tools. */
  tools: Iterable<[string, PriceTag]>;
}

export class CallerPriceList {
  readonly #deps: PriceListDeps;
  readonly #hashHandle: (handle: string) => string;
  readonly #tools: [string, PriceTag][];

  constructor(deps: PriceListDeps) {
    this.#deps = deps;
    this.#hashHandle = createHandleHasher(deps.hashSecret);
    this.#tools = [...deps.tools];
  }

  /** Whether the list is the caller's own (private, never cached for another). */
  static isKnown(caller: CallerOfList): boolean {
    return caller.principal !== null || caller.handle !== null;
  }

  /** Tool name → what the caller sees; throws when the store fails (the list then goes without it). */
  async forCaller(caller: CallerOfList): Promise<Map<string, CallerPrice>> {
    const handleHash = caller.handle !== null && isWellFormedHandle(caller.handle) ? this.#hashHandle(caller.handle) : null;
    const state = handleHash ? await this.#deps.store.getHandle(handleHash) : null;
    // Another principal's handle: nothing about it is shown (and its budgets are not this caller's).
    const own: HandleState | null = state && (state.principal === null || state.principal === caller.principal) ? state : null;
    const quotaSubjects = quotaCaller(caller, own && handleHash ? handleHash : null);
    const prices = new Map<string, CallerPrice>();
    for (const [tool, price] of this.#tools) {
      const balance = caller.handle === null ? null : (own?.balances[price.sku] ?? 0);
      const { allowanceRemaining, budgetRemaining } = this.#deps.quotas.active
        ? await this.#deps.quotas.remainingFor({ tool, sku: price.sku, cost: price.cost }, quotaSubjects)
        : { allowanceRemaining: null, budgetRemaining: null };
      const free = allowanceRemaining !== null && allowanceRemaining > 0;
      const affordable = budgetRemaining !== 0 && (free || (balance !== null && balance >= price.cost));
      prices.set(tool, { balance, allowanceRemaining, budgetRemaining, affordable });
    }
    return prices;
  }
}
