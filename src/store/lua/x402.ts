// x402 authorization claims (SPEC §19). The claim itself is one `SET NX PX` (atomic on its own);
// recording how a claim ended is a read-check-write, so it is a script.

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
