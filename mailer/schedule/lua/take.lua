--[[
mailguard schedule, take: move up to N due entries to "promoting" under a lease, atomically,
so that two workers polling at once never take the same entry (until its lease ends). Mirrors
MemorySchedule.take_due in mailer/schedule/memory.py.

KEYS[1]   "<ns>:{schedule}:due": sorted set, mail id by due time (epoch ms)
KEYS[2]   "<ns>:{schedule}:promoting": sorted set, mail id by the end of its lease (epoch ms)
KEYS[3]   "<ns>:{schedule}:payloads": hash, mail id -> payload
ARGV[1]   limit: how many entries at most (positive integer)
ARGV[2]   lease in milliseconds: how long the caller holds what it takes
ARGV[3]   ahead in milliseconds: entries due before now + ahead are taken

Now is Redis's clock (TIME). Entries whose lease ended (their promoter died between publishing
and forgetting them) come first, then due entries, earliest first.
Reply: a flat array: mail id, payload (nil if it vanished), mail id, payload, ...
While nothing is due this is two ZRANGEBYSCOREs on empty ranges: cheap to poll.
]]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit = tonumber(ARGV[1])
local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, limit)
if #ids < limit then
  local fresh = redis.call(
    'ZRANGEBYSCORE', KEYS[1], '-inf', now + tonumber(ARGV[3]), 'LIMIT', 0, limit - #ids)
  for _, id in ipairs(fresh) do
    redis.call('ZREM', KEYS[1], id)
    ids[#ids + 1] = id
  end
end
local out = {}
local lease_end = now + tonumber(ARGV[2])
for _, id in ipairs(ids) do
  redis.call('ZADD', KEYS[2], lease_end, id)
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', KEYS[3], id)
end
return out
