--[[
mailguard holds, transport: start the transport's hold, or claim its probe, in one atomic step.
Mirrors start_transport / claim_probe in mailer/records/holds/transport.py and
MemoryHoldStore.start / .claim in mailer/records/holds/memory.py; the contract
tests/records/test_transport_hold.py runs both. mailer/records/holds/redis.py loads this file.

KEYS[1]   a transport hold: the relay's, "<namespace>:hold:{transport}", or one sender's,
          "<namespace>:hold:{transport}:<keyed hash of the sender>": a string holding the hold as JSON
          {"until": epoch s, "level": n, "cause": reply, "since": epoch s, "stated": false},
          kept ARGV[5] ms (refreshed by each write); lifted (DEL) when the relay accepts a mail
ARGV[1]   "start" or "claim"
ARGV[2]   now, epoch seconds (a float, the caller's clock)
ARGV[3]   start: the first length, seconds; claim: the cap of a doubled length, seconds
ARGV[4]   start: the cause (the refusal, at most 300 characters); claim: ignored
ARGV[5]   how long the key is kept, milliseconds

start: with no hold stored, write one lasting ARGV[3] s from now at level 0.
claim: with a hold stored whose "until" has passed, this caller is the probe: the hold now
lasts twice its length (capped at ARGV[3]) from now, level + 1 (the next probe's time).
Reply: {the hold's JSON or false (claim: none stored), 1 when this call wrote it else 0}.
]]

local now, seconds = tonumber(ARGV[2]), tonumber(ARGV[3])
local raw = redis.call('GET', KEYS[1])
local hold
if ARGV[1] == 'start' then
  if raw then
    return {raw, 0}
  end
  hold = {['until'] = now + seconds, level = 0, cause = ARGV[4], since = now, stated = false}
else
  if not raw then
    return {false, 0}
  end
  local old = cjson.decode(raw)
  local old_until, old_since = tonumber(old['until']), tonumber(old.since)
  if now < old_until then
    return {raw, 0}
  end
  local length = math.min(2 * (old_until - old_since), seconds)
  hold = {
    ['until'] = now + length, level = tonumber(old.level) + 1, cause = old.cause, since = now,
    stated = false
  }
end
local value = cjson.encode(hold)
redis.call('SET', KEYS[1], value, 'PX', tonumber(ARGV[5]))
return {value, 1}
