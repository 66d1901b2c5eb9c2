// The store interface (SPEC §8): everything money-related the gateway keeps. Two implementations,
// memory.ts (one process) and redis.ts (any number of replicas), pass test/store/conformance.ts.
// Every method is one atomic decision that returns all the caller needs: the paywall never reads,
// decides in JavaScript, then writes. Handles are never given to the store: only their keyed hash
// (paywall/handles.ts), so the store can be dumped without leaking a bearer credential.

/** Everything a charge (one checkout link) remembers. Amount/credits are the price snapshot at opening (§7.4). */
export interface ChargeRecord {
  nonce: string;
  handleHash: string;
  sku: string;
  label: string;
  amount: string; // decimal string, snapshot
  currency: string;
  credits: number; // pack size, snapshot
  tool: string;
  status: ChargeStatus;
  providerRef: string | null; // null while the link is being opened
  checkoutUrl: string | null;
  openedAt: number; // epoch ms
  expiresAt: number; // epoch ms: the link's end of life
  lastPolledAt: number; // epoch ms, 0 = never
  /**
   * The `lastPolledAt` of the latest poll whose provider read ended with a reading (markChargeRead):
   * equal to lastPolledAt once the read that took the current slot is done, so a retry waiting for
   * it answers at once. Absent until a read ends; a read that failed never sets it.
   */
  lastReadAt?: number;
  nextPollAt: number; // epoch ms: when the reconciler should look next
  pollCount: number;
  grantedCredits: number; // set by claimSettlement
  receivedAmount: string | null; // as reported when settled/underpaid
  /** epoch ms: when the reconciler gave up reading it (status 'expired'); the record is kept RETENTION_MS from then. */
  expiredAt?: number;
}

/**
 * opening → pending (link attached) → settled | underpaid (claimed) | abandoned (past its TTL, or a
 * dead link). An abandoned charge is still polled and claimable (§7.6 late payments); one the
 * provider never let us read by the end of the retention window becomes expired (for the operator,
 * still claimable if money turns up).
 */
export type ChargeStatus = 'opening' | 'pending' | 'underpaid' | 'settled' | 'abandoned' | 'expired';

export interface HandleState {
  principal: string | null;
  balances: Record<string, number>; // available credits per SKU (reservations already taken out)
  funded: Record<string, boolean>; // true once any settlement granted credits for that SKU
  expiresAt: number;
  /** The handle's fingerprint as logged (`tb_s_KLeV..EPcw`), for operator listings; absent when a store does not keep it. */
  fingerprint?: string;
}

export interface NewHandle {
  handleHash: string;
  fingerprint: string; // first 9 + ".." + last 4 of the handle, for operators (`tollbooth handle show`)
  principal: string | null;
  ttlMs: number;
}

export interface SpendRequest {
  handleHash: string;
  principal: string | null; // caller's principal (null when auth is off)
  sku: string;
  cost: number;
  reservationId: string;
  reservationDeadline: number; // epoch ms after which the reconciler may release it (callDeadline + 5 s)
  ttlMs: number; // handle slide
  /** The handle's token bucket; null takes no token (the second reserve of a call that just settled a charge). */
  bucket: { ratePerSecond: number; burst: number } | null;
  /** See `Attempt`. */
  attempt?: Attempt;
  /**
   * The call's budget draws (SPEC §23), only where `quotasWithCredits`: checked before anything else
   * (over a cap: `quota_exceeded`, no rate token taken, no credit moved) and drawn, held under
   * `quotas.holdId`, only when the credit is reserved, all in the same atomic step.
   */
  quotas?: Omit<QuotaRequest, 'attempt'>;
}

/** A hold's counters, to conclude with the reservation they were drawn beside (commit / release `quotas`). */
export interface HeldQuotas {
  holdId: string;
  counters: QuotaCounter[];
}

