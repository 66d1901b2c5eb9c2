// Scripts on one handle's charges (KEYS[1..2] share the handle's hash tag). Charge records are JSON
// in the handle's charges hash, field = nonce. Trailing global index keys are passed only outside
// Cluster mode; in Cluster mode charges.ts writes those indexes in companion commands. Dev links
// (the dev provider's checkout) are charges' too.

/**
 * §6.5 one pending charge per SKU: reuse a young opening or a pending charge with time left, else
 * record a new opening charge and point the handle at it.
 * KEYS handle, charges, [all-charges index, live-charges index].
 * ARGV sku, nonce, chargeJson, now, indexMember, clockNow, openingGraceMs, reuseMarginMs.
 */
export const BEGIN_CHARGE = `
local now = tonumber(ARGV[4])
local clock = tonumber(ARGV[6])
local alive = handle_live(KEYS[1], clock)
if alive then
  local c, raw = read_charge(KEYS[2], redis.call('HGET', KEYS[1], 'pc:' .. ARGV[1]), clock)
  if c and ((c.status == 'opening' and c.openedAt > now - tonumber(ARGV[7])) or (c.status == 'pending' and c.expiresAt > now + tonumber(ARGV[8]))) then
    return {'existing', raw}
  end
end
-- Records past their end go whenever a new one is written, so the hash stays small.
local all = redis.call('HGETALL', KEYS[2])
for i = 1, #all, 2 do
  if charge_end(cjson.decode(all[i + 1])) <= clock then redis.call('HDEL', KEYS[2], all[i]) end
end
local charge = cjson.decode(ARGV[3])
local ends = charge_end(charge)
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
live_until(KEYS[2], ends, clock)
if alive then redis.call('HSET', KEYS[1], 'pc:' .. ARGV[1], ARGV[2]) end
if KEYS[3] then
  end_index_add(KEYS[3], ends, ARGV[5], clock)
  end_index_add(KEYS[4], ends, ARGV[5], clock)
end
return {'begun'}
`;

/**
 * opening → pending with the provider's link, only while the handle is live: a link is shown for
 * credits on a handle the store holds (a failover can erase a handle created on the old primary
 * moments before; paying its link would grant nothing).
 * KEYS charges, handle, [due index, live-charges index, all-charges index, providerRef key].
 * ARGV nonce, providerRef, checkoutUrl, indexMember, clockNow. Returns the charge JSON or nil.
 */
export const ATTACH_LINK = `
local clock = tonumber(ARGV[5])
local c = read_charge(KEYS[1], ARGV[1], clock)
if not c or c.status ~= 'opening' or not handle_live(KEYS[2], clock) then return false end
c.status = 'pending'
c.providerRef = ARGV[2]
c.checkoutUrl = ARGV[3]
local out = cjson.encode(c)
redis.call('HSET', KEYS[1], ARGV[1], out)
local ends = charge_end(c)
live_until(KEYS[1], ends, clock)
if KEYS[3] then
  redis.call('ZADD', KEYS[3], int(c.nextPollAt), ARGV[4])
  live_until(KEYS[3], ends, clock)
  end_index_add(KEYS[4], ends, ARGV[4], clock)
  end_index_add(KEYS[5], ends, ARGV[4], clock)
  redis.call('SET', KEYS[6], ARGV[4], 'PX', int(math.max(1000, ends - clock)))
end
return out
`;

/** Drops an opening charge. KEYS handle, charges, [all-charges index, live-charges index]. ARGV nonce, indexMember, clockNow. */
export const ABORT_CHARGE = `
local c = read_charge(KEYS[2], ARGV[1], tonumber(ARGV[3]))
if not c or c.status ~= 'opening' then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
for _, pointer in ipairs({'pc:', 'lc:'}) do
  if redis.call('HGET', KEYS[1], pointer .. c.sku) == ARGV[1] then redis.call('HDEL', KEYS[1], pointer .. c.sku) end
end
if KEYS[3] then
  redis.call('ZREM', KEYS[3], ARGV[2])
  redis.call('ZREM', KEYS[4], ARGV[2])
end
return 1
`;

