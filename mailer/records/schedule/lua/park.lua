--[[
mailguard schedule, park: put one mail in the schedule until its due time. Mirrors
MemorySchedule.park in mailer/records/schedule/memory.py; the contract
tests/records/test_contract_schedule.py runs both.

KEYS[1]   "<ns>:{schedule:<queue>}:due": sorted set, member the mail id, score its due time (epoch ms)
          while parked, the end of its promotion lease (epoch ms) while promoting
KEYS[2]   "<ns>:{schedule:<queue>}:promoting": set of the mail ids being promoted
KEYS[3]   "<ns>:{schedule:<queue>}:payloads": hash, mail id -> the mail's payload (opaque bytes)
KEYS[4]   "<ns>:{schedule:<queue>}:watch": sorted set, member the mail id of a booked mail a worker
          holds as a countdown, score the time by which a run of it should have been seen (ms)
          All keys share the hash tag {schedule:<queue>}: one Redis Cluster slot.
ARGV[1]   mail id
ARGV[2]   due time, epoch milliseconds (integer)
ARGV[3]   payload

Reply: 1. A promoting entry of the same id (a promoted mail that parks again) stops promoting,
so the promoter that took it does not forget the new entry (done.lua removes only promoting ones);
a watch of the same id becomes a parked entry (one entry per mail id).
]]

redis.call('SREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
return 1
