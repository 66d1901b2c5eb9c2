// The ledger's own scripts (SPEC §17): the expiry step and the checkpoint read. The entries
// themselves are appended by the scripts that move credits, through ledger_append in the shared
// ledger prelude (../lua/ledger.ts). ../README.md ("Ledger") explains the layout and the expiry step.

/**
 * Ends one handle whose life is over (SPEC §17 `expire`): an entry per SKU for what it still held
 * (balance and reservations), then its balances and reservations go. The hash itself stays until its
 * TTL (HANDLE_GRACE_MS past expiry) so a late payment still finds its fingerprint.
 * KEYS handle, reservations, ledger, handle-expiry index, reservation index.
 * ARGV handleHash, now, retentionMs. Returns {ended 0|1, credits dropped}.
 */
export const EXPIRE_HANDLE = `
local now = tonumber(ARGV[2])
local x = tonumber(redis.call('HGET', KEYS[1], 'x'))
if x == nil then
  -- Its keys are gone (past the grace period): nothing left to write off.
  redis.call('ZREM', KEYS[4], ARGV[1])
  return {0, 0}
end
if x > now then
  index_expiry(KEYS[4], ARGV[1], x, now)
  return {0, 0}
end
local ends = ledger_end(KEYS[1], now, tonumber(ARGV[3]))
ledger_open(KEYS[1], KEYS[2], KEYS[3], now, ends)
local fields = redis.call('HGETALL', KEYS[1])
local balance, reserved, order = holdings(fields, KEYS[2])
local held = {}
for _, sku in ipairs(order) do held[sku] = balance[sku] + reserved[sku] end
local fp = field_of(fields, 'fp') or false
local dropped = 0
for _, sku in ipairs(order) do
  if held[sku] ~= 0 then
    -- Dated at the handle's end of life, when the credits stopped being spendable.
    ledger_append(KEYS[3], x, now, ends, fp, 'expire', sku, -held[sku], 0, {})
    dropped = dropped + held[sku]
  end
  redis.call('HDEL', KEYS[1], 'b:' .. sku)
end
for _, id in ipairs(redis.call('HKEYS', KEYS[2])) do redis.call('ZREM', KEYS[5], ARGV[1] .. ':' .. id) end
redis.call('DEL', KEYS[2])
redis.call('ZREM', KEYS[4], ARGV[1])
return {1, dropped}
`;

/**
 * For verify, in one atomic step: the ledger's last entry and what the handle holds (balance and
 * reservations per SKU). KEYS handle, reservations, ledger.
 * Returns {lastId|false, fingerprint, sku, balance, reserved, sku, …}.
 */
export const LEDGER_CHECKPOINT = `
local last = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)[1]
local fields = redis.call('HGETALL', KEYS[1])
local fp = field_of(fields, 'fp')
if not fp and last then fp = field_of(last[2], 'fp') end
local out = {(last and last[1]) or false, fp or ''}
local balance, reserved, order = holdings(fields, KEYS[2])
for _, sku in ipairs(order) do
  out[#out + 1] = sku
  out[#out + 1] = balance[sku]
  out[#out + 1] = reserved[sku]
end
return out
`;

export const LEDGER_SCRIPTS = {
  tbExpireHandle: EXPIRE_HANDLE,
  tbLedgerCheckpoint: LEDGER_CHECKPOINT,
} as const;
