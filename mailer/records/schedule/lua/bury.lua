--[[
mailguard schedule, bury: move an entry whose payload cannot be used to the dead letters, so
it is never taken again and never blocks the others.

KEYS[1]   "<ns>:{schedule:<queue>}:due": sorted set, member the mail id, score its due time (epoch ms)
          while parked, the end of its promotion lease (epoch ms) while promoting
KEYS[2]   "<ns>:{schedule:<queue>}:promoting": set of the mail ids being promoted
KEYS[3]   "<ns>:{schedule:<queue>}:payloads": hash, mail id -> the mail's payload (opaque bytes)
KEYS[4]   "<ns>:{schedule:<queue>}:dead": hash, mail id -> the payload as it was ("" if none)
ARGV[1]   mail id

Reply: 1.
]]

local payload = redis.call('HGET', KEYS[3], ARGV[1]) or ''
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HSET', KEYS[4], ARGV[1], payload)
return 1
