--[[
mailguard schedule, running: a run of a watched mail started, so the watchdog leaves it alone
for a lease (a long send is not published again). Nothing changes for a mail that is not
watched (parked, promoting, or not in the schedule).

KEYS[1]   "<ns>:{schedule:<queue>}:due": sorted set, member the mail id, score (epoch ms)
KEYS[4]   "<ns>:{schedule:<queue>}:watched": set of the mail ids whose entry is a watch
          (KEYS[2] and KEYS[3], promoting and payloads, are passed and not touched)
ARGV[1]   mail id
ARGV[2]   the lease in milliseconds: the watch is due again at Redis's now + lease

Reply: 1 when the mail is watched (its score moved), else 0.
]]

if redis.call('SISMEMBER', KEYS[4], ARGV[1]) == 0 then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
return 1