/**
 * One caller's attempt at a money operation (SPEC §21 "Retried writes are idempotent"). The store
 * runs the operation again with the same attempt after a lost reply (a connection reset, a
 * failover): that re-run finds the first run's effect and answers exactly as it did, changing
 * nothing. Another caller (another attempt, or none) gets the operation's ordinary answer: a second
 * commit of a reservation is null, a second claim of a charge is not claimed. Left out, the store
 * makes one per call.
 */
export type Attempt = string;

/** The answer of `reserve`: the first of §6.2 steps 3–6 that decided the call. */
export type SpendDecision =
  | { kind: 'unknown_handle' }
  | { kind: 'bound_to_other_principal' }
  | { kind: 'rate_limited'; retryAfterMs: number }
  | { kind: 'insufficient'; balance: number; funded: boolean; pending: ChargeRecord | null; lastCharge: ChargeRecord | null }
  | { kind: 'reserved'; remaining: number }
  /** Only for a request with `quotas`: the first draw over its cap, as `reserveQuotas` names it. */
  | ({ kind: 'quota_exceeded' } & Omit<Extract<QuotaDecision, { kind: 'exceeded' }>, 'kind'>);

export interface OpenChargeRequest {
  handleHash: string;
  sku: string;
  nonce: string; // fresh, used only if a new charge is begun
  snapshot: { label: string; amount: string; currency: string; credits: number; tool: string };
  now: number;
  ttlMs: number; // chargeTtl
  firstPollDelayMs: number; // ~3 s
  attempt?: Attempt;
}

/** `beginCharge`: either the pending charge to reuse, or the caller now owns opening a new one. */
export type BeginChargeResult =
  | { kind: 'existing'; charge: ChargeRecord } // status 'pending' with a link, or 'opening' by someone else
  | { kind: 'begun'; charge: ChargeRecord }; // status 'opening': call the provider, then attachLink

export interface SettlementClaim {
  handleHash: string;
  nonce: string;
  outcome: 'settled' | 'underpaid';
  credits: number; // credits to grant (0 for underpaid)
  receivedAmount: string | null;
  attempt?: Attempt;
}

export interface ClaimResult {
  claimed: boolean; // true for exactly one caller per charge
  charge: ChargeRecord | null;
  balance: number; // the handle's balance for the SKU after the call
}

export interface Store {
  readonly kind: 'memory' | 'redis';
  /** Refuses ttlMs < 1 h (TB_ERR_STORE_TTL_FLOOR). */
  createHandle(handle: NewHandle): Promise<void>;
  getHandle(handleHash: string): Promise<HandleState | null>;
  /** Operator look-up: the hashes of live handles with this fingerprint (usually one). */
  findHandlesByFingerprint(fingerprint: string): Promise<string[]>;
  /**
   * True when reserve, commit and release take a call's budget hold (`SpendRequest.quotas`, `quotas`)
   * into their own atomic step (memory; Redis standalone and Sentinel). False in Redis Cluster, where
   * the counters live in other slots than the handle: the caller then holds and concludes them with
   * reserveQuotas / concludeQuotas beside the credit (§23's cross-slot order), and passes none here.
   */
  readonly quotasWithCredits: boolean;
  /** §6.2 steps 3–6 in one atomic step: (budgets,) existence, binding, token bucket, reserve `cost`, slide. */
  reserve(request: SpendRequest): Promise<SpendDecision>;
  /**
   * Makes a reservation final and writes its `spend` ledger entry (with `tool`, when given) in the
   * same atomic step; returns the balance left (net of other reservations), or null if it no longer
   * exists (or the handle's life ended: the expiry step then writes its credits off). `quotas` (only
   * where `quotasWithCredits`) are committed in the same step; on null they are left as they are.
   */
  commit(handleHash: string, reservationId: string, tool?: string, attempt?: Attempt, quotas?: HeldQuotas): Promise<number | null>;
  /**
   * Gives a reservation's credits back; returns the balance, or null if it no longer exists (already
   * committed/released). `quotas` as for commit, given back in the same step.
   */
  release(handleHash: string, reservationId: string, attempt?: Attempt, quotas?: HeldQuotas): Promise<number | null>;
  /** Reservations whose deadline passed (a gateway died mid-call) are released; returns how many. */
  releaseStaleReservations(now: number, limit: number): Promise<number>;
  /** Grants credits outside a settlement (operator `credits grant`) with its `adjust` ledger entry; returns the new balance. */
  grantCredits(handleHash: string, sku: string, credits: number, reason?: string, attempt?: Attempt): Promise<number>;

