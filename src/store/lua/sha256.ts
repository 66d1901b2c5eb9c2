// SHA-256 in Redis Lua, for the ledger's hash chain (../ledger-chain.ts): Redis gives scripts only
// redis.sha1hex, and the chain must be computed in the script that appends the entry, so that two
// gateways appending to one ledger at once can never chain to the same predecessor. Redis 7's Lua 5.1
// ships LuaBitOp (`bit`): its operations take and return signed 32-bit integers, and `bit.tobit`
// wraps a sum of a few of them modulo 2^32 (exact while the sum stays below 2^51). The textbook form
// on purpose: writing rotations as Lua arithmetic to save calls into the library measured no faster.
// One 64-byte block costs about 35 µs of Redis CPU (src/store/README.md, "Ledger hash chain").
// test/store/ledger-chain.test.ts checks it against node:crypto on random inputs and on every
// padding boundary.

/** Defines `sha256hex(message)` → 64 lower-case hex digits. */
export const SHA256 = `
local SHA256_K = {
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
}

local function sha256hex(message)
  local band, bxor, rshift, ror, tobit = bit.band, bit.bxor, bit.rshift, bit.ror, bit.tobit
  local byte, K = string.byte, SHA256_K
  local length = #message
  local bits = length * 8
  local high = math.floor(bits / 4294967296)
  local low = bits % 4294967296
  -- Padding: 0x80, zeros up to 56 mod 64, the length in bits as 64-bit big-endian.
  message = message .. '\\128' .. string.rep('\\0', (55 - length) % 64) .. string.char(
    math.floor(high / 16777216) % 256, math.floor(high / 65536) % 256, math.floor(high / 256) % 256, high % 256,
    math.floor(low / 16777216) % 256, math.floor(low / 65536) % 256, math.floor(low / 256) % 256, low % 256)
  local h0, h1, h2, h3 = 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a
  local h4, h5, h6, h7 = 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19
  local w = {}
  for block = 1, #message, 64 do
    for i = 1, 16 do
      local p = block + (i - 1) * 4
      local b1, b2, b3, b4 = byte(message, p, p + 3)
      w[i] = tobit(((b1 * 256 + b2) * 256 + b3) * 256 + b4)
    end
    for i = 17, 64 do
      local x, y = w[i - 15], w[i - 2]
      w[i] = tobit(w[i - 16] + bxor(ror(x, 7), ror(x, 18), rshift(x, 3)) + w[i - 7] + bxor(ror(y, 17), ror(y, 19), rshift(y, 10)))
    end
    local a, b, c, d, e, f, g, h = h0, h1, h2, h3, h4, h5, h6, h7
    for i = 1, 64 do
      -- Ch(e,f,g) = g ^ (e & (f ^ g)); Maj(a,b,c) = (a & b) + (c & (a ^ b)) (disjoint bits: + is |).
      local t1 = h + bxor(ror(e, 6), ror(e, 11), ror(e, 25)) + bxor(g, band(e, bxor(f, g))) + K[i] + w[i]
      local t2 = bxor(ror(a, 2), ror(a, 13), ror(a, 22)) + band(a, b) + band(c, bxor(a, b))
      h = g
      g = f
      f = e
      e = tobit(d + t1)
      d = c
      c = b
      b = a
      a = tobit(t1 + t2)
    end
    h0, h1, h2, h3 = tobit(h0 + a), tobit(h1 + b), tobit(h2 + c), tobit(h3 + d)
    h4, h5, h6, h7 = tobit(h4 + e), tobit(h5 + f), tobit(h6 + g), tobit(h7 + h)
  end
  local tohex = bit.tohex
  return tohex(h0) .. tohex(h1) .. tohex(h2) .. tohex(h3) .. tohex(h4) .. tohex(h5) .. tohex(h6) .. tohex(h7)
end
`;
