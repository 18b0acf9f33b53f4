--[[
mailguard schedule, done: forget entries that were published. Only entries still promoting are
forgotten: one parked again meanwhile (park.lua took it out of "promoting") stays.

KEYS[1]   "<ns>:{<shard>}:due": sorted set, member the mail id, score its due time (epoch ms)
          while parked, the end of its promotion lease (epoch ms) while promoting
KEYS[2]   "<ns>:{<shard>}:promoting": set of the mail ids being promoted
KEYS[3]   "<ns>:{<shard>}:payloads": hash, mail id -> the mail's payload (opaque bytes)
ARGV      mail ids as stored (mailer/records/schedule/ids.py: a UUID as 17 bytes)

Reply: how many entries were forgotten.
]]

local n = 0
for i = 1, #ARGV do
  local id = ARGV[i]
  if redis.call('SREM', KEYS[2], id) == 1 then
    redis.call('ZREM', KEYS[1], id)
    redis.call('HDEL', KEYS[3], id)
    n = n + 1
  end
end
return n
