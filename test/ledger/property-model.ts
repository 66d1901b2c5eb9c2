// Property (SPEC §17): whatever the interleaving of challenges, payments (full, partial, under the
// minimum), concurrent paid calls with every ending (success, isError, JSON-RPC error, deadline,
// the client gone while the tool finishes, upstream failures, HTTP refusal; `success` and `attempt`
// tools), operator grants,
// gateway crashes mid-call, reconciler passes and handle expiry, afterwards
//   - `ledger verify` agrees (every handle's entries add up to its balance plus reservations),
//   - the spend entries add up to exactly the calls the upstream carried out and that were charged,
//   - one grant entry per claimed charge, adding up to what the charges granted,
//   - the adjust entries add up to the operator grants,
// and an oracle model, kept apart from the store and its ledger, agrees:
//   - payment policy: every claimed charge granted what the policy says for the amount received
//     (full pack, pro rata above the minimum, nothing under it: 5.00 → 20, 2.50 → 10, 0.10 → 0),
//   - each live handle holds exactly what its charges granted plus its operator grants minus the
//     credits of its charged calls.
// The Paywall, Settler and Reconciler run for real on each store (memory, Redis, Redis Cluster) with
// the dev provider; only the upstream's answer is chosen by the generator. Payments settle on the
// agent's retry, a reconciler pass or a webhook (the provider's notice, re-read by ref).
// Negative controls (test/ledger/property-controls.test.ts): stores that double-grant, lose a commit
// or grant a partial payment in full fail this property.
import fc from 'fast-check';
import type { ToolCall } from '../../src/mcp/classify.js';
import type { JsonRpcResponse } from '../../src/mcp/jsonrpc.js';
import type { PriceTag } from '../../src/mcp/tools-list.js';
import { createLogger } from '../../src/observability/logger.js';
import { createMetrics } from '../../src/observability/metrics.js';
import { DevProvider } from '../../src/payments/dev.js';
import { Reconciler } from '../../src/payments/reconciler.js';
import { Settler } from '../../src/payments/settle.js';
import { CHALLENGE_META_KEY, RECEIPT_META_KEY } from '../../src/mcp/challenge.js';
import { Paywall } from '../../src/paywall/decide.js';
import type { Authorisation, CallOutcome, PricedCall } from '../../src/paywall/outcome.js';
import type { Store } from '../../src/store/store.js';
import { allEntries, expireAll, verified } from '../store/ledger-conformance.js';
import { skippingClock } from '../helpers/clock.js';

const HOUR = 3_600_000;
const MINUTE = 60_000;
const CALL_DEADLINE_MS = 20_000;
const PAYERS = 2;

type Ending = 'success' | 'is_error' | 'jsonrpc_error' | 'deadline' | 'deadline_unaccepted' | 'client_gone_completed' | 'failed_refused' | 'failed_5xx' | 'http_refusal';
const ENDINGS: Ending[] = ['success', 'is_error', 'jsonrpc_error', 'deadline', 'deadline_unaccepted', 'client_gone_completed', 'failed_refused', 'failed_5xx', 'http_refusal'];

type Command =
  | { op: 'challenge'; payer: number }
  | { op: 'pay'; payer: number; received: '5.00' | '2.50' | '0.10' }
  | { op: 'fund'; payer: number; received: '5.00' | '2.50' | '0.10' }
  | { op: 'calls'; payer: number; charge: 'success' | 'attempt'; cost: 1 | 2; endings: Ending[]; withTick: boolean }
  | { op: 'grant'; payer: number; credits: number }
  | { op: 'crash'; payer: number }
  | { op: 'webhook'; payer: number }
  | { op: 'tick' }
  | { op: 'wait'; ms: number }
  | { op: 'expire' };

