--[[
mailguard schedule, take: move up to N due entries to "promoting" under a lease, atomically,
so that two workers polling at once never take the same entry (until its lease ends). Mirrors
MemorySchedule.take_due in mailer/records/schedule/memory.py.

KEYS[1]   "<ns>:{<shard>}:due": sorted set, member the mail id, score its due time (epoch ms)
          while parked, the end of its promotion lease (epoch ms) while promoting
KEYS[2]   "<ns>:{<shard>}:promoting": set of the mail ids being promoted
KEYS[3]   "<ns>:{<shard>}:payloads": hash, mail id -> the mail's payload (opaque bytes)
KEYS[4]   "<ns>:{<shard>}:watch": sorted set, member the mail id of a booked mail a worker
          holds as a countdown, score the time by which a run of it should have been seen (ms)
ARGV[1]   limit: how many entries at most (positive integer)
ARGV[2]   lease in milliseconds: how long the caller holds what it takes
ARGV[3]   ahead in milliseconds: entries of "due" scored before now + ahead are taken

Now is Redis's clock (TIME). One sorted set holds parked and promoting entries, so one cheap
read of its first score (ZRANGE 0 0 WITHSCORES) tells a poller whether anything is due: a
parked mail whose due time came, or a promoting one whose lease ended (its promoter died
between publishing and forgetting it; such a lease is re-taken up to ARGV[3] ms early).
Earliest first. Then, within the limit, the watchdog's: watches whose score passed with no
run seen, never ahead (their run may still come); a watch taken is promoting like any entry.
Reply: a flat array of quadruples: mail id as stored (mailer/records/schedule/ids.py: a UUID
as 17 bytes), payload (nil if it vanished), 1 if the entry was a watch else 0, the score it
had (epoch ms, as a string: the caller merges shards by it), ...
]]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit = tonumber(ARGV[1])
local lease_end = now + tonumber(ARGV[2])
local out = {}
local rows = redis.call(
  'ZRANGEBYSCORE', KEYS[1], '-inf', now + tonumber(ARGV[3]), 'WITHSCORES', 'LIMIT', 0, limit)
local taken = #rows / 2
for i = 1, #rows, 2 do
  local id = rows[i]
  redis.call('ZADD', KEYS[1], lease_end, id)
  redis.call('SADD', KEYS[2], id)
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', KEYS[3], id)
  out[#out + 1] = 0
  out[#out + 1] = rows[i + 1]
end
if taken < limit then
  local watched = redis.call(
    'ZRANGEBYSCORE', KEYS[4], '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit - taken)
  for i = 1, #watched, 2 do
    local id = watched[i]
    redis.call('ZREM', KEYS[4], id)
    redis.call('ZADD', KEYS[1], lease_end, id)
    redis.call('SADD', KEYS[2], id)
    out[#out + 1] = id
    out[#out + 1] = redis.call('HGET', KEYS[3], id)
    out[#out + 1] = 1
    out[#out + 1] = watched[i + 1]
  end
end
return out
