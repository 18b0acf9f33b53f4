--[[
mailguard schedule, watch: keep a booked mail's payload beside its booking while a worker holds
it as a countdown. The watchdog (take.lua) publishes it again only if its score passes with no
run seen. Mirrors MemorySchedule.watch in mailer/records/schedule/memory.py.

KEYS[1]   "<ns>:{<shard>}:due": sorted set, member the mail id, score its due time (epoch ms)
          while parked, the end of its promotion lease (epoch ms) while promoting
KEYS[2]   "<ns>:{<shard>}:promoting": set of the mail ids being promoted
KEYS[3]   "<ns>:{<shard>}:payloads": hash, mail id -> the mail's payload (opaque bytes)
KEYS[4]   "<ns>:{<shard>}:watch": sorted set, member the mail id of a booked mail a worker
          holds as a countdown, score the time by which a run of it should have been seen (ms)
KEYS[5]   "<ns>:{<shard>}:wake" (optional): a list; when this watch becomes the shard's first,
          one item is pushed (the list kept to one), which wakes a promoter blocked on it
ARGV[1]   mail id, as stored (mailer/records/schedule/ids.py: a UUID as 17 bytes)
ARGV[2]   when the watchdog may publish it, epoch milliseconds (integer): the countdown's end
          plus the grace
ARGV[3]   payload

Reply: 1. Replaces a parked, promoting or watched entry of the same id (one entry per mail id);
a promoting one stops promoting, so its promoter's done.lua leaves the watch alone.
]]

redis.call('SREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[4], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
if KEYS[5] and redis.call('ZRANGE', KEYS[4], 0, 0)[1] == ARGV[1] then
  redis.call('LPUSH', KEYS[5], '1')
  redis.call('LTRIM', KEYS[5], 0, 0)
end
return 1