  /** §6.5 "at most one pending charge per SKU": reuse, or begin opening a new one. */
  beginCharge(request: OpenChargeRequest): Promise<BeginChargeResult>;
  /** Stores the provider's link on an 'opening' charge, making it 'pending'; null (nothing shown) if the charge is not opening or its handle is not live. */
  attachLink(handleHash: string, nonce: string, link: { providerRef: string; checkoutUrl: string }, attempt?: Attempt): Promise<ChargeRecord | null>;
  /** Drops an 'opening' charge whose provider call failed, so the next challenge tries again. */
  abortCharge(handleHash: string, nonce: string): Promise<void>;
  getCharge(handleHash: string, nonce: string): Promise<ChargeRecord | null>;
  findChargeByRef(providerRef: string): Promise<ChargeRecord | null>;
  /** True (and records the poll) if nobody polled this charge in the last minIntervalMs; schedules the next reconciler poll. */
  takePollSlot(handleHash: string, nonce: string, now: number, minIntervalMs: number, nextPollAt: number): Promise<boolean>;
  /**
   * The read that took the poll slot at `polledAt` ended with a reading: sets lastReadAt, unless a newer
   * poll took the slot meanwhile (its read is not done). Not a money write: a lost one only makes a
   * retry wait as before (Settler#awaitOtherRead).
   */
  markChargeRead(handleHash: string, nonce: string, polledAt: number): Promise<void>;
  /** §7.5 exactly once: claim + grant + status change + the `grant` ledger entry in one atomic step. */
  claimSettlement(claim: SettlementClaim): Promise<ClaimResult>;
  /**
   * pending → abandoned (never underpaid/settled); returns true if it changed. The charge stays due
   * for the reconciler at nextPollAt: late payments on it are still found (§7.6).
   */
  abandonCharge(handleHash: string, nonce: string, nextPollAt: number): Promise<boolean>;
  /** pending | abandoned → expired (never readable by the end of retention): no longer due, kept RETENTION_MS from `now` for the operator. */
  expireCharge(handleHash: string, nonce: string, now: number): Promise<boolean>;
  /** Charges due for a reconciler poll (nextPollAt ≤ now): pending and abandoned ones, oldest first, at most `limit`. */
  dueCharges(now: number, limit: number): Promise<ChargeRecord[]>;
  listCharges(status?: ChargeStatus): Promise<ChargeRecord[]>;
  countPendingCharges(): Promise<number>;

  /** Per-client challenge throttle (§6.2 step 2): a token bucket keyed by client address or principal. */
  takeChallengeToken(clientKey: string, bucket: { ratePerSecond: number; burst: number }): Promise<{ allowed: boolean; retryAfterMs: number }>;

  /** Reconciler lease: true if this owner holds it for ttlMs from now. */
  acquireLease(name: string, owner: string, ttlMs: number): Promise<boolean>;

  /**
   * Provider events (§20 webhook replay): true the first time (source, eventId) is claimed, false
   * while it is remembered (ttlMs from that first claim), across every replica sharing the store.
   */
  claimEvent(source: string, eventId: string, ttlMs: number): Promise<boolean>;

  /** dev provider state (§7.3): its links live in the store so any replica can read them. */
  putDevLink(link: DevLink): Promise<void>;
  getDevLink(id: string): Promise<DevLink | null>;
  /** Marks a dev link paid with the amount received; false if unknown or not active. */
  payDevLink(id: string, receivedAmount: string): Promise<boolean>;

