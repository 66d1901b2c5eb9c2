// Scripts on one handle's keys: KEYS[1] handle hash, KEYS[2] its reservations (and charges for
// reserve). The reservation index is always a KEY of the script that changes a reservation: the
// global zset outside Cluster mode, the shard of the handle's slot in Cluster mode (../README.md).
// Outside Cluster, reserve, commit and release also carry the call's budget hold parts (SPEC §23,
// quotas.lua.ts) after their own KEYS and ARGV: the budget is checked, drawn and concluded in the
// credit's own step. In Cluster they carry none (the parts live in other slots) and the store runs
// the quota scripts beside them.
import { QUOTA_LUA } from './quotas.lua.js';

/**
 * The fingerprint lives in the handle's own hash (field fp): the operator look-up scans handle keys
 * (redis.ts), so no index outside the handle's hash tag exists (§8). The keys live HANDLE_GRACE_MS
 * past the handle's expiry (field x decides liveness), so the expiry step can still write the
 * ledger's expire entries (../README.md, "Ledger").
 * KEYS handle, reservations, ledger, handle-expiry index. ARGV fingerprint, hasPrincipal, principal, ttlMs, now, handleHash.
 */
export const CREATE_HANDLE = `
local now = tonumber(ARGV[5])
local ttl = tonumber(ARGV[4])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('ZREM', KEYS[4], ARGV[6])
redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'x', int(now + ttl))
if ARGV[2] == '1' then redis.call('HSET', KEYS[1], 'p', ARGV[3]) end
redis.call('PEXPIRE', KEYS[1], int(ttl + HANDLE_GRACE_MS))
return 1
`;

/**
 * §6.2 steps 3–6: existence, binding, token bucket (Redis TIME), balance, reservation, slide.
 * KEYS handle, reservations, charges, reservation index (global, or in Cluster the shard of the
 * handle's slot: either way in this script, §6.5), ledger, handle-expiry index (the same choice).
 * ARGV hasPrincipal, principal, sku, cost, reservationId, deadline, ttlMs, rate, burst, indexMember,
 * now, ledgerRetentionMs, handleHash; then the budget parts to draw (KEYS from 7, ARGV from 14).
 * A budget over its cap refuses first, so the call takes no rate token and moves no credit (§23).
 */
export const RESERVE = `${QUOTA_LUA}
local h = KEYS[1]
local now = tonumber(ARGV[11])
local quota_parts = read_quota_draws(7, 14)
local over_part, over_draw, used_calls, used_credits = quota_over(quota_parts)
if over_part then return {'quota_exceeded', over_part, over_draw, int(used_calls), int(used_credits)} end
if not handle_live(h, now) then return {'unknown_handle'} end
local owner = redis.call('HGET', h, 'p')
if owner and (ARGV[1] ~= '1' or owner ~= ARGV[2]) then return {'bound_to_other_principal'} end

-- The token is taken whatever the balance: rate limiting is decided before any credit moves.
-- An empty rate means "no token": the retry that just settled this handle's charge already took one.
if ARGV[8] ~= '' then
  local wait = take_token(h, 'bt', 'ba', tonumber(ARGV[8]), tonumber(ARGV[9]), redis_now())
  if wait > 0 then return {'rate_limited', wait} end
end

local sku = ARGV[3]
local cost = tonumber(ARGV[4])
local balance = tonumber(redis.call('HGET', h, 'b:' .. sku) or '0')
if balance < cost then
  local funded = redis.call('HEXISTS', h, 'f:' .. sku)
  local pending, pending_raw = read_charge(KEYS[3], redis.call('HGET', h, 'pc:' .. sku), now)
  if not pending or (pending.status ~= 'opening' and pending.status ~= 'pending') then pending_raw = false end
  local _, last_raw = read_charge(KEYS[3], redis.call('HGET', h, 'lc:' .. sku), now)
  return {'insufficient', balance, funded, pending_raw or false, last_raw or false}
end

-- The index entry is the first write: a script that fails part way keeps what it wrote, so if the
-- index cannot be written (wrong type, out of memory) nothing else is, and no reservation exists
-- outside the index.
-- fresh: the index was empty (Cluster: redis.ts then lists this shard in the directory the sweep reads first).
local fresh = 0
if redis.call('ZCARD', KEYS[4]) == 0 then fresh = 1 end
redis.call('ZADD', KEYS[4], ARGV[6], ARGV[10])
live_until(KEYS[4], tonumber(ARGV[6]) + RETENTION_MS, now)
local remaining = redis.call('HINCRBY', h, 'b:' .. sku, int(-cost))
redis.call('HSET', KEYS[2], ARGV[5], ARGV[6] .. ' ' .. ARGV[4] .. ' ' .. sku)
local ttl = tonumber(ARGV[7])
local x = now + ttl
redis.call('HSET', h, 'x', int(x))
redis.call('PEXPIRE', h, int(ttl + HANDLE_GRACE_MS))
redis.call('PEXPIRE', KEYS[2], int(ttl + HANDLE_GRACE_MS))
-- The slide moves the handle's end, so its expiry index entry and its ledger's end move with it.
index_expiry(KEYS[6], ARGV[13], x, now)
live_until(KEYS[5], x + tonumber(ARGV[12]), now)
-- The budget draws only once the credit is reserved: a call refused for any reason consumes no budget.
quota_draw(quota_parts, now)
return {'reserved', remaining, fresh}
`;

