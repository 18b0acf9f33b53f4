--[[
mailguard schedule, done: forget entries that were published. Only entries still promoting are
forgotten: one parked again meanwhile (park.lua took it out of "promoting") stays.

KEYS[1]   "<ns>:{<shard>}:due": sorted set, member the mail id, score its due time (epoch ms)
          while parked, the end of its promotion lease (epoch ms) while promoting
KEYS[2]   "<ns>:{<shard>}:promoting": set of the mail ids being promoted
KEYS[3]   "<ns>:{<shard>}:payloads": hash, mail id -> the mail's payload (opaque bytes)
ARGV      pairs: a mail id as stored (mailer/records/schedule/ids.py: a UUID as 17 bytes),
          then the mail id as earlier versions stored it (its text; "" when the same):
          an entry promoting under it (taken from an earlier version's) is forgotten the same

Reply: how many entries were forgotten.
]]

local n = 0
for i = 1, #ARGV, 2 do
  local id = ARGV[i]
  local promoting = redis.call('SREM', KEYS[2], id) == 1
  if not promoting and ARGV[i + 1] ~= '' then
    id = ARGV[i + 1]
    promoting = redis.call('SREM', KEYS[2], id) == 1
  end
  if promoting then
    redis.call('ZREM', KEYS[1], id)
    redis.call('HDEL', KEYS[3], id)
    n = n + 1
  end
end
return n
