// The decision for a priced tools/call (SPEC §6.2), in the order the SPEC gives it. `authorise` runs
// steps 2–6 and either answers (challenge / refusal) or holds a reservation; `conclude` runs step 7
// once the upstream has answered. server.ts's priced-call handler reads them top to bottom.
import { setTimeout as sleep } from 'node:timers/promises';
import { GatewayError } from '../errors.js';
import type { JsonObject, JsonRpcResponse } from '../mcp/jsonrpc.js';
import { isObject } from '../mcp/jsonrpc.js';
import { fingerprint } from '../observability/fingerprint.js';
import { createCallLogger, type CallLogger, type Logger } from '../observability/logger.js';
import type { Metrics, PaidOutcome } from '../observability/metrics.js';
import { recordPaidCall } from '../observability/tracing.js';
import { ProviderError, type PaymentProvider } from '../payments/provider.js';
import type { Observation, Settler } from '../payments/settle.js';
import { paymentIn, stripPayment } from '../payments/x402/payload.js';
import type { ChargeRecord, PricedRequestKey, PricedRequestRecord, SpendDecision, SpendRequest, Store, TaskKey, TaskRecord } from '../store/store.js';
import { recordedConclusion, taskEnd, type TaskMethod } from './tasks.js';
import { isBudgetExceeded, quotaCaller, type BudgetExceeded, type BudgetRequest, type QuotaHold, type Quotas } from './quotas.js';
import { challengeResult, refusalResult, RECEIPT_META_KEY, type ChallengeReason, type RefusalReason } from '../mcp/challenge.js';
import { resultKind } from '../mcp/result-kind.js';
import { challengeThrottleKey } from './client-key.js';
import { createHandleHasher, isWellFormedHandle, mintHandle, mintNonce } from './handles.js';
import { DEFAULT_IDEMPOTENCY, IdempotentCalls, type IdempotencySettings } from './idempotency.js';
import type { Authorisation, CallFacts, CallOutcome, Conclusion, HeldCall, PricedCall } from './outcome.js';
import { resumedX402Result, type X402Calls, type X402Held } from './x402-calls.js';

export interface PaywallSettings {
  argumentName: string;
  hashSecret: string;
  handleTtlMs: number;
  chargeTtlMs: number;
  callDeadlineMs: number;
  /** How long a priced call answered with a task may hold its credit (upstream.taskDeadline; default 1h). */
  taskDeadlineMs?: number;
  perHandle: { ratePerSecond: number; burst: number };
  challengesPerClient: { ratePerSecond: number; burst: number };
  /** §6.2 step 2: new checkout links per second over every replica (the provider's rate budget). */
  newChargesPerSecond: number;
  /** SPEC §24 (idempotency.ttl, idempotency.maxResultBytes); default 24h, 1 MiB. */
  idempotency?: IdempotencySettings;
}

export interface PaywallDeps {
  settings: PaywallSettings;
  store: Store;
  provider: PaymentProvider;
  settler: Settler;
  metrics: Metrics;
  logger: Logger;
  now: () => number;
  /** The x402 rail's side of each step (SPEC §19); absent when payments.x402 is off. */
  x402?: X402Calls | null;
  /** The endpoint this paywall guards (SPEC §18): `default`, or its `servers` key. Labels metrics and the call log line. */
  server?: string;
  /** Budgets and free allowances covering this endpoint's tools (SPEC §23); absent or inactive: none. */
  quotas?: Quotas | null;
}

/** A credit reservation's outcome with the budget draws held beside it (SPEC §23), or the budget it would go over. */
type ReserveDecision = (SpendDecision & { quotas?: QuotaHold | null }) | BudgetExceeded;

interface Settled {
  state: 'committed' | 'released' | 'unknown';
  remaining: number | null;
  /** This call moved the credits (false: concluded elsewhere first, or the store failed). */
  ours: boolean;
}

const DEADLINE_CHARGED = 'The tool did not finish in time and was stopped; the upstream had accepted the call, so its credit was spent. You may retry.';
const FAILED_CHARGED = 'The tool server accepted the call but its answer could not be read; the credit was spent. Retry later.';

const TASK_UNCONFIRMED = 'Payments are temporarily unavailable, so this task\'s result could not be confirmed as paid and is withheld. Ask for it again (tasks/result) in a moment: it is charged at most once.';

const OPENING_WAIT_MS = 5_000;
const DEFAULT_TASK_DEADLINE_MS = 3_600_000;
const OPENING_POLL_MS = 50;
/** The store bucket of the global cap on new charges (client keys start with "p:" or "ip:", so never this). */
const NEW_CHARGES_BUCKET = 'global:new-charges';

/** The global cap refused a new link: the caller answers rate_limited. */
interface BudgetRefusal {
  kind: 'budget_exhausted';
  retryAfterMs: number;
}

export class Paywall {
  readonly #deps: PaywallDeps;
  readonly #server: string;
  readonly #logCallLine: CallLogger;
  readonly #hashHandle: (handle: string) => string;
  readonly #idempotency: IdempotentCalls;
  /** prom-client label children, bound once per (tool, sku, outcome) / (sku, kind): a label lookup hashes its labels on every call. */
  readonly #paidCallCounters = new Map<string, Map<string, Map<PaidOutcome, { inc(): void }>>>();
  readonly #creditCounters = new Map<string, { spent: { inc(n: number): void }; refunded: { inc(n: number): void } }>();

  constructor(deps: PaywallDeps) {
    this.#deps = deps;
    this.#server = deps.server ?? 'default';
    this.#logCallLine = createCallLogger(deps.logger, this.#server);
    this.#hashHandle = createHandleHasher(deps.settings.hashSecret);
    this.#idempotency = this.#idempotentCalls();
  }

  /** A call with an idempotency key may be answered from its slot instead (§24, idempotency.ts). */
  async authorise(priced: PricedCall): Promise<Authorisation> {
    return this.#idempotency.authorise(priced, () => this.#authoriseCall(priced));
  }

