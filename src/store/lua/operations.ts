// Retried writes (SPEC §21 "Retried writes are idempotent"). A money script whose reply was lost
// (connection reset, failover) is run again by the store with the same attempt id; it must find its
// own earlier effect and answer as the first run did, never applying twice. The wrapper below does
// that for any script body without changing it: the store passes the operation's record key as an
// extra first KEY and the caller's attempt id as an extra first ARGV; both are taken off before the
// body runs, so the body sees its usual KEYS and ARGV.
import { OP_RECORD_TTL_MS } from '../policy.js';

/** Wraps a script body: replay a recorded reply of this attempt, else run the body and record its reply. */
export function once(body: string): string {
  return `
local OP_KEY = table.remove(KEYS, 1)
local OP_ATTEMPT = table.remove(ARGV, 1)
local recorded = redis.call('GET', OP_KEY)
if recorded then
  local record = cjson.decode(recorded)
  if record[1] == OP_ATTEMPT and record[2] ~= nil then return record[2] end
end
local function body()
${body}
end
local reply = body()
-- Kept a little longer than any retry of the call can take (its 1 s budget, a failover).
if reply ~= nil then redis.call('SET', OP_KEY, cjson.encode({OP_ATTEMPT, reply}), 'PX', ${OP_RECORD_TTL_MS}) end
return reply
`;
}
