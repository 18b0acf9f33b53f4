--[[
mailguard outbox, clear: a worker received a mail's message (ARGV[2] = 1: the lane's mark moves
to the entry's write time, never back), or its publish failed (ARGV[2] = 0: no mark moves).
Mirrors MemoryOutbox.received and MemoryOutbox.discard.

KEYS[1]   "<ns>:{outbox:<queue>}:at:<lane>": sorted set, member the mail id, score the time the
          entry was written (epoch ms, Redis's clock); one per lane (broker priority)
KEYS[2]   "<ns>:{outbox:<queue>}:payloads": hash, mail id -> the message's payload (opaque bytes)
KEYS[3]   "<ns>:{outbox:<queue>}:received": sorted set, lane -> the latest write time (ms) of an
          entry a worker received from that lane (the lane's mark)
KEYS[4]   "<ns>:{outbox:<queue>}:cleared": sorted set, mail id -> when a receipt found no entry
          (epoch ms, Redis's clock): put.lua writes nothing for such a mail (its put came late)
ARGV[1]   mail id
ARGV[2]   1 to move the lane's mark, 0 not to
ARGV[3]   the lane (the field of KEYS[3])
ARGV[4]   time to live in milliseconds: the marks expire that long after now; 0 leaves their
          expiry as it is (the caller refreshes it only when it runs low)
ARGV[5]   milliseconds a receipt that found no entry is remembered (KEYS[4]; receipts only)

Reply: 1 when there was an entry in this lane, else 0 (a payload left without one is removed).
]]

local at = redis.call('ZSCORE', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
if not at then
  if ARGV[2] == '1' then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - tonumber(ARGV[5]))
    redis.call('ZADD', KEYS[4], now, ARGV[1])
    redis.call('PEXPIRE', KEYS[4], ARGV[5])
  end
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
if ARGV[2] == '1' then
  redis.call('ZADD', KEYS[3], 'GT', at, ARGV[3])
  if ARGV[4] ~= '0' then
    redis.call('PEXPIRE', KEYS[3], ARGV[4])
  end
end
return 1