  /** §6.2 steps 2–6. Never throws: store and provider failures become `payments_unavailable` (fail closed). */
  async #authoriseCall(priced: PricedCall): Promise<Authorisation> {
    const token = priced.call.args[this.#deps.settings.argumentName];
    const payment = paymentIn(priced.call.request.params);
    const facts: CallFacts = {
      rail: 'credits',
      tokenPresented: token !== undefined,
      tokenFingerprint: typeof token === 'string' ? fingerprint(token) : null,
      tokenRecognised: false,
    };
    // §19: an x402 payment and no handle → the call pays for itself; none of the handle steps run.
    // Otherwise a payment is ignored (stripped from what is forwarded) and the credit rail decides.
    if (this.#deps.x402?.takes(priced, token, payment)) return this.#deps.x402.authorise(priced, { ...facts, rail: 'x402' });
    try {
      // §23: a call within a free allowance goes upstream without a token and costs nothing.
      const free = await this.#takeAllowance(priced, facts);
      if (free) return free;
      // Step 2: no token (or not a string) → a new handle and a challenge.
      if (typeof token !== 'string') return await this.#challengeNewHandle(priced, 'payment_required', facts);
      // Step 3: unknown handle. A malformed one is unknown without a store round trip.
      if (!isWellFormedHandle(token)) return await this.#challengeNewHandle(priced, 'unknown_handle', facts);
      const handleHash = this.#hashHandle(token);
      const reservationId = mintNonce();
      let decision = await this.#reserve(priced, handleHash, reservationId);
      if (decision.kind === 'budget_exceeded') return await this.#refuseBudget(priced, decision, facts);
      if (decision.kind === 'unknown_handle') return await this.#challengeNewHandle(priced, 'unknown_handle', facts);
      facts.tokenRecognised = true;
      // Step 4: bound to another principal: refuse, disclose nothing, mint nothing.
      if (decision.kind === 'bound_to_other_principal') return await this.#refuse(priced, 'bound_to_other_principal', 'refused_bound', facts);
      // Step 5: the per-handle bucket, before any credit moves.
      if (decision.kind === 'rate_limited') {
        return await this.#refuse(priced, 'rate_limited', 'refused_rate_limited', facts, { retryAfterSeconds: Math.max(1, Math.ceil(decision.retryAfterMs / 1000)) });
      }
      // Step 6: short of credits → has the pending charge settled? Then reserve again. A payment that
      // lands after its charge was abandoned is still money received (§7.5): without webhooks this retry
      // is the only poll that can see it. Each read is at most one per 2 s per charge.
      if (decision.kind === 'insufficient' && decision.pending?.status === 'pending') decision = await this.#settleThenReserve(priced, handleHash, reservationId, decision, decision.pending);
      if (decision.kind === 'insufficient' && decision.lastCharge?.status === 'abandoned') decision = await this.#settleThenReserve(priced, handleHash, reservationId, decision, decision.lastCharge);
      if (decision.kind === 'budget_exceeded') return await this.#refuseBudget(priced, decision, facts);
      if (decision.kind === 'reserved') {
        return { kind: 'reserved', handleHash, reservationId, forwardParams: this.#forwardParams(priced), facts, quotas: decision.quotas ?? null };
      }
      // The second reserve takes no token, so only a handle that vanished in between lands here.
      if (decision.kind !== 'insufficient') return await this.#challengeNewHandle(priced, 'unknown_handle', facts);
      return await this.#challengeExistingHandle(priced, token, handleHash, challengeReason(decision), facts);
    } catch (error) {
      this.#countFailure(priced, error);
      return this.#refuse(priced, 'payments_unavailable', 'refused_unavailable', facts);
    }
  }

  /**
   * §6.2 step 7 and §6.5: commit or release by the tool's charge policy; the final message to send
   * (null: the upstream's 4xx was relayed as it came). No successful result goes out unless its credit
   * was committed: when the commit fails (the store is down) or finds the reservation already released,
   * the result is withheld. A registered call (it has an upstream session, so its stream could be
   * resumed elsewhere) may have been concluded by a resumed stream first: the registry says how.
   */
  async conclude(priced: PricedCall, held: HeldCall, outcome: CallOutcome, registration: PricedRequestKey | null): Promise<Conclusion> {
    return this.#idempotency.concluded(priced, await this.#concludeCall(priced, held, outcome, registration));
  }

  async #concludeCall(priced: PricedCall, held: HeldCall, outcome: CallOutcome, registration: PricedRequestKey | null): Promise<Conclusion> {
    const { sku, cost, charge } = priced.price;
    // An input_required answer is not a finished result, whatever the charge policy: released, passed on
    // as it came (no receipt); the client's continuation is the call that pays (§24).
    const kind = outcome.kind === 'answered' ? resultKind(outcome.message) : null;
    // A task: the credit stays reserved until the task's outcome (§24); the creation answer goes as it came.
    if (kind?.kind === 'task' && held.kind === 'reserved' && outcome.kind === 'answered') return this.#holdTask(priced, held, outcome.message, kind.taskId);
    const unfinished = kind?.kind === 'input_required';
    const succeeded = outcome.kind === 'answered' && !unfinished && isSuccess(outcome.message);
    const accepted = !unfinished && (outcome.kind === 'answered' || (outcome.kind !== 'http_refusal' && outcome.accepted));
    const keep = charge === 'attempt' ? accepted : succeeded;
    // The same policy decides for an x402-paid call whether its payment is settled (§19), and whether a free call is used (§23).
    if (held.kind === 'x402') return this.#concludeX402(priced, held, outcome, keep, registration);
    if (held.kind === 'allowance') return this.#concludeAllowance(priced, held, outcome, keep, succeeded, registration);

    const settled = await this.#settle(held.handleHash, held.reservationId, keep, registration, { sku, cost, tool: this.#recordedTool(priced.call.name), reqId: priced.reqId }, held.quotas);
    const spent = settled.ours && settled.state === 'committed' ? cost : 0;
    const logOutcome: PaidOutcome = unfinished ? 'input_required' : outcome.kind === 'deadline' ? 'deadline_exceeded' : outcome.kind === 'answered' ? 'authorised' : 'upstream_error';
    if (settled.ours || settled.state === 'unknown') this.#logCall(priced, logOutcome, held.facts, spent, held.reservationId);

    const state = settled.state;
    return { state, message: await this.#finalMessage(priced, outcome, succeeded, settled) };
  }

  /** The store's record of a task a priced call created: whose credit it holds (none for x402 and allowance calls), until when, for whom. */
  #taskRecord(priced: PricedCall, held: HeldCall): TaskRecord {
    const { sku, cost, charge } = priced.price;
    return {
      handleHash: held.kind === 'reserved' ? held.handleHash : '',
      reservationId: held.kind === 'reserved' ? held.reservationId : '',
      tool: this.#recordedTool(priced.call.name),
      sku,
      cost,
      charge,
      owner: priced.taskOwner ?? '',
      deadline: this.#deps.now() + (this.#deps.settings.taskDeadlineMs ?? DEFAULT_TASK_DEADLINE_MS),
      fingerprint: held.facts.tokenFingerprint,
      startedAt: priced.startedAt,
      ...(held.kind === 'reserved' && held.quotas ? { quotas: held.quotas } : {}),
    };
  }

  /**
   * §24: a task the upstream created for a priced call the gateway had already concluded at its deadline
   * (the creation answered late). It is recorded as that call was concluded — released, so reading it
   * (its id found through the upstream's tasks/list) is refused instead of served as an unpriced task's;
   * committed under `charge: attempt`, so the payer reads it without paying again. A conclusion the store
   * could not confirm counts as released (fail closed).
   */
  async recordLateTask(priced: PricedCall, held: HeldCall, taskId: string, state: Conclusion['state']): Promise<void> {
    await this.#recordConcludedTask(priced, { scope: this.#server, taskId }, this.#taskRecord(priced, held), state === 'committed' ? 'committed' : 'released');
  }

  /** Records a task as already concluded (unless it is recorded); a store failure is counted, and a read of the task then fails closed. */
  async #recordConcludedTask(priced: PricedCall, key: TaskKey, record: TaskRecord, state: 'committed' | 'released'): Promise<void> {
    await this.#deps.store.recordConcludedTask(key, { ...record, state, remaining: null }).catch((error: unknown) => this.#countStoreFailure(priced.reqId, error, 'recordConcludedTask'));
  }

