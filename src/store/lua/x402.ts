// x402 authorization claims (SPEC §19). The claim itself is one `SET NX PX` (atomic on its own);
// recording how a claim ended is a read-check-write, so it is a script.

/** KEYS claim. ARGV state, transaction ('' = none), at. Only a 'claimed' record changes; its TTL is kept. */
export const FINISH_PAYMENT_NONCE = `
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
local record = cjson.decode(raw)
if record.state ~= 'claimed' then return 0 end
record.state = ARGV[1]
if ARGV[2] == '' then record.transaction = cjson.null else record.transaction = ARGV[2] end
record.finishedAt = tonumber(ARGV[3])
redis.call('SET', KEYS[1], cjson.encode(record), 'KEEPTTL')
return 1
`;
