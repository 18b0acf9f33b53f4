--[[
mailguard schedule, cancel: remove one mail wherever it waits (parked, promoting or watched).

KEYS[1]   "<ns>:{<shard>}:due": sorted set, member the mail id, score its due time (epoch ms)
          while parked, the end of its promotion lease (epoch ms) while promoting
KEYS[2]   "<ns>:{<shard>}:promoting": set of the mail ids being promoted
KEYS[3]   "<ns>:{<shard>}:payloads": hash, mail id -> the mail's payload (opaque bytes)
KEYS[4]   "<ns>:{<shard>}:watch": sorted set, member the mail id of a booked mail a worker
          holds as a countdown, score the time by which a run of it should have been seen (ms)
ARGV[1]   mail id, as stored (mailer/records/schedule/ids.py: a UUID as 17 bytes)

Reply: the payload, or nil when the mail was not in the schedule.
]]

local id = ARGV[1]
local payload = redis.call('HGET', KEYS[3], id)
redis.call('ZREM', KEYS[1], id)
redis.call('SREM', KEYS[2], id)
redis.call('ZREM', KEYS[4], id)
redis.call('HDEL', KEYS[3], id)
return payload