const payer = fc.integer({ min: 0, max: PAYERS - 1 });
const command: fc.Arbitrary<Command> = fc.oneof(
  { weight: 2, arbitrary: fc.record({ op: fc.constant('challenge' as const), payer }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('pay' as const), payer, received: fc.constantFrom('5.00' as const, '5.00' as const, '2.50' as const, '0.10' as const) }) },
  { weight: 5, arbitrary: fc.record({ op: fc.constant('fund' as const), payer, received: fc.constantFrom('5.00' as const, '5.00' as const, '5.00' as const, '2.50' as const, '0.10' as const) }) },
  {
    weight: 6,
    arbitrary: fc.record({
      op: fc.constant('calls' as const),
      payer,
      charge: fc.constantFrom('success' as const, 'attempt' as const),
      cost: fc.constantFrom(1 as const, 2 as const),
      endings: fc.array(fc.constantFrom(...ENDINGS), { minLength: 1, maxLength: 6 }),
      withTick: fc.boolean(),
    }),
  },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('grant' as const), payer, credits: fc.integer({ min: 1, max: 5 }) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('crash' as const), payer }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('webhook' as const), payer }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('tick' as const) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('wait' as const), ms: fc.integer({ min: 1_000, max: 20 * MINUTE }) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('expire' as const) }) },
);

/** What the upstream did, as the proxy reports it to the paywall. */
function callOutcome(ending: Ending, id: number): CallOutcome {
  const answered = (message: Omit<JsonRpcResponse, 'jsonrpc' | 'id'>): CallOutcome => ({ kind: 'answered', message: { jsonrpc: '2.0', id, ...message } });
  switch (ending) {
    case 'success':
    case 'client_gone_completed': // §6.5: read to its end whether or not the client is still there
      return answered({ result: { content: [{ type: 'text', text: 'done' }] } });
    case 'is_error':
      return answered({ result: { content: [{ type: 'text', text: 'tool failed' }], isError: true } });
    case 'jsonrpc_error':
      return answered({ error: { code: -32000, message: 'boom' } });
    case 'deadline':
      return { kind: 'deadline', accepted: true };
    case 'deadline_unaccepted':
      return { kind: 'deadline', accepted: false };
    case 'failed_refused':
      return { kind: 'failed', accepted: false };
    case 'failed_5xx':
      return { kind: 'failed', accepted: true };
    case 'http_refusal':
      return { kind: 'http_refusal', status: 400 };
  }
}

/** Did the upstream carry the call out in a way its charge policy charges for (§6.5)? */
function charged(ending: Ending, charge: 'success' | 'attempt'): boolean {
  if (charge === 'success') return ending === 'success' || ending === 'client_gone_completed';
  // attempt: the upstream accepted the call (answered, or 2xx before it failed or ran out of time)
  return !['failed_refused', 'deadline_unaccepted', 'http_refusal'].includes(ending);
}

/** Authorisation outcomes over every run, to show the generator reaches paid calls. */
export const outcomes: Record<string, number> = {};

interface PayerState {
  handle: string | null;
  checkoutUrl: string | null;
}

interface Totals {
  charged: number; // credits of calls the upstream carried out and that were charged
  granted: number; // operator grants
  /** The oracle's own books per handle hash: operator grants and charged calls, as the commands made them. */
  model: Map<string, { granted: number; charged: number }>;
}

/** The payment policy (SPEC §7.4), written out for the amounts the generator pays on a 5.00 pack of 20. */
const POLICY_CREDITS: Record<string, number> = { '5.00': 20, '2.50': 10, '0.10': 0 };
const SETTLEMENT_POLICY = { tolerance: 0.005, minimumFraction: 0.1 };

/** Timer waits of the Settler and Reconciler over every run (a retry waiting out another's read, §6.5). */
export const stats = { waits: 0 };