/**
 * The poll gate: one poll per minIntervalMs per charge; reschedules the reconciler's next look
 * (pending and abandoned charges are polled, §7.6).
 * KEYS charges, [due index]. ARGV nonce, now, minIntervalMs, nextPollAt, indexMember, clockNow.
 * Returns {1, status, recordEnd} when the slot is taken, {0} otherwise.
 */
export const TAKE_POLL_SLOT = `
local clock = tonumber(ARGV[6])
local c = read_charge(KEYS[1], ARGV[1], clock)
if not c then return {0} end
local now = tonumber(ARGV[2])
if c.pollCount > 0 and c.lastPolledAt > now - tonumber(ARGV[3]) then return {0} end
c.lastPolledAt = now
c.pollCount = c.pollCount + 1
c.nextPollAt = tonumber(ARGV[4])
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(c))
if KEYS[2] and (c.status == 'pending' or c.status == 'abandoned') then
  redis.call('ZADD', KEYS[2], ARGV[4], ARGV[5])
  live_until(KEYS[2], charge_end(c), clock)
end
return {1, c.status, int(charge_end(c))}
`;

/**
 * §7.5 exactly once: only a pending, abandoned or expired charge is claimed (money that arrived is
 * never ignored); status, amounts, credits, funded flag, pending pointer, due index and the grant
 * ledger entry (SPEC §17: one per claim, credits 0 when nothing is granted) change together.
 * KEYS handle, charges, reservations, ledger, handle-expiry index, [due index, live-charges index].
 * ARGV nonce, outcome, credits, hasReceived, receivedAmount, indexMember, clockNow, ledgerRetentionMs, handleHash.
 * Returns {claimed 0|1, chargeJson|nil, balance}.
 */
export const CLAIM_SETTLEMENT = `
local clock = tonumber(ARGV[7])
local c, raw = read_charge(KEYS[2], ARGV[1], clock)
if not c then return {0, false, 0} end
local alive = handle_live(KEYS[1], clock)
local function balance()
  if not alive then return 0 end
  return tonumber(redis.call('HGET', KEYS[1], 'b:' .. c.sku) or '0')
end
if c.status ~= 'pending' and c.status ~= 'abandoned' and c.status ~= 'expired' then return {0, raw, balance()} end
local credits = tonumber(ARGV[3])
c.status = ARGV[2]
if ARGV[4] == '1' then c.receivedAmount = ARGV[5] else c.receivedAmount = cjson.null end
-- A handle that expired meanwhile records the outcome for the operator but has nothing to credit.
if alive then c.grantedCredits = credits else c.grantedCredits = 0 end
local out = cjson.encode(c)
redis.call('HSET', KEYS[2], ARGV[1], out)
if KEYS[6] then
  redis.call('ZREM', KEYS[6], ARGV[6])
  redis.call('ZREM', KEYS[7], ARGV[6])
end
local ends = ledger_end(KEYS[1], clock, tonumber(ARGV[8]))
ledger_open(KEYS[1], KEYS[3], KEYS[4], clock, ends)
if alive then
  if credits > 0 then
    index_expiry(KEYS[5], ARGV[9], tonumber(redis.call('HGET', KEYS[1], 'x')), clock, KEYS[1])
    redis.call('HINCRBY', KEYS[1], 'b:' .. c.sku, int(credits))
    redis.call('HSET', KEYS[1], 'f:' .. c.sku, '1')
  end
  if redis.call('HGET', KEYS[1], 'pc:' .. c.sku) == ARGV[1] then redis.call('HDEL', KEYS[1], 'pc:' .. c.sku) end
  redis.call('HSET', KEYS[1], 'lc:' .. c.sku, ARGV[1])
end
local extra = {'r', ARGV[1], 'cu', c.currency}
if ARGV[4] == '1' then
  extra[#extra + 1] = 'a'
  extra[#extra + 1] = ARGV[5]
end
ledger_append(KEYS[4], clock, clock, ends, redis.call('HGET', KEYS[1], 'fp'), 'grant', c.sku, c.grantedCredits, owned_of(KEYS[1], KEYS[3], c.sku), extra)
return {1, out, balance()}
`;