  ping(): Promise<void>;
  close(): Promise<void>;
  /**
   * SPEC §21 orphans: a payment the provider reports for a charge this store does not know (a
   * failover erased it, or a link opened elsewhere) is kept for the operator, never dropped. True the
   * first time a provider ref is recorded. Kept RETENTION_MS from then.
   */
  recordOrphanPayment(orphan: OrphanPayment): Promise<boolean>;
  /** Every orphan payment kept, oldest first (`tollbooth charges orphans`). */
  listOrphanPayments(): Promise<OrphanPayment[]>;
  /** SPEC §21: writes acted on without the replicas durability asked for, by kind, since opened (Redis with durability replicated). */
  unreplicatedWrites?(): Record<string, number>;
  /** Spend entries appended since opened, by who hashed the previous entry for the chain link: `gateway` or `script` (Redis only: redis/chain-heads.ts). */
  ledgerLinks?(): Record<string, number>;
  /**
   * SPEC §21: with durability replicated, how waitReplicas compares with the replicas each primary has
   * now, logged once at start (`store_replicas`) when WAIT cannot keep the promise it is there for.
   */
  reportReplicaCoverage?(): Promise<void>;

  // ── ledger (SPEC §17; README.md beside this file, "Ledger") ─────────────────────────────────────
  /**
   * Ends handles whose life (expiresAt) is over: writes an `expire` entry per SKU for the credits they
   * still held (balance and reservations) and drops those credits, in one atomic step per handle.
   * Returns how many handles it ended. The reconciler calls it; Redis keeps a handle's keys
   * HANDLE_GRACE_MS past its expiry so this step runs before they vanish.
   */
  expireHandles(now: number, limit: number): Promise<number>;
  /** The handle's last `count` ledger entries, oldest first (admin `handle show`). */
  ledgerTail(handleHash: string, count: number): Promise<LedgerEntry[]>;
  /**
   * Every ledger in the store, each once (Redis: SCAN on every master; duplicates are possible while
   * keys move between nodes), in no particular order. With `unledgeredHandles`, also every handle
   * that has no ledger (verify checks it holds nothing).
   */
  ledgerAccounts(options?: { unledgeredHandles?: boolean }): AsyncIterable<LedgerAccount>;
  /** In one atomic step: the ledger's last entry and what the handle holds now (null: the account has nothing). */
  ledgerCheckpoint(account: LedgerAccount): Promise<LedgerCheckpoint | null>;
  /** Entries of one ledger in seq order, at most range.limit (a page: pass the last one as `after` for the next). */
  readLedger(account: LedgerAccount, range: LedgerRange): Promise<LedgerEntry[]>;

  // ── priced-request registry (SPEC §6.5; docs/decisions.md "A released call's late result") ──────
  /** Records a forwarded priced request before its reply can be resumed elsewhere; kept `ttlMs`. */
  registerPricedRequest(key: PricedRequestKey, record: PricedRequestRecord, ttlMs: number): Promise<void>;
  getPricedRequest(key: PricedRequestKey): Promise<PricedRequestRecord | null>;
  /**
   * in_flight → `state` (with the balance left after a commit); a request already concluded keeps its
   * state. Returns the record as it is after the call, or null when the store does not know it.
   */
  concludePricedRequest(key: PricedRequestKey, state: 'committed' | 'released', remaining: number | null): Promise<PricedRequestRecord | null>;
  // ── end of the priced-request registry ─────────────────────────────────────────────────────────
  // ── x402 authorizations (SPEC §19) ──────────────────────────────────────────────────────────────
  /** First claim wins: true for exactly one caller per key (any replica). Kept until max(expiresAt, now + PAYMENT_NONCE_MIN_TTL_MS). */
  claimPaymentNonce(claim: PaymentNonceClaim): Promise<boolean>;
  /**
   * Records how a claim ended (only a 'claimed' record changes); false if it is unknown, expired or
   * already finished. A 'settled' outcome writes the `x402_settle` ledger entry under the payer's
   * address in the same atomic step.
   */
  finishPaymentNonce(key: PaymentNonceKey, outcome: PaymentNonceOutcome, attempt?: Attempt): Promise<boolean>;
  getPaymentNonce(key: PaymentNonceKey): Promise<PaymentNonceRecord | null>;
  /**
   * SPEC §21, through the durable outbox (store/outbox.ts): the `x402_settle` entry of one settled call,
   * idempotent by its authorization (a second write, from any replica or a restarted process, is a
   * no-op), whether or not the claim record is still there; a claim still 'claimed' becomes 'settled'.
   * True when this call wrote the entry.
   */
  recordX402Settlement(record: X402SettlementRecord): Promise<boolean>;

