// Every Lua script the Redis store runs, registered once per connection with ioredis
// `defineCommand` (EVALSHA, falling back to EVAL after a SCRIPT FLUSH or a restart). Embedded as
// TypeScript strings so `tsc` ships them in dist/ with nothing to copy or locate at run time.
import { CHARGE_SCRIPTS } from '../redis/charges.lua.js';
import { COORDINATION_SCRIPTS } from '../redis/coordination.lua.js';
import { HANDLE_SCRIPTS } from '../redis/handles.lua.js';
import { LEDGER_SCRIPTS } from '../redis/ledger.lua.js';
import { QUOTA_SCRIPTS } from '../redis/quotas.lua.js';
import { REQUEST_SCRIPTS } from '../redis/requests.lua.js';
import { X402_SCRIPTS } from '../redis/x402.lua.js';
import { GLOBAL_SCRIPTS } from './global.js';
import { LEDGER_PRELUDE } from './ledger.js';
import { once } from './operations.js';
import { PRELUDE } from './prelude.js';
import { IDEMPOTENCY_SCRIPTS } from '../redis/idempotency.lua.js';

/**
 * Each concern's scripts sit beside its TypeScript (../redis/<concern>.lua.ts) and export one record,
 * script name → body; a new concern adds its record here with one spread.
 */
const BODIES = {
  ...HANDLE_SCRIPTS,
  ...LEDGER_SCRIPTS,
  ...CHARGE_SCRIPTS,
  ...COORDINATION_SCRIPTS,
  ...X402_SCRIPTS,
  ...REQUEST_SCRIPTS,
  ...GLOBAL_SCRIPTS,
  // budgets and allowances (SPEC §23)
  ...QUOTA_SCRIPTS,
  // idempotent results (SPEC §24)
  ...IDEMPOTENCY_SCRIPTS,
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
