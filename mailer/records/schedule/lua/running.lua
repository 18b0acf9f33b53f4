--[[
mailguard schedule, running: a run of a watched mail started, so the watchdog leaves it alone
for a lease (a long send is not published again). Nothing changes for a mail that is not
watched (parked, promoting, or not in the schedule).

KEYS[1]   "<ns>:{<shard>}:due": sorted set, member the mail id, score its due time (epoch ms)
          while parked, the end of its promotion lease (epoch ms) while promoting
KEYS[2]   "<ns>:{<shard>}:promoting": set of the mail ids being promoted
KEYS[3]   "<ns>:{<shard>}:payloads": hash, mail id -> the mail's payload (opaque bytes)
KEYS[4]   "<ns>:{<shard>}:watch": sorted set, member the mail id of a booked mail a worker
          holds as a countdown, score the time by which a run of it should have been seen (ms)
ARGV[1]   mail id, as stored (mailer/records/schedule/ids.py: a UUID as 17 bytes)
ARGV[2]   the lease in milliseconds: the watch is due again at Redis's now + lease

Reply: 1 when the mail is watched (its score moved), else 0.
]]

local id = ARGV[1]
if not redis.call('ZSCORE', KEYS[4], id) then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[4], now + tonumber(ARGV[2]), id)
return 1