  // ── sessions bound to principals (SPEC §20) ─────────────────────────────────────────────────────
  /**
   * Binds an upstream session (its hash: the store never holds a session id) to the principal whose
   * request created it, unless it is bound already: the first binding wins and never changes. Resolves
   * with the principal the session is bound to. Kept ttlMs.
   */
  bindSession(sessionHash: string, principal: string, ttlMs: number): Promise<string>;
  /** The principal a session is bound to, or null; a binding found is kept ttlMs from now (sliding). */
  sessionPrincipal(sessionHash: string, ttlMs: number): Promise<string | null>;
  // ── end of sessions bound to principals ────────────────────────────────────────────────────────
  // ── tasks holding a reservation (a priced call answered with a task; src/store/redis/requests.lua.ts) ──
  /**
   * Records the task and holds its call's reservation until `record.deadline` (the reconciler's stale
   * sweep releases it then). False when the reservation is already gone (nothing is recorded).
   */
  holdTask(key: TaskKey, record: TaskRecord): Promise<boolean>;
  getTask(key: TaskKey): Promise<TaskRecord | null>;
  /**
   * Records how the task's reservation was concluded (`concluded.state`, and `remaining` once committed)
   * in place of its record, which keeps its lifetime. True when this call recorded it first; false when
   * the record is gone or already concluded. Written before the answer goes out, so any later read of the
   * task answers as the first conclusion did (§24).
   */
  concludeTask(key: TaskKey, concluded: TaskRecord): Promise<boolean>;
  /**
   * Records a task whose call was concluded before the task was held (its creation answered past the
   * call deadline, or after the reservation was released), already concluded as that call was
   * (`concluded.state`), for as long as a held task's record lives, unless the task is recorded
   * already. A later read answers by that conclusion instead of passing as an unpriced task's. True
   * when this call wrote the record.
   */
  recordConcludedTask(key: TaskKey, concluded: TaskRecord): Promise<boolean>;
  // ── end of tasks ─────────────────────────────────────────────────────────────────────────────────
  // ── budgets and allowances (SPEC §23; store/memory/quotas.ts, store/redis/quotas.ts) ────────────
  /**
   * Draws on every counter of `request` or on none: each draw is counted as held (toward its caps) until
   * concluded. The first counter that would go over its cap refuses the whole request. Idempotent by
   * (holdId, attempt) like the other money writes: a re-run after a lost reply answers as the first run.
   * In Cluster the counters may live in several slots: they are drawn in subject order and the ones
   * already drawn are given back when a later one refuses; a crash in between leaves holds the stale
   * sweep (releaseStaleQuotas) gives back after `deadline`. A store error (TB_ERR_STORE_UNAVAILABLE) may
   * come after some subjects were drawn: the caller refuses the call and may concludeQuotas 'release'
   * (harmless when nothing was drawn); otherwise the sweep gives them back.
   */
  reserveQuotas(request: QuotaRequest): Promise<QuotaDecision>;
  /**
   * The hold's outcome: 'commit' counts the held draws for good, 'release' gives them back. Idempotent:
   * a hold already concluded (or swept) is left as it is. `counters` are the request's draws.
   */
  concludeQuotas(holdId: string, counters: QuotaCounter[], outcome: 'commit' | 'release', attempt?: Attempt): Promise<void>;
  /** Moves a hold's deadline (a priced call answered with a task holds its draws to the task's end); false if the hold is gone. */
  holdQuotas(holdId: string, counters: QuotaCounter[], deadline: number): Promise<boolean>;
  /** Gives back holds whose deadline passed (a gateway died mid-call); returns how many hold parts (one per subject a hold drew on). */
  releaseStaleQuotas(now: number, limit: number): Promise<number>;
  /** What each counter has used in its window (committed and held). A counter never drawn on reads 0/0. */
  quotaUsage(counters: QuotaCounter[]): Promise<QuotaUsage[]>;
  // ── end of budgets and allowances ───────────────────────────────────────────────────────────────
  // ── idempotent results (SPEC §24) ─────────────────────────────────────────────────────────────────
  /**
   * One atomic look at an idempotency slot (a digest of payer and key; memory/idempotency.ts,
   * redis/idempotency.lua.ts). Empty (or its in-flight marker expired): the caller's marker is written,
   * kept `claim.runningTtlMs`, and it is 'first' (it runs the call). Otherwise the slot's scope decides:
   * another scope is a 'conflict'; the same scope is 'done' with the kept result, or 'running'.
   */
  beginIdempotent(slot: string, claim: IdempotentClaim): Promise<IdempotentBegin>;
  /** Keeps the committed result (its JSON) ttlMs, when the slot still holds `owner`'s marker; false otherwise. Idempotent. */
  finishIdempotent(slot: string, owner: string, result: string, ttlMs: number): Promise<boolean>;
  /** Removes `owner`'s in-flight marker (the call was released: nothing is kept, a retry runs anew). Idempotent. */
  abandonIdempotent(slot: string, owner: string): Promise<void>;
  // ── end of idempotent results ──────────────────────────────────────────────────────────────────────
}

