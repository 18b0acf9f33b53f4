--[[
mailguard schedule, done: forget entries that were published. Only entries still promoting are
forgotten: one parked again meanwhile (park.lua took it out of "promoting") stays.

KEYS[1]   "<ns>:{schedule:<queue>}:due": sorted set, member the mail id, score its due time (epoch ms)
          while parked, the end of its promotion lease (epoch ms) while promoting
KEYS[2]   "<ns>:{schedule:<queue>}:promoting": set of the mail ids being promoted
KEYS[3]   "<ns>:{schedule:<queue>}:payloads": hash, mail id -> the mail's payload (opaque bytes)
ARGV      the mail ids

Reply: how many entries were forgotten.
]]

local n = 0
for _, id in ipairs(ARGV) do
  if redis.call('SREM', KEYS[2], id) == 1 then
    redis.call('ZREM', KEYS[1], id)
    redis.call('HDEL', KEYS[3], id)
    n = n + 1
  end
end
return n
