// A deliberately broken store for the cross-instance negative control: each instance serialises its
// own reserves behind a lock (so on its own it passes the concurrency check), but the balances live
// in books shared by every instance, as one database behind several gateways. Two instances read
// the same balance concurrently and both write what they computed: the lost update a lock that is
// only per process (not a Lua script, not a transaction) cannot prevent. Every other method is
// MemoryStore's.
import { MemoryStore } from '../../src/store/memory.js';
import type { HandleState, SpendDecision, SpendRequest } from '../../src/store/store.js';

const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** The balances every instance reads and writes (the "database"). */
export class SharedBooks {
  readonly balances = new Map<string, number>();
}

export class InstanceLockedStore extends MemoryStore {
  /** Its own reserve knows nothing of budgets: a paywall holds them beside, with MemoryStore's quota methods. */
  override readonly quotasWithCredits = false;
  #lock: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly books: SharedBooks,
    options: { now: () => number },
  ) {
    super(options);
  }

  override async getHandle(handleHash: string): Promise<HandleState | null> {
    const state = await super.getHandle(handleHash);
    if (!state) return null;
    const balances: Record<string, number> = {};
    for (const [key, balance] of this.books.balances) if (key.startsWith(`${handleHash} `)) balances[key.slice(handleHash.length + 1)] = balance;
    return { ...state, balances };
  }

  override async grantCredits(handleHash: string, sku: string, credits: number): Promise<number> {
    await super.grantCredits(handleHash, sku, credits); // validation and existence, on the instance that created it
    return this.#locked(async () => this.#write(handleHash, sku, this.#read(handleHash, sku) + credits));
  }

  override async reserve(request: SpendRequest): Promise<SpendDecision> {
    return this.#locked(async () => {
      const balance = this.#read(request.handleHash, request.sku);
      await nextTurn(); // the round trip to the shared database
      if (balance < request.cost) return { kind: 'insufficient', balance, funded: false, pending: null, lastCharge: null };
      return { kind: 'reserved', remaining: this.#write(request.handleHash, request.sku, balance - request.cost) };
    });
  }

  #locked<T>(work: () => Promise<T>): Promise<T> {
    const run = this.#lock.then(work);
    this.#lock = run.catch(() => undefined);
    return run;
  }

  #read(handleHash: string, sku: string): number {
    return this.books.balances.get(`${handleHash} ${sku}`) ?? 0;
  }

  #write(handleHash: string, sku: string, balance: number): number {
    this.books.balances.set(`${handleHash} ${sku}`, balance);
    return balance;
  }
}
