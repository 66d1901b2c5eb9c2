// A deliberately broken store for the negative control: its reserve reads the balance, lets other
// calls run (one event-loop turn, as a network round trip would), then writes what it computed.
// Concurrent reserves all read the same balance, so it grants more calls than were paid for. Every
// other method is MemoryStore's; the balances live here so the lost update is a real one.
import { MemoryStore } from '../../src/store/memory.js';
import type { HandleState, IdempotentBegin, IdempotentClaim, SpendDecision, SpendRequest } from '../../src/store/store.js';

const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

export class NaiveStore extends MemoryStore {
  /** Its own reserve knows nothing of budgets: a paywall holds them beside, with MemoryStore's quota methods. */
  override readonly quotasWithCredits = false;
  private readonly ledger = new Map<string, Map<string, number>>();
  private readonly held = new Map<string, { handleHash: string; sku: string; cost: number }>();
  private readonly slots = new Map<string, IdempotentClaim>();

  /** An idempotency slot looked up, then written a turn later: concurrent first calls all see it empty. */
  override async beginIdempotent(slot: string, claim: IdempotentClaim): Promise<IdempotentBegin> {
    const found = this.slots.get(slot);
    await nextTurn();
    if (!found) {
      this.slots.set(slot, claim);
      return { kind: 'first' };
    }
    return found.scope === claim.scope ? { kind: 'running' } : { kind: 'conflict' };
  }

  override async getHandle(handleHash: string): Promise<HandleState | null> {
    const state = await super.getHandle(handleHash);
    if (!state) return null;
    return { ...state, balances: Object.fromEntries(this.ledger.get(handleHash) ?? []) };
  }

  override async grantCredits(handleHash: string, sku: string, credits: number): Promise<number> {
    await super.grantCredits(handleHash, sku, credits); // validation and existence
    return this.write(handleHash, sku, this.read(handleHash, sku) + credits);
  }

  override async reserve(request: SpendRequest): Promise<SpendDecision> {
    const state = await super.getHandle(request.handleHash);
    if (!state) return { kind: 'unknown_handle' };
    const balance = this.read(request.handleHash, request.sku);
    await nextTurn();
    if (balance < request.cost) return { kind: 'insufficient', balance, funded: false, pending: null, lastCharge: null };
    this.write(request.handleHash, request.sku, balance - request.cost);
    this.held.set(request.reservationId, { handleHash: request.handleHash, sku: request.sku, cost: request.cost });
    return { kind: 'reserved', remaining: balance - request.cost };
  }

  override async commit(handleHash: string, reservationId: string): Promise<number | null> {
    const reservation = this.held.get(reservationId);
    if (!reservation || reservation.handleHash !== handleHash) return null;
    this.held.delete(reservationId);
    return this.read(handleHash, reservation.sku);
  }

  override async release(handleHash: string, reservationId: string): Promise<number | null> {
    const reservation = this.held.get(reservationId);
    if (!reservation || reservation.handleHash !== handleHash) return null;
    this.held.delete(reservationId);
    return this.write(handleHash, reservation.sku, this.read(handleHash, reservation.sku) + reservation.cost);
  }

  private read(handleHash: string, sku: string): number {
    return this.ledger.get(handleHash)?.get(sku) ?? 0;
  }

  private write(handleHash: string, sku: string, balance: number): number {
    let balances = this.ledger.get(handleHash);
    if (!balances) this.ledger.set(handleHash, (balances = new Map()));
    balances.set(sku, balance);
    return balance;
  }
}