// ── budgets and allowances (SPEC §23) ────────────────────────────────────────────────────────────

/** One fixed window of one budget or allowance for one subject. */
export interface QuotaCounter {
  /** `budget:<name>` or `allowance:<name>` (config names are unique per kind). */
  name: string;
  /** Whose: `p:<principal>`, `h:<handle hash>`, or `c:<client key>` (IPv4 address / IPv6 /64). */
  subject: string;
  windowMs: number;
  /** Epoch ms, quotaWindowStart(now, windowMs): windows are aligned to the UTC epoch. */
  windowStart: number;
}

/** What one call draws on a counter, and the counter's caps (null: no cap of that kind). */
export interface QuotaDraw extends QuotaCounter {
  calls: number;
  credits: number;
  maxCalls: number | null;
  maxCredits: number | null;
}

export interface QuotaRequest {
  /** The call's id (its reservation id): one hold per call. */
  holdId: string;
  draws: QuotaDraw[];
  /** Epoch ms after which the stale sweep gives the hold back (callDeadline + 5 s, or the task deadline). */
  deadline: number;
  attempt?: Attempt;
}

export type QuotaDecision =
  | { kind: 'held' }
  /** `name` is the counter that refused; it resets at `resetsAt` (epoch ms, its window's end). */
  | { kind: 'exceeded'; name: string; subject: string; resetsAt: number; usedCalls: number; usedCredits: number };

export interface QuotaUsage extends QuotaCounter {
  calls: number;
  credits: number;
}

/** The start of the fixed window holding `now`. */
export function quotaWindowStart(now: number, windowMs: number): number {
  return now - (now % windowMs);
}

/** A task the upstream created for a priced call: the endpoint it was created on and the upstream's task id. */
export interface TaskKey {
  scope: string;
  taskId: string;
}

/** A credit reservation a priced request or a task holds open until its outcome is known. */
export interface HeldReservation {
  handleHash: string;
  reservationId: string;
  tool: string;
  sku: string;
  cost: number;
  charge: 'success' | 'attempt';
  /** SPEC §23: the budget / allowance draws held with the call, concluded with it; absent when none count it. */
  quotas?: { holdId: string; counters: QuotaCounter[] };
  /** SPEC §23: a free call of this allowance (handleHash and reservationId are then empty; nothing to commit but the draws). */
  allowance?: string;
}