  async #holdTask(priced: PricedCall, held: Extract<HeldCall, { kind: 'reserved' }>, message: JsonRpcResponse, taskId: string): Promise<Conclusion> {
    const { sku, cost } = priced.price;
    const id = priced.call.request.id ?? null;
    const record = this.#taskRecord(priced, held);
    const key = { scope: this.#server, taskId };
    try {
      if (await this.#deps.store.holdTask(key, record)) {
        // The budget draws are held to the task's end too (released by the stale sweep after it, like the credit).
        if (held.quotas) await this.#deps.quotas?.extend(held.quotas, record.deadline + 5_000);
        return { state: 'held', message };
      }
      if (held.quotas) await this.#concludeQuotas(held.quotas, 'released', priced.reqId);
      // The reservation was released before the task was recorded (the call deadline): the task is not
      // paid for, and is recorded as released so that nobody reads it as an unpriced task's.
      await this.#recordConcludedTask(priced, key, record, 'released');
      this.#logCall(priced, 'deadline_exceeded', held.facts, 0);
      return { state: 'released', message: { jsonrpc: '2.0', id, result: refusalResult('deadline_exceeded', await priced.resultShape()) } };
    } catch (error) {
      // The task id is withheld (fail closed) and its credit goes back now. Its record, where it was
      // written, is concluded released first, so a caller who learns the id elsewhere (the upstream's
      // tasks/list) is refused its result at once rather than told to ask again until the record
      // expires. If these writes fail too, the reconciler releases the credit at its deadline (the
      // call's, or the task's when the hold was written but not acknowledged by the replicas).
      this.#countStoreFailure(priced.reqId, error, 'holdTask');
      const released: TaskRecord = { ...record, state: 'released', remaining: null };
      await this.#deps.store.concludeTask(key, released).then((concluded) => concluded || this.#deps.store.recordConcludedTask(key, released)).catch(() => false);
      await this.#settle(held.handleHash, held.reservationId, false, null, { sku, cost, tool: record.tool, reqId: priced.reqId }, held.quotas);
      return { state: 'unknown', message: { jsonrpc: '2.0', id, result: refusalResult('payments_unavailable', await priced.resultShape()) } };
    }
  }

