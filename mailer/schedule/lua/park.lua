--[[
mailguard schedule, park: put one mail in the schedule until its due time. Mirrors
MemorySchedule.park in mailer/schedule/memory.py; tests/test_schedule.py runs both.

KEYS[1]   "<ns>:{schedule}:due": sorted set, member the mail id, score its due time (epoch ms)
KEYS[2]   "<ns>:{schedule}:promoting": sorted set, member the mail id, score its lease's end (ms)
KEYS[3]   "<ns>:{schedule}:payloads": hash, mail id -> the mail's payload (opaque bytes)
          All keys share the hash tag {schedule}: one Redis Cluster slot.
ARGV[1]   mail id
ARGV[2]   due time, epoch milliseconds (integer)
ARGV[3]   payload

Reply: 1. A promoting entry of the same id (a promoted mail that parks again) stops promoting,
so the promoter that took it does not forget the new entry (done.lua removes only promoting ones).
]]

redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
return 1
