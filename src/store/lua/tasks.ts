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
