// Helpers prepended to every script. Times are epoch ms. Handle and charge times come from the
// caller's clock (ARGV); only token buckets read Redis TIME, so every replica shares one clock for them.
import { NEVER_REFILLS_RETRY_MS, RETENTION_MS } from '../policy.js';

export const PRELUDE = `
local RETENTION_MS = ${RETENTION_MS}

-- Integers travel as decimal strings: never let Lua print 1.7e+12.
local function int(n) return string.format('%d', n) end

local function redis_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Keeps a key alive at least until \`at\`; never shortens its life (indexes are shared by many records).
local function live_until(key, at, now)
  if at <= now then at = now + 1000 end
  local pttl = redis.call('PTTL', key)
  if pttl == -2 then return end
  if pttl == -1 or now + pttl < at then redis.call('PEXPIREAT', key, int(at)) end
end

-- Adds a member to an index whose scores are the members' end times, drops ended ones, and keeps
-- the index alive as long as its longest-lived member.
local function end_index_add(key, ends_at, member, now)
  redis.call('ZADD', key, int(ends_at), member)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now))
  live_until(key, ends_at, now)
end

-- Continuous-refill token bucket in two hash fields (policy.ts's takeToken). Takes one token if a whole one is there.
-- Returns the wait in ms (0 = taken) and the tokens left.
local function take_token(key, tokens_field, at_field, rate, burst, now)
  local tokens = tonumber(redis.call('HGET', key, tokens_field))
  local at = tonumber(redis.call('HGET', key, at_field))
  if tokens == nil or at == nil then tokens = burst; at = now end
  local elapsed = now - at
  if elapsed < 0 then elapsed = 0 end
  tokens = math.min(burst, tokens + elapsed * rate / 1000)
  local taken = tokens >= 1
  local left = tokens
  if taken then left = tokens - 1 end
  redis.call('HSET', key, tokens_field, string.format('%.17g', left), at_field, int(now))
  if taken then return 0, left end
  if rate <= 0 then return ${NEVER_REFILLS_RETRY_MS}, left end
  return math.max(1, math.ceil((1 - tokens) * 1000 / rate)), left
end

-- A charge record is kept until its link expired (or it was marked expired, if later) plus the
-- retention window; an opening charge (its opener never got a link) only until the link would have
-- expired. Mirrors chargeRecordEnd in policy.ts.
local function charge_end(c)
  if c.status == 'opening' then return c.expiresAt end
  local from = c.expiresAt
  if type(c.expiredAt) == 'number' and c.expiredAt > from then from = c.expiredAt end
  return from + RETENTION_MS
end

-- The handle is live if its expiry (field x) is after the caller's now.
local function handle_live(key, now)
  local x = tonumber(redis.call('HGET', key, 'x'))
  return x ~= nil and x > now
end

-- A charge left 'pending' for good: challenges stop showing it and it becomes the SKU's last charge.
local function left_pending(handle, sku, nonce)
  if redis.call('EXISTS', handle) == 0 then return end
  if redis.call('HGET', handle, 'pc:' .. sku) == nonce then redis.call('HDEL', handle, 'pc:' .. sku) end
  redis.call('HSET', handle, 'lc:' .. sku, nonce)
end

-- Reads one charge of a handle's charges hash; nil if absent or past its end.
local function read_charge(key, nonce, now)
  if not nonce then return nil, nil end
  local raw = redis.call('HGET', key, nonce)
  if not raw then return nil, nil end
  local c = cjson.decode(raw)
  if charge_end(c) <= now then return nil, nil end
  return c, raw
end
`;
