// Scripts on one global key each, for what replicas coordinate on: the per-client challenge token
// bucket, the reconciler lease, and sessions bound to principals.

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

// Sessions bound to principals (SPEC §20): one string per upstream session (its hash), holding the
// principal whose request created it. The first binding wins and is never changed; a look-up slides
// its lifetime.

/** KEYS session key. ARGV principal, ttlMs. Returns the principal the session is bound to. */
export const BIND_SESSION = `
local owner = redis.call('GET', KEYS[1])
if owner then return owner end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return ARGV[1]
`;

/** KEYS session key. ARGV ttlMs. Returns the principal, or nil; a binding found lives ttlMs from now. */
export const SESSION_PRINCIPAL = `
local owner = redis.call('GET', KEYS[1])
if owner then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return owner
`;

export const COORDINATION_SCRIPTS = {
  tbTakeChallengeToken: TAKE_CHALLENGE_TOKEN,
  tbAcquireLease: ACQUIRE_LEASE,
  // sessions bound to principals (SPEC §20)
  tbBindSession: BIND_SESSION,
  tbSessionPrincipal: SESSION_PRINCIPAL,
} as const;