  /**
   * §24: the task a tasks/* request names, when it holds a priced call's reservation on this endpoint
   * (null: an unpriced task, passed through as it is). A task created by someone else is answered as
   * unknown (TB_ERR_INVALID_PARAMS), disclosing nothing. A store failure throws (the caller refuses).
   */
  async heldTask(taskId: string, owner: string): Promise<{ key: TaskKey; record: TaskRecord } | null> {
    const key = { scope: this.#server, taskId };
    const record = await this.#deps.store.getTask(key);
    if (!record) return null;
    if (record.owner !== '' && record.owner !== owner) throw new GatewayError('TB_ERR_INVALID_PARAMS', 'Unknown task: no task with that id belongs to this caller');
    return { key, record };
  }

  /**
   * §24: an answer to tasks/result, tasks/get or tasks/cancel about a task holding a reservation. A
   * delivered result is committed (by the charge policy) and goes with its receipt; failed or cancelled
   * releases; anything else passes as it came. A result whose credit cannot be committed (released at
   * the task deadline, or the store failed) never goes out: a refusal replaces it.
   */
  async concludeTask(key: TaskKey, record: TaskRecord, method: TaskMethod, message: JsonRpcResponse, resultShape: PricedCall['resultShape']): Promise<JsonRpcResponse> {
    const end = taskEnd(method, message);
    if (end.kind === 'open') return message;
    const { sku, cost } = record;
    const pastDeadline = this.#deps.now() > record.deadline;
    const delivers = end.kind === 'result' && end.succeeded;
    const keep = !pastDeadline && (record.charge === 'attempt' ? end.kind !== 'cancelled' : delivers);
    // Concluded before (an earlier read, on any replica): that conclusion stands, nothing moves again.
    let settled: Settled = record.state ? { state: record.state, remaining: record.remaining ?? null, ours: false } : await this.#settleTask(key, record, keep);
    // §23: the read that moved the credit (or could not tell: fail closed, counted) concludes the budget draws too.
    if (record.quotas && !record.state && (settled.ours || settled.state === 'unknown')) await this.#concludeQuotas(record.quotas, settled.state);
    if (settled.ours) {
      const outcome: PaidOutcome = pastDeadline ? 'deadline_exceeded' : delivers ? 'authorised' : 'upstream_error';
      this.#logLine({ tool: record.tool, sku, facts: { rail: 'credits', tokenPresented: true, tokenFingerprint: record.fingerprint, tokenRecognised: true }, outcome, cost: settled.state === 'committed' ? cost : 0, startedAt: record.startedAt, resumed: true, ref: record.reservationId });
    } else if (!record.state && settled.state === 'released' && settled.remaining === null) {
      // The reservation was gone: a concurrent read of this task released it (cancelled, failed), or the reconciler did.
      const recorded = await recordedConclusion(this.#deps.store, key, !pastDeadline).catch(() => null);
      settled = recorded ? { ...recorded, ours: false } : { state: pastDeadline ? 'released' : 'unknown', remaining: null, ours: false };
    }
    if (settled.state === 'committed') return delivers ? withReceipt(message, { sku, cost, remaining: settled.remaining }) : message;
    if (!delivers) return message; // a failure, a cancellation: nothing to withhold
    if (settled.state === 'unknown') return { jsonrpc: '2.0', id: message.id ?? null, result: refusalResult('payments_unavailable', await resultShape(), { text: TASK_UNCONFIRMED }) };
    return { jsonrpc: '2.0', id: message.id ?? null, result: refusalResult('deadline_exceeded', await resultShape()) };
  }

  /**
   * Commits (keep) or releases a task's reservation under one attempt id per task: every read that
   * concludes it — two at once, or one retried after a store timeout whose write landed — gets the first
   * conclusion's answer (for 60 s, the store's operation records), and none applies twice. The read that
   * records the conclusion first (store.concludeTask) is the one that counts and logs it.
   */
  async #settleTask(key: TaskKey, record: TaskRecord, keep: boolean): Promise<Settled> {
    const { store } = this.#deps;
    const attempt = `task:${record.reservationId}`;
    try {
      const remaining = keep ? await store.commit(record.handleHash, record.reservationId, record.tool, attempt) : await store.release(record.handleHash, record.reservationId, attempt);
      if (remaining === null) return { state: 'released', remaining: null, ours: false };
      const state = keep ? 'committed' : 'released';
      // A record that cannot be written still leaves the credits moved: this read counts them.
      const first = await store.concludeTask(key, { ...record, state, remaining }).catch((error: unknown) => (this.#countStoreFailure(undefined, error, 'concludeTask'), true));
      if (first) this.#creditCounter(record.sku)[keep ? 'spent' : 'refunded'].inc(record.cost);
      return { state, remaining, ours: first };
    } catch (error) {
      this.#countStoreFailure(undefined, error, keep ? 'commit' : 'release');
      return { state: 'unknown', remaining: null, ours: false };
    }
  }

  async #finalMessage(priced: PricedCall, outcome: CallOutcome, succeeded: boolean, settled: Settled): Promise<JsonRpcResponse | null> {
    const id = priced.call.request.id ?? null;
    const { sku, cost } = priced.price;
    // A refunded call's refusal says what the handle holds now, as a receipt would (the agent need not call again to learn it).
    const refund = settled.state === 'released' && settled.remaining !== null ? { details: { sku, remaining: settled.remaining } } : {};
    switch (outcome.kind) {
      case 'answered':
        if (!succeeded) return outcome.message; // an error or isError result carries nothing to withhold
        if (settled.state === 'committed') return withReceipt(outcome.message, { sku, cost, remaining: settled.remaining });
        if (settled.state === 'unknown') return { jsonrpc: '2.0', id, result: refusalResult('payments_unavailable', await priced.resultShape()) };
        // Released before this result arrived (the deadline, on this replica or the reconciler's sweep).
        return { jsonrpc: '2.0', id, result: refusalResult('deadline_exceeded', await priced.resultShape(), refund) };
      case 'http_refusal':
        return null;
      case 'deadline':
        return { jsonrpc: '2.0', id, result: refusalResult('deadline_exceeded', await priced.resultShape(), settled.state === 'committed' ? { text: DEADLINE_CHARGED } : refund) };
      case 'failed':
        return { jsonrpc: '2.0', id, result: refusalResult('upstream_unavailable', await priced.resultShape(), settled.state === 'committed' ? { text: FAILED_CHARGED } : refund) };
    }
  }

  /**
   * §6.5 on a stream that is not the priced request's own — a GET stream, a Last-Event-ID replay,
   * another request's POST — for a response to a registered priced request: what reaches the client.
   * Committed: the result, with its receipt. Released: nothing. In flight (the upstream moved the
   * request's stream here, or the owner is still waiting): concluded here on what the response says,
   * exactly as the owner would have (commit and release are idempotent by reservation id, so whichever
   * of the two concludes first decides, and the other finds the reservation gone and reads the registry).
   */
  async concludeResumed(key: PricedRequestKey, record: PricedRequestRecord, message: JsonRpcResponse): Promise<JsonRpcResponse | null> {
    // An x402-paid call is settled only by the exchange holding its payment: here it is delivered if settled, else dropped.
    if (record.x402) return resumedX402Result(this.#deps.store, record, message);
    // A free call (§23) is concluded only by the exchange that holds it: delivered here once it was, else dropped.
    if (record.allowance !== undefined) return record.state === 'committed' ? message : null;
    const { sku, cost } = record;
    const unfinished = resultKind(message).kind === 'input_required';
    const succeeded = !unfinished && isSuccess(message);
    if (record.state === 'committed') return succeeded ? withReceipt(message, { sku, cost, remaining: record.remaining }) : message;
    if (record.state === 'released') return null;
    const pastDeadline = this.#deps.now() > record.deadline;
    const keep = !pastDeadline && !unfinished && (record.charge === 'attempt' || succeeded);
    const settled = await this.#settle(record.handleHash, record.reservationId, keep, key, { sku, cost, tool: record.tool }, record.quotas);
    if (settled.ours) {
      const outcome: PaidOutcome = pastDeadline ? 'deadline_exceeded' : unfinished ? 'input_required' : succeeded ? 'authorised' : 'upstream_error';
      this.#logLine({ tool: record.tool, sku, facts: { rail: 'credits', tokenPresented: true, tokenFingerprint: record.fingerprint, tokenRecognised: true }, outcome, cost: settled.state === 'committed' ? cost : 0, startedAt: record.startedAt, resumed: true, ref: record.reservationId });
    }
    if (settled.state === 'committed') return succeeded ? withReceipt(message, { sku, cost, remaining: settled.remaining }) : message;
    // Released here for an error result: the client may see the error. Released at the deadline, by
    // another concluder, or unknown (the store failed): the response is dropped.
    return settled.ours && !pastDeadline && !succeeded ? message : null;
  }

  /**
   * Commits (keep) or releases one reservation and, for a registered call, records the conclusion.
   * `ours` is true when this call moved the credits; otherwise the reservation was already concluded
   * elsewhere and the registry (or, without one, "released") says how. 'unknown': the store failed.
   * The call's budget draws (§23) end the way its credit did: in the credit's own step where the store
   * can take them there and the credit moved now, else by a conclusion of their own after it.
   */
  async #settle(
    handleHash: string,
    reservationId: string,
    keep: boolean,
    registration: PricedRequestKey | null,
    context: { sku: string; cost: number; tool: string; reqId?: string | undefined },
    quotas: QuotaHold | null | undefined,
  ): Promise<Settled> {
    const withCredit = quotas && this.#deps.store.quotasWithCredits ? quotas : undefined;
    const settled = await this.#settleCredit(handleHash, reservationId, keep, registration, context, withCredit);
    if (quotas && !(withCredit && settled.ours)) await this.#concludeQuotas(quotas, settled.state, context.reqId);
    return settled;
  }

  async #settleCredit(
    handleHash: string,
    reservationId: string,
    keep: boolean,
    registration: PricedRequestKey | null,
    context: { sku: string; cost: number; tool: string; reqId?: string | undefined },
    quotas: QuotaHold | undefined,
  ): Promise<Settled> {
    const { store } = this.#deps;
    try {
      const remaining = keep ? await store.commit(handleHash, reservationId, context.tool, undefined, quotas) : await store.release(handleHash, reservationId, undefined, quotas);
      if (remaining !== null) {
        this.#creditCounter(context.sku)[keep ? 'spent' : 'refunded'].inc(context.cost);
        if (registration) this.#background('concludePricedRequest', store.concludePricedRequest(registration, keep ? 'committed' : 'released', keep ? remaining : null));
        return { state: keep ? 'committed' : 'released', remaining, ours: true };
      }
      if (!registration) return { state: 'released', remaining: null, ours: false };
      const record = await store.getPricedRequest(registration);
      if (record?.state === 'committed') return { state: 'committed', remaining: record.remaining, ours: false };
      // Gone without a recorded commit: released (by the reconciler after a crash, or a conclusion whose registry write is still on its way).
      if (record?.state === 'in_flight') this.#background('concludePricedRequest', store.concludePricedRequest(registration, 'released', null));
      return { state: 'released', remaining: null, ours: false };
    } catch (error) {
      // The reconciler releases the reservation after its deadline: the payer is never charged for this.
      this.#countStoreFailure(context.reqId, error, keep ? 'commit' : 'release', reservationId);
      return { state: 'unknown', remaining: null, ours: false };
    }
  }

  async #concludeX402(priced: PricedCall, held: X402Held, outcome: CallOutcome, wouldCommit: boolean, registration: PricedRequestKey | null): Promise<Conclusion> {
    const concluded = await (this.#deps.x402 as X402Calls).conclude(priced, held, outcome, wouldCommit, registration);
    const { payer, network, amount } = held.claim.logFields();
    this.#logLine({ reqId: priced.reqId, tool: priced.call.name, sku: priced.price.sku, facts: held.facts, outcome: concluded.logOutcome, cost: 0, startedAt: priced.startedAt, x402: { payer, network, amount, settled: concluded.settled } });
    return { state: concluded.state, message: concluded.message };
  }

  #idempotentCalls(): IdempotentCalls {
    const { settings, store, metrics, logger, now } = this.#deps;
    return new IdempotentCalls({
      settings: settings.idempotency ?? DEFAULT_IDEMPOTENCY,
      callDeadlineMs: settings.callDeadlineMs,
      argumentName: settings.argumentName,
      store,
      metrics,
      logger,
      now,
      server: this.#server,
      hashHandle: this.#hashHandle,
      // A verified payment that a kept result answers is concluded unsettled: the payer keeps it.
      releaseX402: async (priced, held) => void (await (this.#deps.x402 as X402Calls).conclude(priced, held, { kind: 'failed', accepted: false }, false, null)),
    });
  }

  /** Logs and counts an answer the gateway gave itself (challenge or refusal). */
  recordAnswer(priced: PricedCall, answer: Extract<Authorisation, { kind: 'answer' }>): void {
    this.#logCall(priced, answer.outcome, answer.facts, 0);
  }

  /**
   * Asks the provider about one charge; a settled charge means reserving again, an underpaid one is
   * final for its link (§7.4), a dead or past-TTL one is abandoned (§7.2/§7.6): the challenge then
   * opens a new link. A charge that cannot be read is not a reason to refuse once it is past its TTL
   * or abandoned: its link is not shown again anyway, and the reconciler keeps polling it.
   */
  async #settleThenReserve(
    priced: PricedCall,
    handleHash: string,
    reservationId: string,
    decision: Extract<SpendDecision, { kind: 'insufficient' }>,
    charge: ChargeRecord,
  ): Promise<ReserveDecision> {
    const withoutPending = (status: ChargeRecord['status']): Extract<SpendDecision, { kind: 'insufficient' }> => ({
      ...decision,
      pending: decision.pending?.nonce === charge.nonce ? null : decision.pending,
      lastCharge: { ...charge, status },
    });
    let observation: Observation;
    try {
      observation = await this.#deps.settler.observe(charge, { awaitOtherRead: true });
    } catch (error) {
      if (charge.status === 'pending' && charge.expiresAt > this.#deps.now()) throw error; // its link would be shown: refuse instead
      this.#deps.logger.info(
        { evt: 'charge_unreadable', reqId: priced.reqId, code: failureCode(error) },
        'the payment provider could not be read for a charge past its TTL; a new link is shown and the reconciler keeps polling the old one',
      );
      return charge.status === 'pending' ? withoutPending('abandoned') : decision;
    }
    if (observation === 'granted' || observation === 'already_settled') return this.#reserve(priced, handleHash, reservationId, false);
    if (observation === 'underpaid') return withoutPending('underpaid');
    if (observation === 'abandoned') return withoutPending('abandoned');
    return decision;
  }

  /** @param takeToken false for the second reserve of a call that just settled a charge (one call, one token) */
  async #reserve(priced: PricedCall, handleHash: string, reservationId: string, takeToken = true): Promise<ReserveDecision> {
    const { settings, store, now } = this.#deps;
    const reservationDeadline = now() + settings.callDeadlineMs + 5_000;
    // §23: the budgets counting this call (a second reserve after a settlement holds them anew, under its own id).
    const budgets = this.#budgetRequest(priced, handleHash, takeToken ? reservationId : `${reservationId}:settled`, reservationDeadline);
    const request: SpendRequest = {
      handleHash,
      principal: priced.principal,
      sku: priced.price.sku,
      cost: priced.price.cost,
      reservationId,
      reservationDeadline,
      ttlMs: settings.handleTtlMs,
      bucket: takeToken ? settings.perHandle : null,
    };
    if (budgets) {
      if (!store.quotasWithCredits) return this.#reserveBesideBudgets(priced, request, budgets);
      // One atomic step: a budget over its cap refuses before the rate token and the credit; it is drawn only with the credit.
      request.quotas = budgets.request;
    }
    const decision = await store.reserve(request);
    if (decision.kind === 'quota_exceeded') return (this.#deps.quotas as Quotas).refusal(decision);
    // Written out, not spread: `{ ...decision, quotas }` takes V8's slow path (≈1 µs on Node 20) on every paid call.
    return decision.kind === 'reserved' ? { kind: 'reserved', remaining: decision.remaining, quotas: budgets?.hold ?? null } : decision;
  }

  /**
   * Redis Cluster (§23's cross-slot order): the budgets are held first, in their own slots, so a call over
   * a cap takes no rate token and moves no credit, and given back unless the credit is reserved. A crash
   * in between leaves a hold the stale sweep gives back after the reservation deadline.
   */
  async #reserveBesideBudgets(priced: PricedCall, request: SpendRequest, budgets: BudgetRequest): Promise<ReserveDecision> {
    const held = await (this.#deps.quotas as Quotas).hold(budgets);
    if (isBudgetExceeded(held)) return held;
    let decision: SpendDecision;
    try {
      decision = await this.#deps.store.reserve(request);
    } catch (error) {
      await this.#concludeQuotas(held, 'released', priced.reqId);
      throw error;
    }
    if (decision.kind !== 'reserved') await this.#concludeQuotas(held, 'released', priced.reqId);
    return decision.kind === 'reserved' ? { ...decision, quotas: held } : decision;
  }

  // ── budgets and allowances (SPEC §23; paywall/quotas.ts) ──────────────────────────────────────────

  #budgetRequest(priced: PricedCall, handleHash: string, holdId: string, deadline: number): BudgetRequest | null {
    const quotas = this.#deps.quotas;
    if (!quotas?.active) return null;
    return quotas.budgetRequest({ tool: priced.call.name, sku: priced.price.sku, cost: priced.price.cost }, quotaCaller(priced, handleHash), holdId, deadline);
  }