/**
 * pending → abandoned; it stays in the due index at nextPollAt (late payments, §7.6).
 * KEYS handle, charges, [due index, live-charges index]. ARGV nonce, indexMember, clockNow, nextPollAt.
 * Returns when the record ends (0 if nothing changed).
 */
export const ABANDON_CHARGE = `
local clock = tonumber(ARGV[3])
local c = read_charge(KEYS[2], ARGV[1], clock)
if not c or c.status ~= 'pending' then return 0 end
c.status = 'abandoned'
c.nextPollAt = tonumber(ARGV[4])
redis.call('HSET', KEYS[2], ARGV[1], cjson.encode(c))
if KEYS[3] then
  redis.call('ZADD', KEYS[3], ARGV[4], ARGV[2])
  live_until(KEYS[3], charge_end(c), clock)
  redis.call('ZREM', KEYS[4], ARGV[2])
end
left_pending(KEYS[1], c.sku, ARGV[1])
return int(charge_end(c))
`;

/**
 * pending | abandoned → expired (the provider never let us read it): out of the due and live
 * indexes, kept RETENTION_MS from now. KEYS handle, charges, [due, live-charges, all-charges index].
 * ARGV nonce, indexMember, now, clockNow. Returns the charge JSON or nil.
 */
export const EXPIRE_CHARGE = `
local clock = tonumber(ARGV[4])
local c = read_charge(KEYS[2], ARGV[1], clock)
if not c or (c.status ~= 'pending' and c.status ~= 'abandoned') then return false end
c.status = 'expired'
c.expiredAt = tonumber(ARGV[3])
local out = cjson.encode(c)
redis.call('HSET', KEYS[2], ARGV[1], out)
local ends = charge_end(c)
live_until(KEYS[2], ends, clock)
if KEYS[3] then
  redis.call('ZREM', KEYS[3], ARGV[2])
  redis.call('ZREM', KEYS[4], ARGV[2])
  end_index_add(KEYS[5], ends, ARGV[2], clock)
end
left_pending(KEYS[1], c.sku, ARGV[1])
return out
`;

// The end of a provider read (payments/settle.ts). takePollSlot records when a read starts
// (lastPolledAt); this records that the read which took that slot ended with a reading, so a retry
// waiting for it (§6.5: "waits for that read") can tell "read in progress" from "read done, still
// unpaid" and answer at once. A newer slot taken meanwhile is left alone: its read is not done.
/** KEYS charges. ARGV nonce, polledAt, clockNow. Returns 1 when recorded, 0 otherwise. */
export const MARK_CHARGE_READ = `
local c = read_charge(KEYS[1], ARGV[1], tonumber(ARGV[3]))
if not c then return 0 end
local polled_at = tonumber(ARGV[2])
if c.lastPolledAt ~= polled_at then return 0 end
c.lastReadAt = polled_at
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(c))
return 1
`;

/** KEYS dev link. ARGV receivedAmount, now. active and unexpired → completed. */
export const PAY_DEV_LINK = `
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
local link = cjson.decode(raw)
if link.status ~= 'active' or link.expiresAt <= tonumber(ARGV[2]) then return 0 end
link.status = 'completed'
link.receivedAmount = ARGV[1]
redis.call('SET', KEYS[1], cjson.encode(link), 'KEEPTTL')
return 1
`;

export const CHARGE_SCRIPTS = {
  tbBeginCharge: BEGIN_CHARGE,
  tbAttachLink: ATTACH_LINK,
  tbAbortCharge: ABORT_CHARGE,
  tbTakePollSlot: TAKE_POLL_SLOT,
  tbClaimSettlement: CLAIM_SETTLEMENT,
  tbAbandonCharge: ABANDON_CHARGE,
  tbExpireCharge: EXPIRE_CHARGE,
  // the end of a provider read (Settler#awaitOtherRead)
  tbMarkChargeRead: MARK_CHARGE_READ,
  tbPayDevLink: PAY_DEV_LINK,
} as const;
