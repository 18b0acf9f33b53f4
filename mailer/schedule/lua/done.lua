--[[
mailguard schedule, done: forget entries that were published. Only entries still promoting are
forgotten: one parked again meanwhile (park.lua took it out of "promoting") stays.

KEYS[1]   "<ns>:{schedule}:promoting": sorted set, mail id by the end of its lease
KEYS[2]   "<ns>:{schedule}:payloads": hash, mail id -> payload
ARGV      the mail ids

Reply: how many entries were forgotten.
]]

local n = 0
for _, id in ipairs(ARGV) do
  if redis.call('ZREM', KEYS[1], id) == 1 then
    redis.call('HDEL', KEYS[2], id)
    n = n + 1
  end
end
return n
