// The priced-request registry (SPEC §6.5): one hash per upstream session (its hash tag is the
// session's hash), field = the JSON-RPC id serialised with its type, value = the record as JSON.
// The whole hash lives as long as its longest-lived request (live_until never shortens it).

/** KEYS session hash. ARGV requestId, record (JSON), ttlMs, now. */
export const REGISTER_PRICED_REQUEST = `
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local now = tonumber(ARGV[4])
live_until(KEYS[1], now + tonumber(ARGV[3]), now)
return 1
`;

/**
 * KEYS session hash. ARGV requestId, state ('committed' | 'released'), remaining ('' = none).
 * in_flight → state; a concluded request keeps its state. Returns the record after, or nil.
 */
export const CONCLUDE_PRICED_REQUEST = `
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return nil end
local record = cjson.decode(raw)
if record.state ~= 'in_flight' then return raw end
record.state = ARGV[2]
if ARGV[2] == 'committed' and ARGV[3] ~= '' then record.remaining = tonumber(ARGV[3]) else record.remaining = cjson.null end
local encoded = cjson.encode(record)
redis.call('HSET', KEYS[1], ARGV[1], encoded)
return encoded
`;

// Task-held reservations (a priced tools/call answered with a task): the reservation stays open until
// the task's terminal outcome, bounded by upstream.taskDeadline. The task record itself is a plain
// string key (SET PX) under the task's own hash tag, looked up by task id; this script moves the
// reservation's deadline, on the handle's slot, so the reconciler's stale sweep releases it at the
// task deadline instead of at callDeadline + 5 s.

/**
 * KEYS handle, reservations, reservation index (global, or the handle slot's shard). ARGV reservationId,
 * indexMember, deadline, now. Returns 1 when the reservation was held to the new deadline, 0 when it is
 * gone (released or committed meanwhile) or its handle has ended.
 */
export const HOLD_TASK_RESERVATION = `
local now = tonumber(ARGV[4])
local r = redis.call('HGET', KEYS[2], ARGV[1])
if not r then return 0 end
if not handle_live(KEYS[1], now) then return 0 end
local _, cost, sku = string.match(r, '^(%S+) (%S+) (.*)$')
redis.call('ZADD', KEYS[3], 'XX', ARGV[3], ARGV[2])
live_until(KEYS[3], tonumber(ARGV[3]) + RETENTION_MS, now)
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3] .. ' ' .. cost .. ' ' .. sku)
return 1
`;

/**
 * KEYS task record. ARGV the concluded record (JSON). Writes it in place of the held record, keeping its
 * TTL, unless the record is gone or already concluded. Returns 1 when this call recorded the conclusion
 * first, 0 otherwise (several reads of one task may each conclude it with the same attempt id: §24).
 */
export const CONCLUDE_TASK = `
local current = redis.call('GET', KEYS[1])
if not current then return 0 end
local record = cjson.decode(current)
if record.state then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
return 1
`;

export const REQUEST_SCRIPTS = {
  // priced-request registry (SPEC §6.5)
  tbRegisterPricedRequest: REGISTER_PRICED_REQUEST,
  tbConcludePricedRequest: CONCLUDE_PRICED_REQUEST,
  // tasks holding a reservation (SPEC §24)
  tbHoldTaskReservation: HOLD_TASK_RESERVATION,
  tbConcludeTask: CONCLUDE_TASK,
} as const;
