--[[
mailguard schedule, bury: move an entry whose payload cannot be used to the dead letters, so
it is never taken again and never blocks the others.

KEYS[1]   "<ns>:{schedule}:promoting": sorted set, mail id by the end of its lease
KEYS[2]   "<ns>:{schedule}:payloads": hash, mail id -> payload
KEYS[3]   "<ns>:{schedule}:dead": hash, mail id -> the payload as it was ("" if none)
ARGV[1]   mail id

Reply: 1.
]]

local payload = redis.call('HGET', KEYS[2], ARGV[1]) or ''
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], payload)
return 1
