// x402 authorization claims (SPEC §19). The claim is a `SET NX PX` in a script, so that a re-run of
// the same attempt after a lost reply answers "claimed" again (../lua/operations.ts); recording how a claim
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

// Records written through the durable outbox (store/outbox.ts): money already moved outside the store,
// so each write is idempotent by its reference and never depends on a claim record still being there
// (it may have expired, or been lost with a Redis that restarted without its data, while the record
// waited in the outbox file).

/**
 * One settled x402 call (SPEC §19, §21). KEYS claim, the payer's ledger, the settled marker.
 * ARGV nonce, tool, amount, network, asset, payer, sku, transaction, at, ledgerRetentionMs.
 * The marker (kept as long as the ledger entry) makes a second write of the same authorization a no-op;
 * a claim still 'claimed' is marked settled; a claim already 'settled' by an earlier write only gets its
 * marker. Returns 1 when this call wrote the `x402_settle` entry, 0 when it was already recorded.
 */
export const RECORD_X402_SETTLEMENT = `
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
local at = tonumber(ARGV[9])
local retention = tonumber(ARGV[10])
local raw = redis.call('GET', KEYS[1])
if raw then
  local record = cjson.decode(raw)
  if record.state == 'settled' then
    redis.call('SET', KEYS[3], ARGV[8], 'PX', retention)
    return 0
  end
  record.state = 'settled'
  record.transaction = ARGV[8]
  record.finishedAt = at
  redis.call('SET', KEYS[1], cjson.encode(record), 'KEEPTTL')
end
ledger_append(KEYS[2], at, at, at + retention, '', 'x402_settle', ARGV[7], 0, 0,
  {'r', ARGV[1], 't', ARGV[2], 'a', ARGV[3], 'n', ARGV[4], 'as', ARGV[5], 'p', ARGV[6], 'tx', ARGV[8]})
redis.call('SET', KEYS[3], ARGV[8], 'PX', retention)
return 1
`;

export const X402_SCRIPTS = {
  tbClaimPaymentNonce: CLAIM_PAYMENT_NONCE,
  tbFinishPaymentNonce: FINISH_PAYMENT_NONCE,
  // the durable outbox (store/outbox.ts)
  tbRecordX402Settlement: RECORD_X402_SETTLEMENT,
} as const;