export interface TaskRecord extends HeldReservation {
  /** Who created it: `p:<principal>` in oauth mode, else `s:<session hash>` for a legacy session, else '' (anyone holding the task id). */
  owner: string;
  /** Epoch ms: upstream.taskDeadline after the creation; past it the reservation is released. */
  deadline: number;
  fingerprint: string | null;
  startedAt: number;
  /** Absent while the reservation is held; set once it was committed (with the receipt's `remaining`) or released. */
  state?: 'committed' | 'released';
  remaining?: number | null;
}

/** A payment the provider reports for a charge the store does not know (SPEC §21). */
export interface OrphanPayment {
  providerRef: string; // the provider's link id: the operator looks the payment up with it
  receivedAmount: string | null;
  noticedAt: number; // epoch ms
  /** What reported it: a webhook (or the dev pay action) re-read by ref. */
  source: string;
}

// ── ledger (SPEC §17) ────────────────────────────────────────────────────────────────────────────

/**
 * `grant` settlement of a charge (ref = its nonce; credits may be 0: underpaid, or the handle was
 * gone), `adjust` operator grant (reason), `spend` a committed call (tool), `expire` credits dropped
 * with an ended handle, `x402_settle` one settled x402 call (under the payer's address, credits 0).
 */
export type LedgerKind = 'grant' | 'adjust' | 'spend' | 'expire' | 'x402_settle';

/**
 * One ledger entry. `balanceAfter` is what the handle owns in `sku` after the entry: its available
 * balance plus the credits its reservations hold (a reservation is not an entry), so within one
 * ledger it is the running sum of `credits` per SKU. Never a handle, link id or URL: `ref` is a
 * charge nonce (grant), the call's reservation id (spend) or an x402 authorization nonce.
 */
export interface LedgerEntry {
  seq: number; // 1, 2, 3 … per ledger
  at: number; // epoch ms, never before the previous entry of the same ledger
  kind: LedgerKind;
  sku: string;
  credits: number; // signed
  balanceAfter: number;
  ref: string | null;
  /** The handle's fingerprint ("" when no longer known); "" on x402 entries. */
  fingerprint: string;
  tool?: string; // spend, x402_settle
  amount?: string; // grant: amount received (decimal); x402_settle: atomic units
  currency?: string; // grant
  reason?: string; // adjust
  network?: string; // x402_settle (CAIP-2)
  asset?: string; // x402_settle
  payer?: string; // x402_settle
  transaction?: string; // x402_settle
  /** SHA-256 (hex) of the previous entry in canonical JSON (ledger-chain.ts); absent on entries written before the chain. */
  prev?: string;
}

/** A ledger: a handle's (under its hash tag), or an x402 payer's (under the payer's tag). */
export type LedgerAccount = { kind: 'handle'; handleHash: string } | { kind: 'payer'; payer: string };

/** One SKU of a handle as stored: available balance and credits held by reservations. */
export interface LedgerHolding {
  balance: number;
  reserved: number;
}

export interface LedgerCheckpoint {
  account: LedgerAccount;
  fingerprint: string;
  /** The last entry (seq 0 = none): entries up to it are the whole history behind `holdings`. */
  lastSeq: number;
  lastAt: number;
  /** What the handle holds now, per SKU; {} once its credits were dropped or its keys are gone; {} for payers. */
  holdings: Record<string, LedgerHolding>;
}

export interface LedgerRange {
  since?: number; // at ≥ since
  until?: number; // at < until
  after?: { at: number; seq: number }; // entries after this one
  through?: { at: number; seq: number }; // entries up to this one
  limit: number;
}

// ── x402 authorizations ──────────────────────────────────────────────────────────────────────────

/** One EIP-3009 authorization: network (CAIP-2), asset and payer addresses and the nonce, all lower-case. */
export interface PaymentNonceKey {
  network: string;
  asset: string;
  payer: string;
  nonce: string; // 0x + 64 hex digits
}

export interface PaymentNonceClaim extends PaymentNonceKey {
  /** Epoch ms until which the claim is kept: at least the authorization's validBefore (plus clock margin). */
  expiresAt: number;
  claimedAt: number;
  sku: string;
  tool: string;
  amount: string; // atomic units
  attempt?: Attempt;
}

