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