  /** A free call of the allowance covering this call (its token, if any, stripped and not charged), a budget refusal, or null: the usual path. */
  async #takeAllowance(priced: PricedCall, facts: CallFacts): Promise<Authorisation | null> {
    const quotas = this.#deps.quotas;
    // Budgets alone: no free call to take, so no hold id to mint (a random nonce per call) and no store step.
    if (!quotas?.hasAllowances) return null;
    const deadline = this.#deps.now() + this.#deps.settings.callDeadlineMs + 5_000;
    const hold = await quotas.holdAllowance({ tool: priced.call.name, sku: priced.price.sku, cost: priced.price.cost }, quotaCaller(priced, null), mintNonce(), deadline);
    if (hold === null) return null;
    if (isBudgetExceeded(hold)) return this.#refuseBudget(priced, hold, facts);
    return { kind: 'allowance', hold, forwardParams: this.#forwardParams(priced), facts };
  }

  /**
   * Commits or releases a call's draws as its credit went. 'unknown' (the store failed around the commit,
   * so the credit may be spent) counts them: a cap must never be exceeded, so a budget fails closed like
   * money (at worst one call that never ran is counted). Seen in test/e2e/budgets-replicas: leaving them
   * to the sweep let a saturated store's committed-but-unanswered calls go uncounted, 52 spent of 50.
   */
  async #concludeQuotas(hold: QuotaHold, state: Settled['state'] | 'held', reqId?: string): Promise<boolean> {
    if (state === 'held' || !this.#deps.quotas) return false;
    try {
      await this.#deps.quotas.conclude(hold, state !== 'released');
      return true;
    } catch (error) {
      // The stale sweep gives the draws back after their deadline: a budget may then count this call late, never twice.
      this.#countStoreFailure(reqId, error, state === 'released' ? 'releaseQuotas' : 'commitQuotas');
      return false;
    }
  }

