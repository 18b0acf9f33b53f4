--[[
mailguard schedule, park: put one mail in the schedule until its due time. Mirrors
MemorySchedule.park in mailer/records/schedule/memory.py; the contract
tests/records/test_contract_schedule.py runs both.

KEYS[1]   "<ns>:{<shard>}:due": sorted set, member the mail id, score its due time (epoch ms)
          while parked, the end of its promotion lease (epoch ms) while promoting
KEYS[2]   "<ns>:{<shard>}:promoting": set of the mail ids being promoted
KEYS[3]   "<ns>:{<shard>}:payloads": hash, mail id -> the mail's payload (opaque bytes)
KEYS[4]   "<ns>:{<shard>}:watch": sorted set, member the mail id of a booked mail a worker
          holds as a countdown, score the time by which a run of it should have been seen (ms)
          All keys share their shard's hash tag (schedule/redis.py): one Redis Cluster slot.
ARGV[1]   mail id, as stored (mailer/records/schedule/ids.py: a UUID as 17 bytes)
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
