// The ledger (SPEC §17) in Redis: one stream per handle, `P{h:<hash>}:ledger`, entry id
// "<at>-<seq>", written by the same script that moves the credits (reserve writes nothing: a
// reservation is not an entry). ../README.md ("Ledger") explains the layout and the expiry step.
// Fields: k kind, s sku, c credits (signed), b balanceAfter, fp fingerprint, r ref, t tool,
// a amount, cu currency, why reason, n network, as asset, p payer, tx transaction, pv prev (the hash
// chain: ../ledger-chain.ts defines the canonical form these functions reproduce byte for byte).

import { HANDLE_GRACE_MS } from '../policy.js';
import { SHA256 } from './sha256.js';

/** Helpers prepended (after PRELUDE) to every script. */
export const LEDGER_PRELUDE = `${SHA256}
local HANDLE_GRACE_MS = ${HANDLE_GRACE_MS}
local GENESIS_HASH = string.rep('0', 64)

-- A string as JSON.stringify writes it: only the quote, the backslash and U+0000-U+001F escaped.
local JSON_ESCAPES = {['"'] = '\\\\"', ['\\\\'] = '\\\\\\\\', ['\\b'] = '\\\\b', ['\\f'] = '\\\\f', ['\\n'] = '\\\\n', ['\\r'] = '\\\\r', ['\\t'] = '\\\\t'}
local function json_string(s)
  if not string.find(s, '[%z\\1-\\31"\\\\]') then return '"' .. s .. '"' end
  local escaped = string.gsub(s, '[%z\\1-\\31"\\\\]', function(c) return JSON_ESCAPES[c] or string.format('\\\\u%04x', string.byte(c)) end)
  return '"' .. escaped .. '"'
end

-- Stream field → canonical key, for the optional string fields (kept only when non-empty), in the
-- canonical key order together with the fixed ones (nil: a fixed key, written below).
local CANONICAL_ORDER = {
  {'amount', 'a'}, {'asset', 'as'}, {'at'}, {'balanceAfter'}, {'credits'}, {'currency', 'cu'}, {'fingerprint'},
  {'kind'}, {'network', 'n'}, {'payer', 'p'}, {'prev', 'pv'}, {'reason', 'why'}, {'ref'}, {'seq'}, {'sku'},
  {'tool', 't'}, {'transaction', 'tx'},
}

-- The canonical JSON of one stream entry (id "<at>-<seq>", flat field list), as ledger-chain.ts's
-- canonicalEntry writes it for the entry ledger-stream.ts parses from the same item.
local function ledger_canonical(id, flat)
  local at, seq = string.match(id, '^(%d+)-(%d+)$')
  local f = {}
  for i = 1, #flat, 2 do f[flat[i]] = flat[i + 1] end
  local fixed = {
    at = int(tonumber(at)), seq = int(tonumber(seq)),
    balanceAfter = int(tonumber(f.b or '0')), credits = int(tonumber(f.c or '0')),
    fingerprint = json_string(f.fp or ''), kind = json_string(f.k or ''), sku = json_string(f.s or ''),
    ref = (f.r and f.r ~= '' and json_string(f.r)) or 'null',
  }
  local out = {}
  for _, pair in ipairs(CANONICAL_ORDER) do
    local name, field = pair[1], pair[2]
    if field == nil then
      out[#out + 1] = '"' .. name .. '":' .. fixed[name]
    elseif f[field] and f[field] ~= '' then
      out[#out + 1] = '"' .. name .. '":' .. json_string(f[field])
    end
  end
  return '{' .. table.concat(out, ',') .. '}'
end

-- Credits a handle's reservations hold in one SKU (its :res hash holds "deadline cost sku").
local function reserved_of(res, sku)
  local total = 0
  for _, r in ipairs(redis.call('HVALS', res)) do
    local cost, s = string.match(r, '^%S+ (%S+) (.*)$')
    if s == sku then total = total + tonumber(cost) end
  end
  return total
end

-- What a handle owns in one SKU: its available balance plus what its reservations hold.
local function owned_of(handle, res, sku)
  return tonumber(redis.call('HGET', handle, 'b:' .. sku) or '0') + reserved_of(res, sku)
end

local function field_of(fields, name)
  for i = 1, #fields, 2 do
    if fields[i] == name then return fields[i + 1] end
  end
  return nil
end

-- What a handle holds per SKU: its balance (field b:<sku> of its HGETALL \`fields\`) and what its
-- reservations (the hash \`reservations\`, values "<id> <cost> <sku>") hold; SKUs in the order first seen.
local function holdings(fields, reservations)
  local balance, reserved, order = {}, {}, {}
  for i = 1, #fields, 2 do
    local sku = string.match(fields[i], '^b:(.*)$')
    if sku then
      balance[sku] = tonumber(fields[i + 1])
      reserved[sku] = 0
      order[#order + 1] = sku
    end
  end
  for _, r in ipairs(redis.call('HVALS', reservations)) do
    local cost, sku = string.match(r, '^%S+ (%S+) (.*)$')
    if balance[sku] == nil then
      balance[sku] = 0
      reserved[sku] = 0
      order[#order + 1] = sku
    end
    reserved[sku] = reserved[sku] + tonumber(cost)
  end
  return balance, reserved, order
end

-- When a handle's ledger may go: ledger.retention after the handle's life (or after now, if later).
local function ledger_end(handle, now, retention)
  local x = tonumber(redis.call('HGET', handle, 'x') or '0')
  if x < now then x = now end
  return x + retention
end

-- Appends one entry: seq = last seq + 1, at = max(at, last at), so seq and time order agree within
-- a ledger and the id "<at>-<seq>" always grows. fp false: the fingerprint of the last entry.
-- extra: more field/value pairs. Keeps the ledger alive until ends_at (never shortens it).
-- known (optional): {text, hash}, the canonical JSON of the entry the caller appended last to this
-- ledger and its SHA-256, hashed by the gateway (../README.md, "Ledger hash chain"). The link is
-- taken from it only when the last entry's canonical JSON is exactly that text; otherwise (another
-- writer appended since, a failover lost it) it is hashed here. With known, also returns the new
-- entry's canonical JSON, for the caller to hash and pass with its next append, and who made the
-- link: 1 the caller's hash, 0 hashed here, -1 none (the ledger's first entry).
local function ledger_append(ledger, at, now, ends_at, fp, kind, sku, credits, balance_after, extra, known)
  local seq, last_fields, prev, linked = 0, nil, GENESIS_HASH, -1
  local last = redis.call('XREVRANGE', ledger, '+', '-', 'COUNT', 1)[1]
  if last then
    -- The chain link is made here, in the script that appends, so concurrent appends serialise.
    local text = ledger_canonical(last[1], last[2])
    if known and known[1] == text and string.find(known[2], '^%x+$') and #known[2] == 64 then
      prev, linked = known[2], 1
    else
      prev, linked = sha256hex(text), 0
    end
    local last_at, last_seq = string.match(last[1], '^(%d+)-(%d+)$')
    seq = tonumber(last_seq)
    if tonumber(last_at) > at then at = tonumber(last_at) end
    last_fields = last[2]
  end
  if not fp then fp = (last_fields and field_of(last_fields, 'fp')) or '' end
  local id = int(at) .. '-' .. int(seq + 1)
  local command = {'XADD', ledger, id, 'k', kind, 's', sku, 'c', int(credits), 'b', int(balance_after), 'fp', fp, 'pv', prev}
  for i = 1, #extra do command[#command + 1] = extra[i] end
  redis.call(unpack(command))
  live_until(ledger, ends_at, now)
  if known then return seq + 1, ledger_canonical(id, {select(4, unpack(command))}), linked end
  return seq + 1
end

-- A handle funded before the ledger existed (an upgrade) gets, before its first entry, one opening
-- adjust entry per SKU it holds, so that its ledger adds up from then on. Nothing for a new handle.
local function ledger_open(handle, res, ledger, now, ends_at)
  if redis.call('EXISTS', ledger) == 1 then return end
  local fields = redis.call('HGETALL', handle)
  local fp = field_of(fields, 'fp') or ''
  for i = 1, #fields, 2 do
    local sku = string.match(fields[i], '^b:(.*)$')
    if sku then
      local owned = owned_of(handle, res, sku)
      if owned ~= 0 then
        ledger_append(ledger, now, now, ends_at, fp, 'adjust', sku, owned, owned, {'why', 'opening balance: credits held before the ledger existed'})
      end
    end
  end
end

-- The handle-expiry index entry of a handle that holds or held credits: score = its expiry. With
-- \`handle\`, its keys are also kept the grace period past x (a handle created before the ledger
-- existed has a TTL of exactly x, and the expiry step must find it).
local function index_expiry(index, handle_hash, x, now, handle)
  redis.call('ZADD', index, int(x), handle_hash)
  live_until(index, x + HANDLE_GRACE_MS, now)
  if handle then live_until(handle, x + HANDLE_GRACE_MS, now) end
end
`;

