--[[
mailguard holds, put: set a hold, doubling the one in force, in one atomic step, so that two
workers throttled at once double it once each and never lose a write. Mirrors next_hold in
mailer/records/holds/base.py and MemoryHoldStore.put in mailer/records/holds/memory.py; the
contract tests/test_contract_holds.py runs both. mailer/records/holds/redis.py loads this file.

KEYS[1]   the hold, "<namespace>:hold:sender" or "<namespace>:hold:{<keyed hash of the
          recipient's limit key>}": a string holding the hold as JSON
          {"until": epoch s, "level": n, "cause": reply, "since": epoch s}, with a PX expiry at
          its end
ARGV[1]   now, epoch seconds (a float, the caller's clock)
ARGV[2]   seconds: how long the new hold lasts at least (a float > 0)
ARGV[3]   max_hold: the cap, in seconds, of a doubled hold (never of ARGV[2] itself)
ARGV[4]   cause: the reply that set the hold (at most 300 characters)

Reply: the new hold's JSON. While the stored hold is in force (until > now) its length
(until - since) is doubled, capped at ARGV[3], never under ARGV[2], and its level goes up by
one; else the hold lasts ARGV[2] seconds at level 0.
]]

local now, seconds, cap = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local level, length = 0, seconds
local raw = redis.call('GET', KEYS[1])
if raw then
  local old = cjson.decode(raw)
  if tonumber(old['until']) > now then
    local doubled = math.min(2 * (tonumber(old['until']) - tonumber(old.since)), cap)
    length = math.max(seconds, doubled)
    level = tonumber(old.level) + 1
  end
end
local value = cjson.encode({['until'] = now + length, level = level, cause = ARGV[4], since = now})
redis.call('SET', KEYS[1], value, 'PX', math.max(math.ceil(length * 1000), 1))
return value
