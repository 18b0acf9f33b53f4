--[[
mailguard schedule, cancel: remove one mail wherever it waits (parked or promoting).

KEYS[1]   "<ns>:{schedule}:due": sorted set, mail id by due time
KEYS[2]   "<ns>:{schedule}:promoting": sorted set, mail id by the end of its lease
KEYS[3]   "<ns>:{schedule}:payloads": hash, mail id -> payload
ARGV[1]   mail id

Reply: the payload, or nil when the mail was not in the schedule.
]]

local payload = redis.call('HGET', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return payload
