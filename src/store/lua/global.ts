// The companion index writes the Redis store sends in Cluster mode (where an index lives in another
// slot), shared by the handles and charges concerns (redis/handles.ts, redis/charges.ts).

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

export const GLOBAL_SCRIPTS = {
  tbIndexAdd: INDEX_ADD,
  tbPruneShardDirectory: PRUNE_SHARD_DIRECTORY,
} as const;
