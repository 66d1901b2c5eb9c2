// x402 authorization claims (SPEC §19). The claim is a `SET NX PX` in a script, so that a re-run of
// the same attempt after a lost reply answers "claimed" again (operations.ts); recording how a claim
// ended is a read-check-write.

/** KEYS claim. ARGV record (JSON), ttlMs. Returns 1 for the first claim, 0 while the nonce is claimed. */
export const CLAIM_PAYMENT_NONCE = `
if redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX') then return 1 end
return 0
`;

/**
 * KEYS claim, the payer's ledger. ARGV state, transaction ('' = none), at, ledgerRetentionMs. Only a
 * 'claimed' record changes; its TTL is kept. 'settled' writes the x402_settle ledger entry (SPEC §19).
 */
export const FINISH_PAYMENT_NONCE = `
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
local record = cjson.decode(raw)
if record.state ~= 'claimed' then return 0 end
record.state = ARGV[1]
if ARGV[2] == '' then record.transaction = cjson.null else record.transaction = ARGV[2] end
record.finishedAt = tonumber(ARGV[3])
redis.call('SET', KEYS[1], cjson.encode(record), 'KEEPTTL')
if ARGV[1] == 'settled' then
  local at = tonumber(ARGV[3])
  ledger_append(KEYS[2], at, at, at + tonumber(ARGV[4]), '', 'x402_settle', record.sku, 0, 0,
    {'r', record.nonce, 't', record.tool, 'a', record.amount, 'n', record.network, 'as', record.asset, 'p', record.payer, 'tx', ARGV[2]})
end
return 1
`;