/** One run of a command sequence on a fresh store. */
async function runCommands(store: Store, clock: { at: number }, commands: Command[]): Promise<Totals> {
  const now = (): number => clock.at;
  // Wall time moves only when a command says so; within a batch it stands still, so a retry that finds
  // the poll slot taken waits out its whole bound (2 s). The clock skips that idle time (it was most of
  // the test's run time) while the wait still runs loop by loop against the store.
  const timers = skippingClock(now);
  const logger = createLogger('silent');
  const metrics = createMetrics(() => store.countPendingCharges());
  const provider = new DevProvider({ store, publicUrl: 'http://127.0.0.1:9/mcp', now });
  const settler = new Settler({ store, provider, policy: SETTLEMENT_POLICY, metrics, logger, clock: timers, random: () => 0.5 });
  const paywall = new Paywall({
    settings: {
      argumentName: 'tollboothToken',
      hashSecret: 'property-secret',
      handleTtlMs: HOUR,
      chargeTtlMs: 15 * MINUTE,
      callDeadlineMs: CALL_DEADLINE_MS,
      perHandle: { ratePerSecond: 10_000, burst: 10_000 },
      challengesPerClient: { ratePerSecond: 10_000, burst: 10_000 },
      newChargesPerSecond: 10_000,
    },
    store,
    provider,
    settler,
    metrics,
    logger,
    now,
  });
  const reconciler = new Reconciler({ store, provider, settler, metrics, logger, intervalMs: 3_000, clock: timers });
  const payers: PayerState[] = Array.from({ length: PAYERS }, () => ({ handle: null, checkoutUrl: null }));
  const totals: Totals = { charged: 0, granted: 0, model: new Map() };
  const books = (handleHash: string): { granted: number; charged: number } => {
    let entry = totals.model.get(handleHash);
    if (!entry) totals.model.set(handleHash, (entry = { granted: 0, charged: 0 }));
    return entry;
  };
  let nextId = 1;

  const priced = (state: PayerState, price: PriceTag): PricedCall => {
    const args = state.handle ? { url: 'x', tollboothToken: state.handle } : { url: 'x' };
    const request = { jsonrpc: '2.0' as const, id: nextId++, method: 'tools/call', params: { name: 'fetch_readable', arguments: args } };
    const call: ToolCall = { request, name: 'fetch_readable', args };
    return { call, price, principal: null, clientKey: 'ip:127.0.0.1', resultShape: async () => ({ era: 'legacy', structuredContentAllowed: false }), startedAt: clock.at };
  };
  const priceOf = (charge: 'success' | 'attempt', cost: number): PriceTag => ({ sku: 'research', cost, amount: '5.00', currency: 'USDC', credits: 20, label: 'Research tools', charge });
  /** A challenge names the payer's (possibly new) handle and the link to pay. */
  const learn = (state: PayerState, answer: Authorisation): void => {
    if (answer.kind !== 'answer') return;
    const challenge = (answer.result._meta as Record<string, { retry: { value: string }; checkoutUrl: string } | undefined>)[CHALLENGE_META_KEY];
    if (!challenge) return;
    state.handle = challenge.retry.value;
    state.checkoutUrl = challenge.checkoutUrl;
  };
  /** One priced call to its end; true if it was authorised (reserved), false if the gateway answered it. */
  const oneCall = async (state: PayerState, charge: 'success' | 'attempt', cost: number, ending: Ending): Promise<boolean> => {
    const call = priced(state, priceOf(charge, cost));
    const held = await paywall.authorise(call);
    const reason = held.kind === 'answer' ? ((held.result._meta as Record<string, { reason?: string } | undefined>)[CHALLENGE_META_KEY]?.reason ?? '') : '';
    const kind = held.kind === 'answer' ? `${held.outcome}${reason ? `:${reason}` : ''}` : held.kind;
    outcomes[kind] = (outcomes[kind] ?? 0) + 1;
    if (held.kind !== 'reserved') {
      learn(state, held);
      return false;
    }
    const id = call.call.request.id as number;
    const conclusion = await paywall.conclude(call, held, callOutcome(ending, id), null);
    if (charged(ending, charge)) {
      totals.charged += cost;
      books(held.handleHash).charged += cost;
    }
    if (conclusion.state !== (charged(ending, charge) ? 'committed' : 'released')) throw new Error(`${charge}/${ending} ended ${conclusion.state}`);
    // A receipt is shown exactly for a charged success (§6.5).
    const receipt = (conclusion.message?.result as { _meta?: Record<string, unknown> } | undefined)?._meta?.[RECEIPT_META_KEY];
    if (Boolean(receipt) !== (charge === 'success' ? charged(ending, charge) : charged(ending, charge) && (ending === 'success' || ending === 'client_gone_completed'))) {
      throw new Error(`receipt ${receipt ? 'shown' : 'missing'} for ${charge}/${ending}`);
    }
    return true;
  };

  for (const step of commands) {
    const state = payers[step.op === 'tick' || step.op === 'wait' || step.op === 'expire' ? 0 : step.payer] as PayerState;
    switch (step.op) {
      case 'challenge':
        learn(state, await paywall.authorise(priced(state, priceOf('success', 1))).then(async (answer) => {
          // A funded handle is simply reserved: give the credit back, nothing happened.
          if (answer.kind === 'reserved') await store.release(answer.handleHash, answer.reservationId);
          return answer;
        }));
        break;
      case 'pay':
        if (state.checkoutUrl) await store.payDevLink(state.checkoutUrl.split('/').at(-1) as string, step.received);
        break;
      case 'fund':
        // The usual path: a challenge shows a link, the payer pays it, the agent retries.
        clock.at += 2_100; // past the 2 s poll floor of the last read
        if (await oneCall(state, 'success', 1, 'success')) break; // funded already: that was a paid call
        if (state.checkoutUrl) await store.payDevLink(state.checkoutUrl.split('/').at(-1) as string, step.received);
        clock.at += 2_100;
        await oneCall(state, 'success', 1, 'success');
        break;
      case 'calls': {
        // Retries inside one batch share the 2 s poll floor (a retry waits for another's read, §6.5).
        clock.at += 2_100;
        const calls = step.endings.map((ending) => oneCall(state, step.charge, step.cost, ending));
        await Promise.all(step.withTick ? [...calls, reconciler.tick()] : calls);
        break;
      }
      case 'grant':
        if (state.handle) {
          const { hashHandle } = await import('../../src/paywall/handles.js');
          const granted = await store.grantCredits(hashHandle(state.handle, 'property-secret'), 'research', step.credits, 'property test').catch(() => null);
          if (granted !== null) {
            totals.granted += step.credits;
            books(hashHandle(state.handle, 'property-secret')).granted += step.credits;
          }
        }
        break;
      case 'crash': {
        // The gateway dies after the reservation: nothing concludes it; the reconciler releases it later.
        const answer = await paywall.authorise(priced(state, priceOf('success', 1)));
        learn(state, answer);
        break;
      }
      case 'webhook':
        // The provider's notice of a payment: the gateway re-reads the charge by its link (SPEC §20).
        if (state.checkoutUrl) await settler.observeByRef(state.checkoutUrl.split('/').at(-1) as string, 'webhook');
        break;
      case 'tick':
        await reconciler.tick();
        break;
      case 'wait':
        clock.at += step.ms;
        break;
      case 'expire':
        clock.at += HOUR + MINUTE; // every handle's life is over unless it is used meanwhile
        await reconciler.tick();
        break;
    }
  }
  // Afterwards: past every deadline, the reconciler releases what crashed calls held and ends what expired.
  clock.at += CALL_DEADLINE_MS + 10_000;
  await reconciler.tick();
  stats.waits += timers.fired;
  return totals;
}

