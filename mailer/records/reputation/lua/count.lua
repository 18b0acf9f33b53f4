--[[
mailguard reputation, count: add to one sender's counters in the current bucket, drop
the buckets that left the rolling window, judge the rates against the thresholds and pause or
lift the sender, in one atomic step. Mirrors MemoryReputationStore.count and crossed() in
mailer/records/reputation/ (memory.py, base.py); tests/records/test_contract_reputation.py runs both.
mailer/records/reputation/redis.py loads this file.

Every key carries the same {hash tag}, "{reputation}" (one Cluster slot for all senders):
KEYS[1]   the sender's counters, "<ns>:{reputation}:counts:<sender hash>", a hash:
          "<bucket>:s" / ":b" / ":c" (mails sent, hard bounces, complaints in that bucket),
          "t:s" / "t:b" / "t:c" (their sums over the window), "cur" (the newest bucket),
          "sender" (the address); PX: one window and one bucket after the last count (a
          check, ARGV[4] "", does not extend it: a sender that stopped sending is forgotten)
KEYS[2]   the sender's pause, "<ns>:{reputation}:pause:<sender hash>": JSON (Pause in base.py);
          kept while paused, a lift's record kept one window
KEYS[3]   the marks of the current bucket, "<ns>:{reputation}:marks:<bucket>", a hash of
          hashed Message-ID -> "<sender>\t<kind>", PX one window and one bucket
ARGV[1]   now, epoch seconds (a float, the caller's clock)
ARGV[2]   a bucket's length in seconds (the window / 24)
ARGV[3]   buckets per window (24)
ARGV[4]   the counters to add one to: "s", "sb", "c", "b" or "" (only judge)
ARGV[5]   the sender's address
ARGV[6]   the minimum volume: no rate counts with fewer mails sent in the window
ARGV[7]   the complaint threshold (a fraction), or -1: none
ARGV[8]   the bounce threshold (a fraction), or -1: none
ARGV[9]   the hashed Message-ID to mark, or "" (none)
ARGV[10]  the mail's kind (with ARGV[9])

Reply: {sent, bounced, complained, transition ("", "paused", "lifted"), the pause's JSON or ""}
]]

local now, width, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local h = KEYS[1]
local bucket = math.floor(now / width)
local last = tonumber(redis.call('HGET', h, 'cur') or bucket)
if last > bucket then bucket = last end
-- Buckets that leave the window: subtract them from the sums (at most n of them).
for b = last - n + 1, math.min(last, bucket - n) do
  for _, e in ipairs({'s', 'b', 'c'}) do
    local field = b .. ':' .. e
    local v = tonumber(redis.call('HGET', h, field) or 0)
    if v ~= 0 then
      redis.call('HINCRBY', h, 't:' .. e, -v)
      redis.call('HDEL', h, field)
    end
  end
end
local keep = math.ceil((n + 1) * width * 1000)
if ARGV[4] ~= '' then  -- a count; a check alone neither makes the hash nor keeps it longer
  redis.call('HSET', h, 'cur', bucket, 'sender', ARGV[5])
  for i = 1, #ARGV[4] do
    local e = string.sub(ARGV[4], i, i)
    redis.call('HINCRBY', h, bucket .. ':' .. e, 1)
    redis.call('HINCRBY', h, 't:' .. e, 1)
  end
  redis.call('PEXPIRE', h, keep)
elseif last < bucket and redis.call('EXISTS', h) == 1 then
  redis.call('HSET', h, 'cur', bucket)
end
if ARGV[9] ~= '' then
  redis.call('HSET', KEYS[3], ARGV[9], ARGV[5] .. '\t' .. ARGV[10])
  redis.call('PEXPIRE', KEYS[3], keep)
end

local sums = redis.call('HMGET', h, 't:s', 't:b', 't:c')
local s, b, c = tonumber(sums[1] or 0), tonumber(sums[2] or 0), tonumber(sums[3] or 0)
local rate, value, threshold = '', 0, 0
local ct, bt = tonumber(ARGV[7]), tonumber(ARGV[8])
if s >= math.max(tonumber(ARGV[6]), 1) then
  if ct >= 0 and c / s >= ct then
    rate, value, threshold = 'complaint', c / s, ct
  elseif bt >= 0 and b / s >= bt then
    rate, value, threshold = 'bounce', b / s, bt
  end
end

local raw = redis.call('GET', KEYS[2])
local paused = false
if raw then
  local ok, old = pcall(cjson.decode, raw)
  paused = ok and type(old) == 'table' and old['paused'] == true
end
local transition = ''
if rate ~= '' and not paused then
  raw = cjson.encode({paused = true, sender = ARGV[5], rate = rate, value = value,
                      threshold = threshold, since = now})
  redis.call('SET', KEYS[2], raw)
  transition = 'paused'
elseif rate == '' and paused then
  raw = cjson.encode({paused = false, sender = ARGV[5], lifted_at = now, lifted_by = 'auto'})
  redis.call('SET', KEYS[2], raw, 'PX', keep)
  transition = 'lifted'
end
return {s, b, c, transition, raw or ''}
