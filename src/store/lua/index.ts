// Every Lua script the Redis store runs, registered once per connection with ioredis
// `defineCommand` (EVALSHA, falling back to EVAL after a SCRIPT FLUSH or a restart). Embedded as
// TypeScript strings so `tsc` ships them in dist/ with nothing to copy or locate at run time.
import { ABANDON_CHARGE, ABORT_CHARGE, ATTACH_LINK, BEGIN_CHARGE, CLAIM_SETTLEMENT, EXPIRE_CHARGE, TAKE_POLL_SLOT } from './charges.js';
import { ACQUIRE_LEASE, INDEX_ADD, PAY_DEV_LINK, PRUNE_SHARD_DIRECTORY, TAKE_CHALLENGE_TOKEN } from './global.js';
import { COMMIT, CREATE_HANDLE, GRANT_CREDITS, RELEASE, RELEASE_STALE, RESERVE } from './handles.js';
import { EXPIRE_HANDLE, LEDGER_CHECKPOINT, LEDGER_PRELUDE } from './ledger.js';
import { PRELUDE } from './prelude.js';
import { CONCLUDE_PRICED_REQUEST, REGISTER_PRICED_REQUEST } from './priced-requests.js';
import { MARK_CHARGE_READ } from './reads.js';
import { RECORD_X402_SETTLEMENT } from './outbox.js';
import { BIND_SESSION, SESSION_PRINCIPAL } from './sessions.js';
import { once } from './operations.js';
import { CLAIM_PAYMENT_NONCE, FINISH_PAYMENT_NONCE } from './x402.js';
import { HOLD_TASK_RESERVATION } from './tasks.js';
import { QUOTA_SCRIPTS } from '../redis/quotas.lua.js';

const BODIES = {
  tbCreateHandle: CREATE_HANDLE,
  tbReserve: RESERVE,
  tbCommit: COMMIT,
  tbRelease: RELEASE,
  tbReleaseStale: RELEASE_STALE,
  tbGrantCredits: GRANT_CREDITS,
  tbExpireHandle: EXPIRE_HANDLE,
  tbLedgerCheckpoint: LEDGER_CHECKPOINT,
  tbBeginCharge: BEGIN_CHARGE,
  tbAttachLink: ATTACH_LINK,
  tbAbortCharge: ABORT_CHARGE,
  tbTakePollSlot: TAKE_POLL_SLOT,
  tbClaimSettlement: CLAIM_SETTLEMENT,
  tbAbandonCharge: ABANDON_CHARGE,
  tbExpireCharge: EXPIRE_CHARGE,
  tbTakeChallengeToken: TAKE_CHALLENGE_TOKEN,
  tbAcquireLease: ACQUIRE_LEASE,
  tbPayDevLink: PAY_DEV_LINK,
  tbIndexAdd: INDEX_ADD,
  tbPruneShardDirectory: PRUNE_SHARD_DIRECTORY,
  tbFinishPaymentNonce: FINISH_PAYMENT_NONCE,
  // the end of a provider read (Settler#awaitOtherRead)
  tbMarkChargeRead: MARK_CHARGE_READ,
  // the durable outbox (store/outbox.ts)
  tbRecordX402Settlement: RECORD_X402_SETTLEMENT,
  tbClaimPaymentNonce: CLAIM_PAYMENT_NONCE,
  // priced-request registry (SPEC §6.5)
  tbRegisterPricedRequest: REGISTER_PRICED_REQUEST,
  tbConcludePricedRequest: CONCLUDE_PRICED_REQUEST,
  // sessions bound to principals (SPEC §20)
  tbBindSession: BIND_SESSION,
  tbSessionPrincipal: SESSION_PRINCIPAL,
  // tasks holding a reservation (SPEC §24)
  tbHoldTaskReservation: HOLD_TASK_RESERVATION,
  // budgets and allowances (SPEC §23; redis/quotas.lua.ts)
  ...QUOTA_SCRIPTS,
} as const;

export type ScriptName = keyof typeof BODIES;

/**
 * The scripts that move money or claim something once, each identified by its operation id: they
 * take an operation record key as KEYS[1] and an attempt id as ARGV[1] ahead of their own (operations.ts),
 * so a re-run after a lost reply answers as the first run did. Those left out are idempotent as they
 * are (release-stale, expire-handle, abandon/expire-charge: a re-run finds nothing left to change and
 * moves nothing) or move no money.
 */
export const ONCE_SCRIPTS = new Set<ScriptName>([
  'tbReserve', 'tbCommit', 'tbRelease', 'tbGrantCredits', 'tbBeginCharge', 'tbAttachLink', 'tbClaimSettlement', 'tbClaimPaymentNonce', 'tbFinishPaymentNonce',
  'tbReserveQuotas', 'tbConcludeQuotas',
]);

/** Script name → full Lua source (shared helpers first). */
export const SCRIPTS: Record<ScriptName, string> = Object.fromEntries(
  Object.entries(BODIES).map(([name, body]) => [name, PRELUDE + LEDGER_PRELUDE + (ONCE_SCRIPTS.has(name as ScriptName) ? once(body) : body)]),
) as Record<ScriptName, string>;
