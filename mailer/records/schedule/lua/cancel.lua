--[[
mailguard schedule, cancel: remove one mail wherever it waits (parked, promoting or watched).

KEYS[1]   "<ns>:{schedule:<queue>}:due": sorted set, member the mail id, score its due time (epoch ms)
          while parked, the end of its promotion lease (epoch ms) while promoting
KEYS[2]   "<ns>:{schedule:<queue>}:promoting": set of the mail ids being promoted
KEYS[3]   "<ns>:{schedule:<queue>}:payloads": hash, mail id -> the mail's payload (opaque bytes)
KEYS[4]   "<ns>:{schedule:<queue>}:watched": set of the mail ids whose entry is a watch (a booked
          mail held as a countdown by a worker: published again only if no run came)
ARGV[1]   mail id

Reply: the payload, or nil when the mail was not in the schedule.
]]

local payload = redis.call('HGET', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('SREM', KEYS[4], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return payload
