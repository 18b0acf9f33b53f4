--[[
mailguard schedule, release: entries a promoter took and could not publish (the broker refused
them) are due again after a short delay rather than at the end of their lease, each back where
it was (parked, or watched). Only entries still promoting: one parked or watched again
meanwhile keeps its new place.

KEYS[1]   "<ns>:{<shard>}:due": sorted set, member the mail id, score its due time (epoch ms)
          while parked, the end of its promotion lease (epoch ms) while promoting
KEYS[2]   "<ns>:{<shard>}:promoting": set of the mail ids being promoted
KEYS[3]   "<ns>:{<shard>}:payloads": hash, mail id -> the mail's payload (opaque bytes)
KEYS[4]   "<ns>:{<shard>}:watch": sorted set, member the mail id of a booked mail a worker
          holds as a countdown, score the time by which a run of it should have been seen (ms)
ARGV      the delay, then pairs:
ARGV[1]   delay in milliseconds, from Redis's now
          then, from ARGV[2], pairs: mail id as stored (mailer/records/schedule/ids.py: a
          UUID as 17 bytes), and 1 if it was a watch else 0

Reply: how many entries were released.
]]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local at = now + tonumber(ARGV[1])
local n = 0
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  if redis.call('SREM', KEYS[2], id) == 1 then
    if ARGV[i + 1] == '1' then
      redis.call('ZREM', KEYS[1], id)
      redis.call('ZADD', KEYS[4], at, id)
    else
      redis.call('ZADD', KEYS[1], at, id)
    end
    n = n + 1
  end
end
return n
