--[[
mailguard schedule, bury: move an entry whose payload cannot be used to the dead letters, so
it is never taken again and never blocks the others.

KEYS[1]   "<ns>:{<shard>}:due": sorted set, member the mail id, score its due time (epoch ms)
          while parked, the end of its promotion lease (epoch ms) while promoting
KEYS[2]   "<ns>:{<shard>}:promoting": set of the mail ids being promoted
KEYS[3]   "<ns>:{<shard>}:payloads": hash, mail id -> the mail's payload (opaque bytes)
KEYS[4]   "<ns>:{<shard>}:dead": hash, mail id -> the payload as it was ("" if none)
ARGV[1]   mail id, as stored (mailer/records/schedule/ids.py: a UUID as 17 bytes); the
          dead letter is kept under it

Reply: 1.
]]

local id = ARGV[1]
local payload = redis.call('HGET', KEYS[3], id) or ''
redis.call('ZREM', KEYS[1], id)
redis.call('SREM', KEYS[2], id)
redis.call('HDEL', KEYS[3], id)
redis.call('HSET', KEYS[4], ARGV[1], payload)
return 1