  /** §23: a free call ends like a paid one (same charge policy), with a receipt naming its allowance instead of a balance. */
  async #concludeAllowance(priced: PricedCall, held: Extract<HeldCall, { kind: 'allowance' }>, outcome: CallOutcome, keep: boolean, succeeded: boolean, registration: PricedRequestKey | null): Promise<Conclusion> {
    const quotas = this.#deps.quotas as Quotas;
    const concluded = await this.#concludeQuotas(held.hold, keep ? 'committed' : 'released', priced.reqId);
    const state: Conclusion['state'] = concluded ? (keep ? 'committed' : 'released') : 'unknown';
    if (registration && state !== 'unknown') this.#background('concludePricedRequest', this.#deps.store.concludePricedRequest(registration, state, null));
    if (state === 'committed') this.#deps.metrics.allowanceCalls.inc({ allowance: held.hold.allowance });
    const failed: PaidOutcome = outcome.kind === 'deadline' ? 'deadline_exceeded' : 'upstream_error';
    this.#logCall(priced, state === 'committed' ? 'allowance' : failed, held.facts, 0);
    if (state === 'committed' && succeeded && outcome.kind === 'answered') {
      const remaining = await quotas.allowanceRemaining(held.hold).catch(() => null);
      return { state, message: withReceipt(outcome.message, { sku: priced.price.sku, cost: 0, allowance: { name: held.hold.allowance, remaining } }) };
    }
    return { state, message: await this.#finalMessage(priced, outcome, succeeded, { state, remaining: null, ours: true }) };
  }