export type PaymentNonceState = 'claimed' | 'settled' | 'settle_failed' | 'not_settled';

export interface PaymentNonceOutcome {
  state: Exclude<PaymentNonceState, 'claimed'>;
  /** The settlement transaction hash, when the facilitator gave one. */
  transaction: string | null;
  at: number; // epoch ms
}

export interface PaymentNonceRecord extends PaymentNonceClaim {
  state: PaymentNonceState;
  transaction: string | null;
  finishedAt: number | null;
}

/** A settled x402 call as the outbox holds it: everything its ledger entry needs, nothing secret. */
export interface X402SettlementRecord extends PaymentNonceKey {
  sku: string;
  tool: string;
  amount: string; // atomic units
  transaction: string;
  at: number; // epoch ms: when the facilitator settled it
}

// ── priced-request registry (SPEC §6.5) ───────────────────────────────────────────────────────────

/**
 * A forwarded priced request, by upstream session and JSON-RPC id. The session is a hash (the store
 * never sees an upstream session id); the id is JSON-serialised so 5 and "5" are different requests.
 */
export interface PricedRequestKey {
  session: string;
  requestId: string;
}

export type PricedRequestState = 'in_flight' | 'committed' | 'released';

export interface PricedRequestRecord extends HeldReservation {
  state: PricedRequestState;
  /** Epoch ms: past it an in-flight request is concluded as released wherever its reply turns up. */
  deadline: number;
  /** The balance after the commit (the receipt of a resumed result); null until committed. */
  remaining: number | null;
  /** For the call's log line where it is concluded (§10): not a secret. */
  fingerprint: string | null;
  startedAt: number;
  /**
   * Set when the call is paid by x402 (SPEC §19; handleHash and reservationId are then empty): only the
   * replica holding the payment can settle it, so a stream elsewhere never concludes it; a settled
   * call's result is delivered with the settlement read from this authorization's record.
   */
  x402?: PaymentNonceKey;
}

/**
 * How long the registry remembers a priced request: an upstream may replay a stream for as long as its
 * session and event store live. A day outlives the sessions of the SDK servers we test against and every
 * replay window we know of; docs/decisions.md says what happens past it.
 */
export const PRICED_REQUEST_TTL_MS = 24 * 3_600_000;

// ── end of the priced-request registry ───────────────────────────────────────────────────────────

export interface DevLink {
  id: string;
  label: string;
  amount: string;
  currency: string;
  credits: number;
  expiresAt: number;
  status: 'active' | 'completed' | 'expired';
  receivedAmount: string | null;
}

// ── sessions bound to principals (SPEC §20) ──────────────────────────────────────────────────────────

/**
 * How long a session's binding outlives the session's last use (look-ups slide it). A session idle for
 * longer is, to every principal, gone (404): its client initialises a new one. A day outlives the idle
 * sessions of the SDK servers we test against.
 */
export const SESSION_BINDING_TTL_MS = 24 * 3_600_000;

// ── end of sessions bound to principals ──────────────────────────────────────────────────────────────

// ── idempotent results (SPEC §24) ───────────────────────────────────────────────────────────────────

/** What a call with an idempotency key writes into its slot when it is the first. */
export interface IdempotentClaim {
  /** Digest of payer, endpoint, tool and canonical arguments: the same key with another scope conflicts. */
  scope: string;
  /** A random id of this attempt: only it may finish or abandon the marker. */
  owner: string;
  /** How long the in-flight marker lives if its call never concludes (a crash): the call deadline and a margin. */
  runningTtlMs: number;
}

export type IdempotentBegin =
  | { kind: 'first' }
  | { kind: 'running' }
  /** The committed result as it was delivered (JSON text of the JSON-RPC `result`, receipt included). */
  | { kind: 'done'; result: string }
  | { kind: 'conflict' };

// ── end of idempotent results ───────────────────────────────────────────────────────────────────────