/** Sums over every ledger: spend, grant and adjust credits, and the number of grant entries. */
async function ledgerSums(store: Store): Promise<{ spent: number; granted: number; grants: number; adjusted: number }> {
  const sums = { spent: 0, granted: 0, grants: 0, adjusted: 0 };
  for await (const account of store.ledgerAccounts()) {
    for (const entry of await allEntries(store, account, 500)) {
      if (entry.kind === 'spend') sums.spent -= entry.credits;
      if (entry.kind === 'grant') {
        sums.granted += entry.credits;
        sums.grants++;
      }
      if (entry.kind === 'adjust') sums.adjusted += entry.credits;
    }
  }
  return sums;
}

/** The oracle: the payment policy on every claimed charge, and each live handle's holdings from the model's books. */
async function checkModel(store: Store, totals: Totals): Promise<void> {
  const claimed = (await store.listCharges()).filter((charge) => charge.status === 'settled' || charge.status === 'underpaid');
  const fromCharges = new Map<string, number>();
  for (const charge of claimed) {
    const expected = POLICY_CREDITS[charge.receivedAmount ?? ''];
    if (expected === undefined) throw new Error(`a charge claimed with ${charge.receivedAmount} received, which no payer paid`);
    const live = (await store.getHandle(charge.handleHash)) !== null;
    // A payment that lands after its handle ended is recorded with 0 credits (nothing left to fund).
    if (charge.grantedCredits !== expected && (live || charge.grantedCredits !== 0)) {
      throw new Error(`payment policy: ${charge.receivedAmount} received should grant ${expected} credits, the charge granted ${charge.grantedCredits}`);
    }
    if (charge.status !== (expected === 0 ? 'underpaid' : 'settled')) throw new Error(`payment policy: ${charge.receivedAmount} received should leave the charge ${expected === 0 ? 'underpaid' : 'settled'}, not ${charge.status}`);
    fromCharges.set(charge.handleHash, (fromCharges.get(charge.handleHash) ?? 0) + charge.grantedCredits);
  }
  for (const handleHash of new Set([...fromCharges.keys(), ...totals.model.keys()])) {
    const state = await store.getHandle(handleHash);
    if (!state) continue; // ended: its credits went to an expire entry, which ledger verify checks
    const book = totals.model.get(handleHash) ?? { granted: 0, charged: 0 };
    const expected = (fromCharges.get(handleHash) ?? 0) + book.granted - book.charged;
    const held = state.balances.research ?? 0; // every reservation has ended by now (the last reconciler pass)
    if (held !== expected) throw new Error(`model: a handle holds ${held} credits; its charges granted ${fromCharges.get(handleHash) ?? 0}, operator grants ${book.granted}, charged calls ${book.charged} → ${expected}`);
  }
}