  async #refuseBudget(priced: PricedCall, exceeded: BudgetExceeded, facts: CallFacts): Promise<Authorisation> {
    this.#deps.metrics.budgetRefusals.inc({ budget: exceeded.budget });
    const details = { budget: exceeded.budget, resetsAt: new Date(exceeded.resetsAt).toISOString() };
    return { kind: 'answer', result: refusalResult('budget_exceeded', await priced.resultShape(), { retryAfterSeconds: exceeded.retryAfterSeconds, details }), outcome: 'refused_budget', facts };
  }

  /** The call's params as forwarded (§5.4): the token argument and any x402 payment stripped, nothing else changed. */
  #forwardParams(priced: PricedCall): JsonObject {
    const { [this.#deps.settings.argumentName]: _token, ...args } = priced.call.args;
    return stripPayment({ ...(priced.call.request.params as JsonObject), arguments: args });
  }

  // ── end of budgets and allowances ─────────────────────────────────────────────────────────────────

  /**
   * Step 2: the client's bucket (principal, IPv4 address or IPv6 /64), then the global cap on new
   * charges (a new handle always opens one), and only then a handle is minted: a refused flood leaves
   * nothing behind in the store.
   */
  async #challengeNewHandle(priced: PricedCall, reason: ChallengeReason, facts: CallFacts): Promise<Authorisation> {
    const { settings, store } = this.#deps;
    const throttle = await store.takeChallengeToken(challengeThrottleKey(priced.clientKey), settings.challengesPerClient);
    if (!throttle.allowed) return this.#refuseRateLimited(priced, facts, throttle.retryAfterMs);
    const budget = await this.#takeNewChargeBudget();
    if (budget) return this.#refuseRateLimited(priced, facts, budget.retryAfterMs);
    const handle = mintHandle();
    const handleHash = this.#hashHandle(handle);
    await store.createHandle({ handleHash, fingerprint: fingerprint(handle), principal: priced.principal, ttlMs: settings.handleTtlMs });
    return this.#challengeExistingHandle(priced, handle, handleHash, reason, facts, true);
  }

  /** One token of the global cap on new charges, or the refusal to answer with. */
  async #takeNewChargeBudget(): Promise<BudgetRefusal | null> {
    const rate = this.#deps.settings.newChargesPerSecond;
    const taken = await this.#deps.store.takeChallengeToken(NEW_CHARGES_BUCKET, { ratePerSecond: rate, burst: Math.max(1, Math.ceil(rate)) });
    return taken.allowed ? null : { kind: 'budget_exhausted', retryAfterMs: taken.retryAfterMs };
  }

  #refuseRateLimited(priced: PricedCall, facts: CallFacts, retryAfterMs: number): Promise<Authorisation> {
    return this.#refuse(priced, 'rate_limited', 'refused_rate_limited', facts, { retryAfterSeconds: Math.max(1, Math.ceil(retryAfterMs / 1000)) });
  }

  async #challengeExistingHandle(
    priced: PricedCall,
    handle: string,
    handleHash: string,
    reason: ChallengeReason,
    facts: CallFacts,
    budgetTaken = false,
  ): Promise<Authorisation> {
    // A pending charge the reservation read is shown through the store again (beginCharge answers it as
    // `existing`), never straight from that read: with durability replicated the store confirms its
    // replicas have it first. Shown from the read, a primary that resumed after being replaced handed out
    // a link its replacement never had (npm run chaos, Sentinel: 8 Moove payments never granted).
    const charge = await this.#chargeFor(priced, handleHash, budgetTaken);
    if ('kind' in charge) return this.#refuseRateLimited(priced, facts, charge.retryAfterMs);
    const shape = await priced.resultShape();
    const result = challengeResult(
      { reason, tool: priced.call.name, price: priced.price, checkoutUrl: charge.checkoutUrl as string, expiresAt: charge.expiresAt, handle, argumentName: this.#deps.settings.argumentName },
      shape,
    );
    // Both rails in one challenge (§19): PaymentRequired beside the checkout link when the SKU is offered x402.
    return { kind: 'answer', result: this.#deps.x402 ? this.#deps.x402.challengeAdditions(priced, shape, result) : result, outcome: 'challenged', facts };
  }

  /**
   * The handle's usable pending charge for this SKU, or a new one (one pending link per handle and
   * SKU, §6.5). Only a new one costs a token of the global cap (unless the caller took it already).
   */
  async #chargeFor(priced: PricedCall, handleHash: string, budgetTaken: boolean, awaited = false): Promise<ChargeRecord | BudgetRefusal> {
    const { settings, store, provider, metrics, now } = this.#deps;
    const { price } = priced;
    const begun = await store.beginCharge({
      handleHash,
      sku: price.sku,
      nonce: mintNonce(),
      snapshot: { label: price.label, amount: price.amount, currency: price.currency, credits: price.credits, tool: this.#recordedTool(priced.call.name) },
      now: now(),
      ttlMs: settings.chargeTtlMs,
      firstPollDelayMs: 3_000,
    });
    if (begun.kind === 'existing') {
      if (begun.charge.checkoutUrl) return begun.charge;
      if (awaited) throw new GatewayError('TB_ERR_PROVIDER', 'the checkout link being opened by another call did not appear in time');
      // Another caller is opening it: once its link is there, ask the store again, so the link shown is
      // one the store confirms (with durability replicated, acknowledged by the replicas).
      await this.#awaitLink(begun.charge);
      return this.#chargeFor(priced, handleHash, budgetTaken, true);
    }
    const charge = begun.charge;
    try {
      const budget = budgetTaken ? null : await this.#takeNewChargeBudget();
      if (budget) {
        await store.abortCharge(handleHash, charge.nonce);
        return budget;
      }
      const link = await provider.openCharge({
        nonce: charge.nonce,
        sku: price.sku,
        amount: charge.amount,
        currency: charge.currency,
        label: charge.label,
        credits: charge.credits,
        tool: priced.call.name,
        expiresAt: charge.expiresAt,
      });
      const attached = await store.attachLink(handleHash, charge.nonce, link);
      if (!attached?.checkoutUrl) throw new GatewayError('TB_ERR_STORE_UNAVAILABLE', 'the new charge vanished before its link was stored');
      metrics.chargesOpened.inc({ sku: price.sku });
      return attached;
    } catch (error) {
      await store.abortCharge(handleHash, charge.nonce).catch(() => undefined);
      throw error;
    }
  }

  /** Another caller (any replica) is opening this handle's link: wait briefly for it. */
  async #awaitLink(charge: ChargeRecord): Promise<void> {
    const deadline = this.#deps.now() + OPENING_WAIT_MS;
    let current: ChargeRecord | null = charge;
    while (current && !current.checkoutUrl && this.#deps.now() < deadline) {
      await sleep(OPENING_POLL_MS);
      current = await this.#deps.store.getCharge(charge.handleHash, charge.nonce);
    }
    if (!current?.checkoutUrl) throw new GatewayError('TB_ERR_PROVIDER', 'the checkout link being opened by another call did not appear in time');
  }

  async #refuse(priced: PricedCall, reason: RefusalReason, outcome: PaidOutcome, facts: CallFacts, options: { retryAfterSeconds?: number } = {}): Promise<Authorisation> {
    return { kind: 'answer', result: refusalResult(reason, await priced.resultShape(), options), outcome, facts };
  }

  #countFailure(priced: PricedCall, error: unknown, op = 'authorise'): void {
    this.#countStoreFailure(priced.reqId, error, op);
  }

  /** `ref`: the reservation id of a commit or release whose outcome is unknown (the spend, if it ran, carries it). */
  #countStoreFailure(reqId: string | undefined, error: unknown, op: string, ref?: string): void {
    const code = failureCode(error);
    if (error instanceof GatewayError && error.code === 'TB_ERR_STORE_UNAVAILABLE') this.#deps.metrics.storeErrors.inc({ op });
    this.#deps.logger.warn({ evt: 'paywall_unavailable', reqId, op, code, ref }, 'a priced call was refused or withheld because the store or the payment provider failed');
  }

  /** A registry write that must not delay the answer; a failure only weakens what a later resumed stream can prove (it then drops). */
  #background(op: string, work: Promise<unknown>): void {
    work.catch((error: unknown) => this.#countStoreFailure(undefined, error, op));
  }

  /** The tool as charges and ledger entries record it (admin output): `<server>/<tool>` outside the default endpoint (SPEC §18). */
  #recordedTool(name: string): string {
    const server = this.#server;
    return server === 'default' ? name : `${server}/${name}`;
  }

  #logCall(priced: PricedCall, outcome: PaidOutcome, facts: CallFacts, cost: number, ref?: string): void {
    this.#logLine({ reqId: priced.reqId, tool: priced.call.name, sku: priced.price.sku, facts, outcome, cost, startedAt: priced.startedAt, ref });
  }

  /** The one log line (and counter) of a priced call (SPEC §10), wherever it is concluded. */
  #logLine(line: { reqId?: string | undefined; tool: string; sku: string; facts: CallFacts; outcome: PaidOutcome; cost: number; startedAt: number; resumed?: boolean; ref?: string | undefined; x402?: { payer: string; network: string; amount: string; settled: boolean } }): void {
    this.#paidCallCounter(line.tool, line.sku, line.outcome).inc();
    recordPaidCall(line.tool, line.sku, line.outcome, line.cost);
    // An x402-paid call adds payer (shortened), network, amount (atomic units) and settled: never the payment or its signature.
    const { facts } = line;
    this.#logCallLine({
      reqId: line.reqId,
      tool: line.tool,
      sku: line.sku,
      rail: facts.rail,
      tokenPresented: facts.tokenPresented,
      tokenFingerprint: facts.tokenFingerprint,
      tokenRecognised: facts.tokenRecognised,
      outcome: line.outcome,
      cost: line.cost,
      durationMs: this.#deps.now() - line.startedAt,
      resumed: line.resumed,
      ref: line.ref,
      x402: line.x402,
    });
  }

  #paidCallCounter(tool: string, sku: string, outcome: PaidOutcome): { inc(): void } {
    let bySku = this.#paidCallCounters.get(tool);
    if (!bySku) this.#paidCallCounters.set(tool, (bySku = new Map<string, Map<PaidOutcome, { inc(): void }>>()));
    let byOutcome = bySku.get(sku);
    if (!byOutcome) bySku.set(sku, (byOutcome = new Map<PaidOutcome, { inc(): void }>()));
    let counter = byOutcome.get(outcome);
    if (!counter) byOutcome.set(outcome, (counter = this.#deps.metrics.paidCalls.labels(this.#server, tool, sku, outcome)));
    return counter;
  }

  #creditCounter(sku: string): { spent: { inc(n: number): void }; refunded: { inc(n: number): void } } {
    let counters = this.#creditCounters.get(sku);
    if (!counters) {
      const credits = this.#deps.metrics.credits;
      this.#creditCounters.set(sku, (counters = { spent: credits.labels(sku, 'spent'), refunded: credits.labels(sku, 'refunded') }));
    }
    return counters;
  }
}

/** A result without isError: what a paid call is charged for under `charge: success`. */
function isSuccess(message: JsonRpcResponse): boolean {
  return isObject(message.result) && message.result.isError !== true;
}

/** The result with `_meta["xyz.tollbooth/receipt"]` (§6.2 step 7); `remaining` is the balance after this call's commit. */
function withReceipt(message: JsonRpcResponse, receipt: { sku: string; cost: number; remaining?: number | null; allowance?: { name: string; remaining: number | null } }): JsonRpcResponse {
  const result = message.result as JsonObject;
  const meta = isObject(result._meta) ? result._meta : {};
  return { ...message, result: { ...result, _meta: { ...meta, [RECEIPT_META_KEY]: receipt } } };
}

/** A failure's stable code for logs: the gateway code, or provider_<kind>. */
function failureCode(error: unknown): string {
  if (error instanceof ProviderError) return `provider_${error.kind}`;
  return error instanceof GatewayError ? error.code : 'unknown';
}

function challengeReason(decision: Extract<SpendDecision, { kind: 'insufficient' }>): ChallengeReason {
  if (decision.lastCharge?.status === 'underpaid') return 'underpaid';
  return decision.funded ? 'credits_exhausted' : 'payment_required';
}
