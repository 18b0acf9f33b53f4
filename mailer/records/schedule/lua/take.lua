--[[
mailguard schedule, take: move up to N due entries to "promoting" under a lease, atomically,
so that two workers polling at once never take the same entry (until its lease ends). Mirrors
MemorySchedule.take_due in mailer/records/schedule/memory.py.

KEYS[1]   "<ns>:{schedule:<queue>}:due": sorted set, member the mail id, score its due time (epoch ms)
          while parked, the end of its promotion lease (epoch ms) while promoting
KEYS[2]   "<ns>:{schedule:<queue>}:promoting": set of the mail ids being promoted
KEYS[3]   "<ns>:{schedule:<queue>}:payloads": hash, mail id -> the mail's payload (opaque bytes)
ARGV[1]   limit: how many entries at most (positive integer)
ARGV[2]   lease in milliseconds: how long the caller holds what it takes
ARGV[3]   ahead in milliseconds: entries scored before now + ahead are taken

Now is Redis's clock (TIME). One sorted set holds both kinds of entry, so one cheap read of its
first score (ZRANGE 0 0 WITHSCORES) tells a poller whether anything is due: a parked mail whose
due time came, or a promoting one whose lease ended (its promoter died between publishing and
forgetting it; such a lease is re-taken up to ARGV[3] ms early). Earliest first.
Reply: a flat array: mail id, payload (nil if it vanished), mail id, payload, ...
]]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ids = redis.call(
  'ZRANGEBYSCORE', KEYS[1], '-inf', now + tonumber(ARGV[3]), 'LIMIT', 0, tonumber(ARGV[1]))
local out = {}
local lease_end = now + tonumber(ARGV[2])
for _, id in ipairs(ids) do
  redis.call('ZADD', KEYS[1], lease_end, id)
  redis.call('SADD', KEYS[2], id)
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', KEYS[3], id)
end
return out
