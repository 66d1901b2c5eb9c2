// Scripts on one global key each: challenge buckets, the reconciler lease, dev links, and the
// companion index writes redis.ts sends in Cluster mode (where an index lives in another slot).

/** KEYS bucket. ARGV ratePerSecond, burst. Returns the wait in ms (0 = allowed). Redis TIME clock. */
export const TAKE_CHALLENGE_TOKEN = `
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local wait, left = take_token(KEYS[1], 't', 'a', rate, burst, redis_now())
-- Once refilled the bucket is the same as a new one, so it may expire then.
if rate > 0 then
  redis.call('PEXPIRE', KEYS[1], int(math.max(1, math.ceil((burst - left) * 1000 / rate))))
else
  redis.call('PEXPIRE', KEYS[1], int(RETENTION_MS))
end
return wait
`;

/** KEYS lease. ARGV owner, ttlMs. Free or held by this owner → (re)taken for ttlMs. */
export const ACQUIRE_LEASE = `
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
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

/**
 * Cluster companion: one sorted-set index write. KEYS index. ARGV score, member, liveUntil, now, mode:
 * 'end' (scores are the members' end times: ended members are pruned) or '' (plain ZADD).
 */
export const INDEX_ADD = `
local now = tonumber(ARGV[4])
if ARGV[5] == 'end' then
  end_index_add(KEYS[1], tonumber(ARGV[1]), ARGV[2], now)
else
  redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
  live_until(KEYS[1], tonumber(ARGV[3]), now)
end
return 1
`;

/**
 * Cluster: forgets shards of the reservation directory that the sweep found empty, unless listed
 * again since the cutoff (a reserve that just made the shard non-empty re-lists it).
 * KEYS directory. ARGV cutoff, slot…
 */
export const PRUNE_SHARD_DIRECTORY = `
local cutoff = tonumber(ARGV[1])
for i = 2, #ARGV do
  local listed = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[i]))
  if listed and listed < cutoff then redis.call('ZREM', KEYS[1], ARGV[i]) end
end
return 1
`;