export type MakeStore = (clock: { at: number }) => Promise<Store>;

/** Runs the property; resolves with what was checked, rejects with the first counterexample (fast-check shrinks it). */
export async function propertyHolds(makeStore: MakeStore, numRuns: number, endWithExpiry: boolean): Promise<{ runs: number; entries: number }> {
  let runs = 0;
  let entries = 0;
  await fc.assert(
    fc.asyncProperty(fc.array(command, { minLength: 5, maxLength: 30 }), async (commands) => {
      const clock = { at: Date.now() };
      const store = await makeStore(clock);
      try {
        const totals = await runCommands(store, clock, commands);
        await checkModel(store, totals);
        if (endWithExpiry) {
          clock.at += HOUR + MINUTE;
          await expireAll(store, clock.at);
        }
        const check = await verified(store);
        if (check.mismatches.length > 0) throw new Error(`ledger verify: ${JSON.stringify(check.mismatches)}`);
        const sums = await ledgerSums(store);
        if (sums.spent !== totals.charged) throw new Error(`spend entries ${sums.spent} ≠ credits of charged calls ${totals.charged}`);
        if (sums.adjusted !== totals.granted) throw new Error(`adjust entries ${sums.adjusted} ≠ operator grants ${totals.granted}`);
        const claimed = (await store.listCharges()).filter((charge) => charge.status === 'settled' || charge.status === 'underpaid');
        if (sums.grants !== claimed.length) throw new Error(`${sums.grants} grant entries for ${claimed.length} claimed charges`);
        const grantedByCharges = claimed.reduce((sum, charge) => sum + charge.grantedCredits, 0);
        if (sums.granted !== grantedByCharges) throw new Error(`grant entries ${sums.granted} ≠ credits the charges granted ${grantedByCharges}`);
        runs++;
        entries += check.entries;
      } finally {
        await store.close();
      }
    }),
    { numRuns, endOnFailure: true },
  );
  return { runs, entries };
}

