// Idempotent results (SPEC §24): one hash per slot, `P{idem:<slot>}` (its own hash tag, so each script
// touches one key in one Cluster slot). Fields: `s` scope, `o` owner (the attempt that runs the call),
// `r` the kept result (absent while the call runs). The key's TTL is the marker's, then the result's.

/**
 * KEYS slot. ARGV scope, owner, runningTtlMs. Returns {'first'} (the marker is written), {'running'},
 * {'done', result} or {'conflict'}. A re-run by the same owner (its reply was lost) is 'first' again.
 */
export const BEGIN_IDEMPOTENT = `
local found = redis.call('HMGET', KEYS[1], 's', 'o', 'r')
if not found[1] then
  redis.call('HSET', KEYS[1], 's', ARGV[1], 'o', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {'first'}
end
if found[1] ~= ARGV[1] then return {'conflict'} end
if found[3] then return {'done', found[3]} end
if found[2] == ARGV[2] then return {'first'} end
return {'running'}
`;

/** KEYS slot. ARGV owner, result, ttlMs. Returns 1 when the owner's marker now holds the result, else 0. */
export const FINISH_IDEMPOTENT = `
if redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'r', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`;

/** KEYS slot. ARGV owner. Deletes the owner's in-flight marker; a kept result is never taken back. */
export const ABANDON_IDEMPOTENT = `
local found = redis.call('HMGET', KEYS[1], 'o', 'r')
if found[1] == ARGV[1] and not found[2] then redis.call('DEL', KEYS[1]) end
return 0
`;

/** This concern's scripts, registered by lua/index.ts. */
export const IDEMPOTENCY_SCRIPTS = {
  tbBeginIdempotent: BEGIN_IDEMPOTENT,
  tbFinishIdempotent: FINISH_IDEMPOTENT,
  tbAbandonIdempotent: ABANDON_IDEMPOTENT,
} as const;