/**
 * Makes a reservation final and writes its spend entry (ref: the reservation id). A handle past its life keeps its
 * reservations for the expiry step, which writes them off in its expire entry.
 * KEYS handle, reservations, reservation index, ledger. ARGV reservationId, indexMember, now, tool, ledgerRetentionMs,
 * chainText, chainHash (the caller's last entry of this ledger and its hash, or empty: ledger_append's
 * \`known\`); then the budget parts to commit with it (KEYS from 5, ARGV from 8). Returns {balance, the
 * spend entry's canonical JSON, who made its link: 1 the caller's hash, 0 the script, -1 none} or nil (nil: the reservation is
 * not concluded here, and neither are the parts).
 */
export const COMMIT = `${QUOTA_LUA}
local now = tonumber(ARGV[3])
local r = redis.call('HGET', KEYS[2], ARGV[1])
if not r then return false end
if not handle_live(KEYS[1], now) then return false end
local ends = ledger_end(KEYS[1], now, tonumber(ARGV[5]))
ledger_open(KEYS[1], KEYS[2], KEYS[4], now, ends)
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[2])
local cost, sku = string.match(r, '^%S+ (%S+) (.*)$')
local balance = tonumber(redis.call('HGET', KEYS[1], 'b:' .. sku) or '0')
-- ref: the reservation id, so each spend can be matched to the call that made it (logs carry it too).
local extra = {'r', ARGV[1]}
if ARGV[4] ~= '' then extra = {'r', ARGV[1], 't', ARGV[4]} end
local _, text, linked = ledger_append(KEYS[4], now, now, ends, redis.call('HGET', KEYS[1], 'fp'), 'spend', sku, -tonumber(cost), balance + reserved_of(KEYS[2], sku), extra, {ARGV[6], ARGV[7]})
quota_conclude(read_quota_holds(5, 8), 'commit')
return {balance, text, linked}
`;

/**
 * KEYS handle, reservations, reservation index. ARGV reservationId, indexMember, now; then the budget
 * parts to give back with it (KEYS from 4, ARGV from 4). Gives the credits back (no entry). Returns the
 * balance or nil (nil: the reservation is not concluded here, and neither are the parts).
 */
export const RELEASE = `${QUOTA_LUA}
local r = redis.call('HGET', KEYS[2], ARGV[1])
if not r then return false end
if not handle_live(KEYS[1], tonumber(ARGV[3])) then return false end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[2])
local cost, sku = string.match(r, '^%S+ (%S+) (.*)$')
local balance = redis.call('HINCRBY', KEYS[1], 'b:' .. sku, cost)
quota_conclude(read_quota_holds(4, 4), 'release')
return balance
`;

/**
 * Releases the listed reservations of one handle whose deadline is before \`before\`. Those of a
 * handle past its life only leave the index: the expiry step writes them off with its credits.
 * KEYS handle, reservations, reservation index. ARGV before, now, handleHash, reservationId…
 * Returns how many credits-holding reservations were released.
 */
export const RELEASE_STALE = `
local before = tonumber(ARGV[1])
local alive = handle_live(KEYS[1], tonumber(ARGV[2]))
local released = 0
for i = 4, #ARGV do
  local r = redis.call('HGET', KEYS[2], ARGV[i])
  local deadline, cost, sku
  if r then deadline, cost, sku = string.match(r, '^(%S+) (%S+) (.*)$') end
  if not r or tonumber(deadline) < before then
    if r and alive then
      redis.call('HDEL', KEYS[2], ARGV[i])
      redis.call('HINCRBY', KEYS[1], 'b:' .. sku, cost)
      released = released + 1
    end
    redis.call('ZREM', KEYS[3], ARGV[3] .. ':' .. ARGV[i])
  end
end
return released
`;

/**
 * An operator grant and its adjust entry. KEYS handle, reservations, ledger, handle-expiry index.
 * ARGV sku, credits, now, reason, ledgerRetentionMs, handleHash. Returns the new balance, or nil for an unknown handle.
 */
export const GRANT_CREDITS = `
local now = tonumber(ARGV[3])
if not handle_live(KEYS[1], now) then return false end
local sku = ARGV[1]
local ends = ledger_end(KEYS[1], now, tonumber(ARGV[5]))
ledger_open(KEYS[1], KEYS[2], KEYS[3], now, ends)
index_expiry(KEYS[4], ARGV[6], tonumber(redis.call('HGET', KEYS[1], 'x')), now, KEYS[1])
local balance = redis.call('HINCRBY', KEYS[1], 'b:' .. sku, ARGV[2])
ledger_append(KEYS[3], now, now, ends, redis.call('HGET', KEYS[1], 'fp'), 'adjust', sku, tonumber(ARGV[2]), balance + reserved_of(KEYS[2], sku), {'why', ARGV[4]})
return balance
`;

export const HANDLE_SCRIPTS = {
  tbCreateHandle: CREATE_HANDLE,
  tbReserve: RESERVE,
  tbCommit: COMMIT,
  tbRelease: RELEASE,
  tbReleaseStale: RELEASE_STALE,
  tbGrantCredits: GRANT_CREDITS,
} as const;
