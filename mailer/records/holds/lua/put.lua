--[[
mailguard holds, put: set a hold, doubling the one remembered, in one atomic step, so that two
workers throttled at once double it once each and never lose a write. Mirrors next_hold in
mailer/records/holds/base.py and MemoryHoldStore.put in mailer/records/holds/memory.py; the
contract tests/records/test_contract_holds.py runs both. mailer/records/holds/redis.py loads this file.

KEYS[1]   the hold, "<namespace>:hold:sender" or "<namespace>:hold:{<keyed hash of the
          recipient's limit key>}": a string holding the hold as JSON
          {"until": epoch s, "level": n, "cause": reply, "since": epoch s, "stated": bool},
          with a PX expiry one length after its end (it is remembered that long)
ARGV[1]   now, epoch seconds (a float, the caller's clock)
ARGV[2]   seconds: how long the new hold lasts at least (a float > 0)
ARGV[3]   max_hold: the cap, in seconds, of a doubled hold (never of ARGV[2] itself)
ARGV[4]   cause: the reply that set the hold (at most 300 characters)
ARGV[5]   asked: when the refused send was admitted, epoch seconds (a float)
ARGV[6]   stated: "1" when ARGV[2] is the delay the reply stated, else "0"

Reply: {the hold's JSON, 1 when this call wrote it else 0}. With no stored hold (or one past its memory: until + length <= now)
the hold lasts ARGV[2] seconds at level 0. A reply to a send admitted before the stored hold
began (ARGV[5] < since) leaves it as it is, made to last until now + ARGV[2] if the reply
stated that delay (ARGV[6]) and it ends later.
Else its length (until - since) is doubled, capped at ARGV[3], never under ARGV[2], and its
level goes up by one; "stated" stays true only when the length is ARGV[2] itself.
]]

local now, seconds, cap = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local asked, stated = tonumber(ARGV[5]), ARGV[6] == '1'
local level, length, since, cause = 0, seconds, now, ARGV[4]
local raw = redis.call('GET', KEYS[1])
if raw then
  local old = cjson.decode(raw)
  local old_until, old_since = tonumber(old['until']), tonumber(old.since)
  local old_length = old_until - old_since
  if now < old_until + old_length then
    if asked < old_since then
      if not stated or now + seconds <= old_until then
        return {raw, 0}
      end
      level = tonumber(old.level)
    else
      length = math.max(seconds, math.min(2 * old_length, cap))
      level = tonumber(old.level) + 1
      stated = stated and length == seconds
    end
  end
end
local value = cjson.encode({
  ['until'] = now + length, level = level, cause = cause, since = since, stated = stated
})
redis.call('SET', KEYS[1], value, 'PX', math.max(math.ceil(2 * length * 1000), 1))
return {value, 1}
