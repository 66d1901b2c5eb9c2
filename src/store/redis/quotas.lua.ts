// The budget and allowance scripts (SPEC §23; redis/quotas.ts runs them, README.md "Budgets and
// allowances" explains the keys). Each decides for ONE subject: all its keys share the tag
// {q:<subject>}, plus its stale-hold index (standalone the one global zset, Cluster the shard of the
// subject's slot), so every script is one atomic step in one slot. Keys are passed in, never built.
//
// A counter is a hash: `n` calls and `c` credits used in its window, committed and held together. A
// hold part is a hash: `d` its deadline, and per counter field "<name>|<windowMs>|<windowStart>" the
// draw "<calls> <credits>" it made, so a release gives back exactly what this hold took.

/** Gives back a hold part's draws (KEYS from `first` on, their fields in ARGV from `argFirst` on) and drops it and its index entry. */
const RELEASE_PART = `
local function release_part(hold, index, member, first, argFirst)
  for i = first, #KEYS do
    local drawn = redis.call('HGET', hold, ARGV[argFirst + i - first])
    -- A counter already gone (its window and grace passed) has nothing left to give back to.
    if drawn and redis.call('EXISTS', KEYS[i]) == 1 then
      local calls, credits = string.match(drawn, '^(%d+) (%d+)$')
      if redis.call('HINCRBY', KEYS[i], 'n', int(-tonumber(calls))) < 0 then redis.call('HSET', KEYS[i], 'n', 0) end
      if redis.call('HINCRBY', KEYS[i], 'c', int(-tonumber(credits))) < 0 then redis.call('HSET', KEYS[i], 'c', 0) end
    end
  end
  redis.call('DEL', hold)
  redis.call('ZREM', index, member)
end
`;

/**
 * KEYS: hold, index, counter₁…counterₙ (a counter drawn twice in one request appears twice).
 * ARGV: member, deadline, holdEnds, now, then per counter 7 values: field, calls, credits, maxCalls
 * ('' = none), maxCredits ('' = none), counterEnds, resetsAt.
 * Reply: {'held'} or {'exceeded', counter position (1-based), usedCalls, usedCredits}.
 */
export const RESERVE_QUOTAS = `
local hold, index = KEYS[1], KEYS[2]
local member, deadline, hold_ends, now = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
-- This hold's part is already here: an earlier run of the same call drew on it. Never draw twice.
if redis.call('EXISTS', hold) == 1 then return {'held'} end
local pending = {}
for i = 3, #KEYS do
  local a = 4 + (i - 3) * 7
  local key = KEYS[i]
  local stored_calls = tonumber(redis.call('HGET', key, 'n') or '0')
  local stored_credits = tonumber(redis.call('HGET', key, 'c') or '0')
  local earlier = pending[key] or {0, 0}
  local calls, credits = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local max_calls, max_credits = tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  if (max_calls and stored_calls + earlier[1] + calls > max_calls) or (max_credits and stored_credits + earlier[2] + credits > max_credits) then
    return {'exceeded', i - 2, int(stored_calls), int(stored_credits)}
  end
  pending[key] = {earlier[1] + calls, earlier[2] + credits}
end
-- The index entry first: a script that fails part way keeps what it wrote, so no hold is ever outside the index.
redis.call('ZADD', index, int(deadline), member)
live_until(index, hold_ends, now)
for i = 3, #KEYS do
  local a = 4 + (i - 3) * 7
  local key, field = KEYS[i], ARGV[a + 1]
  local calls, credits = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  redis.call('HINCRBY', key, 'n', int(calls))
  redis.call('HINCRBY', key, 'c', int(credits))
  redis.call('PEXPIREAT', key, ARGV[a + 6])
  local drawn = redis.call('HGET', hold, field)
  if drawn then
    local c0, k0 = string.match(drawn, '^(%d+) (%d+)$')
    calls, credits = calls + tonumber(c0), credits + tonumber(k0)
  end
  redis.call('HSET', hold, field, int(calls) .. ' ' .. int(credits))
end
redis.call('HSET', hold, 'd', int(deadline))
redis.call('PEXPIREAT', hold, int(hold_ends))
return {'held'}
`;

/**
 * KEYS: hold, index, counter₁…counterₙ (each once). ARGV: outcome ('commit' | 'release'), member, field₁…fieldₙ.
 * Reply: 1 if the part was concluded now, 0 if it was already gone (concluded or swept).
 */
export const CONCLUDE_QUOTAS = `${RELEASE_PART}
local hold, index = KEYS[1], KEYS[2]
if redis.call('EXISTS', hold) == 0 then return 0 end
if ARGV[1] == 'commit' then
  redis.call('DEL', hold)
  redis.call('ZREM', index, ARGV[2])
else
  release_part(hold, index, ARGV[2], 3, 3)
end
return 1
`;

/**
 * The stale sweep for one part. KEYS: hold, index, counter₁…counterₙ (the part's own fields, read by
 * the store just before). ARGV: member, now, field₁…fieldₙ. Re-checks the deadline here: a task may
 * have moved it (hold-quotas) since the index was read. Reply: 1 if released, 0 if not.
 */
export const RELEASE_STALE_QUOTAS = `${RELEASE_PART}
local hold, index, member = KEYS[1], KEYS[2], ARGV[1]
local deadline = tonumber(redis.call('HGET', hold, 'd'))
if deadline == nil then
  redis.call('ZREM', index, member)
  return 0
end
if deadline >= tonumber(ARGV[2]) then return 0 end
release_part(hold, index, member, 3, 3)
return 1
`;

/** KEYS: hold, index. ARGV: member, deadline, holdEnds, now. Reply: 1 if moved, 0 if the part is gone. */
export const HOLD_QUOTAS = `
local hold, index = KEYS[1], KEYS[2]
local deadline, hold_ends, now = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if redis.call('EXISTS', hold) == 0 then return 0 end
redis.call('ZADD', index, int(deadline), ARGV[1])
live_until(index, hold_ends, now)
redis.call('HSET', hold, 'd', int(deadline))
live_until(hold, hold_ends, now)
return 1
`;

export const QUOTA_SCRIPTS = {
  tbReserveQuotas: RESERVE_QUOTAS,
  tbConcludeQuotas: CONCLUDE_QUOTAS,
  tbReleaseStaleQuotas: RELEASE_STALE_QUOTAS,
  tbHoldQuotas: HOLD_QUOTAS,
} as const;
