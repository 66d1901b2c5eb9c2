// The budget and allowance scripts (SPEC §23; redis/quotas.ts runs them, README.md "Budgets and
// allowances" explains the keys), and the Lua both they and the credit scripts use to draw on and
// conclude quota holds. A hold part is one subject's share of a call's draws: its keys share the tag
// {q:<subject>}, plus its stale-hold index (standalone the one global zset, Cluster the shard of the
// subject's slot), so a script on one part is one atomic step in one slot. Outside Cluster the credit
// scripts (handles.lua.ts) carry a call's parts too, so a budget is checked, drawn and concluded in
// the credit's own step. Keys are passed in, never built.
//
// A counter is a hash: `n` calls and `c` credits used in its window, committed and held together. A
// hold part is a hash: `d` its deadline, and per counter field "<name>|<windowMs>|<windowStart>" the
// draw "<calls> <credits>" it made, so a release gives back exactly what this hold took.
//
// Parts travel in KEYS and ARGV from given positions on, after the script's own values:
// - to draw (read_quota_draws): ARGV count of parts, then per part member, deadline, holdEnds,
//   n, and per draw 7 values: field, calls, credits, maxCalls ('' = none), maxCredits ('' = none),
//   counterEnds, resetsAt; KEYS per part hold, index, counter₁…counterₙ (a counter drawn twice in
//   one part appears twice).
// - to conclude (read_quota_holds): ARGV count of parts, then per part member, n, field₁…fieldₙ;
//   KEYS per part hold, index, counter₁…counterₙ (each once).

/** Lua functions on hold parts, prepended to every script that draws on or concludes them. */
export const QUOTA_LUA = `
local function read_quota_draws(k, a)
  local parts = {}
  local count = tonumber(ARGV[a] or '0')
  a = a + 1
  for p = 1, count do
    local part = {hold = KEYS[k], index = KEYS[k + 1], member = ARGV[a], deadline = tonumber(ARGV[a + 1]), ends = tonumber(ARGV[a + 2]), draws = {}}
    local n = tonumber(ARGV[a + 3])
    k, a = k + 2, a + 4
    for i = 1, n do
      part.draws[i] = {key = KEYS[k], field = ARGV[a], calls = tonumber(ARGV[a + 1]), credits = tonumber(ARGV[a + 2]),
        max_calls = tonumber(ARGV[a + 3]), max_credits = tonumber(ARGV[a + 4]), ends = ARGV[a + 5]}
      k, a = k + 1, a + 7
    end
    parts[p] = part
  end
  return parts
end

local function read_quota_holds(k, a)
  local parts = {}
  local count = tonumber(ARGV[a] or '0')
  a = a + 1
  for p = 1, count do
    local part = {hold = KEYS[k], index = KEYS[k + 1], member = ARGV[a], counters = {}, fields = {}}
    local n = tonumber(ARGV[a + 1])
    k, a = k + 2, a + 2
    for i = 1, n do
      part.counters[i], part.fields[i] = KEYS[k], ARGV[a]
      k, a = k + 1, a + 1
    end
    parts[p] = part
  end
  return parts
end

-- The first draw that would take its counter over a cap, as part position, draw position, the
-- counter's used calls and credits; nil when every draw fits. A part already here is this hold's
-- own earlier draw (a re-run of the same call): it is never checked or drawn again.
local function quota_over(parts)
  local pending = {}
  for p, part in ipairs(parts) do
    if redis.call('EXISTS', part.hold) == 0 then
      for i, d in ipairs(part.draws) do
        local used = redis.call('HMGET', d.key, 'n', 'c')
        local stored_calls, stored_credits = tonumber(used[1] or '0'), tonumber(used[2] or '0')
        local earlier = pending[d.key] or {0, 0}
        if (d.max_calls and stored_calls + earlier[1] + d.calls > d.max_calls) or (d.max_credits and stored_credits + earlier[2] + d.credits > d.max_credits) then
          return p, i, stored_calls, stored_credits
        end
        pending[d.key] = {earlier[1] + d.calls, earlier[2] + d.credits}
      end
    end
  end
  return nil
end

-- Draws every part not already here (checked by quota_over first). Returns how many it drew.
local function quota_draw(parts, now)
  local drawn = 0
  for _, part in ipairs(parts) do
    if redis.call('EXISTS', part.hold) == 0 then
      -- The index entry first: a script that fails part way keeps what it wrote, so no hold is ever outside the index.
      redis.call('ZADD', part.index, int(part.deadline), part.member)
      live_until(part.index, part.ends, now)
      for _, d in ipairs(part.draws) do
        redis.call('HINCRBY', d.key, 'n', int(d.calls))
        redis.call('HINCRBY', d.key, 'c', int(d.credits))
        redis.call('PEXPIREAT', d.key, d.ends)
        local calls, credits = d.calls, d.credits
        local before = redis.call('HGET', part.hold, d.field)
        if before then
          local c0, k0 = string.match(before, '^(%d+) (%d+)$')
          calls, credits = calls + tonumber(c0), credits + tonumber(k0)
        end
        redis.call('HSET', part.hold, d.field, int(calls) .. ' ' .. int(credits))
      end
      redis.call('HSET', part.hold, 'd', int(part.deadline))
      redis.call('PEXPIREAT', part.hold, int(part.ends))
      drawn = drawn + 1
    end
  end
  return drawn
end

-- Gives back a hold part's draws (its counters and their fields) and drops it and its index entry.
local function release_hold(hold, index, member, counters, fields)
  for i, key in ipairs(counters) do
    local drawn = redis.call('HGET', hold, fields[i])
    -- A counter already gone (its window and grace passed) has nothing left to give back to.
    if drawn and redis.call('EXISTS', key) == 1 then
      local calls, credits = string.match(drawn, '^(%d+) (%d+)$')
      if redis.call('HINCRBY', key, 'n', int(-tonumber(calls))) < 0 then redis.call('HSET', key, 'n', 0) end
      if redis.call('HINCRBY', key, 'c', int(-tonumber(credits))) < 0 then redis.call('HSET', key, 'c', 0) end
    end
  end
  redis.call('DEL', hold)
  redis.call('ZREM', index, member)
end

-- Commit keeps a part's draws in its counters, release gives them back; either way the part is gone.
-- Returns how many parts were still here to conclude.
local function quota_conclude(parts, outcome)
  local concluded = 0
  for _, part in ipairs(parts) do
    if redis.call('EXISTS', part.hold) == 1 then
      if outcome == 'commit' then
        redis.call('DEL', part.hold)
        redis.call('ZREM', part.index, part.member)
      else
        release_hold(part.hold, part.index, part.member, part.counters, part.fields)
      end
      concluded = concluded + 1
    end
  end
  return concluded
end
`;

