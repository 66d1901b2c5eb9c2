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
