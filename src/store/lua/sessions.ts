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