/**
 * One part (Cluster, or a caller without a credit reservation: an allowance call). ARGV now, then the
 * part (the draw layout above). Reply: {'held', 1} (drawn now), {'held', 0} (this hold's part was
 * already here) or {'exceeded', draw position (1-based), usedCalls, usedCredits}.
 */
export const RESERVE_QUOTAS = `${QUOTA_LUA}
local parts = read_quota_draws(1, 2)
local _, i, used_calls, used_credits = quota_over(parts)
if i then return {'exceeded', i, int(used_calls), int(used_credits)} end
return {'held', quota_draw(parts, tonumber(ARGV[1]))}
`;

/** ARGV outcome ('commit' | 'release'), then parts (the conclude layout). Reply: parts concluded now (0: already gone, concluded or swept). */
export const CONCLUDE_QUOTAS = `${QUOTA_LUA}
return quota_conclude(read_quota_holds(1, 2), ARGV[1])
`;

/**
 * The stale sweep for one part. KEYS: hold, index, counter₁…counterₙ (the part's own fields, read by
 * the store just before). ARGV: member, now, field₁…fieldₙ. Re-checks the deadline here: a task may
 * have moved it (hold-quotas) since the index was read. Reply: 1 if released, 0 if not.
 */
export const RELEASE_STALE_QUOTAS = `${QUOTA_LUA}
local hold, index, member = KEYS[1], KEYS[2], ARGV[1]
local deadline = tonumber(redis.call('HGET', hold, 'd'))
if deadline == nil then
  redis.call('ZREM', index, member)
  return 0
end
if deadline >= tonumber(ARGV[2]) then return 0 end
local counters, fields = {}, {}
for i = 3, #KEYS do counters[i - 2], fields[i - 2] = KEYS[i], ARGV[i] end
release_hold(hold, index, member, counters, fields)
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
