--[[
mailguard outbox, put: record a mail's first message about to be published, with its payload.
Mirrors MemoryOutbox.put in mailer/records/outbox/memory.py; the contract
tests/records/test_contract_outbox.py runs both.

KEYS[1]   "<ns>:{outbox:<queue>}:at:<lane>": sorted set, member the mail id, score the time the
          entry was written (epoch ms, Redis's clock); one per lane (broker priority)
KEYS[2]   "<ns>:{outbox:<queue>}:payloads": hash, mail id -> the message's payload (opaque bytes)
KEYS[3]   "<ns>:{outbox:<queue>}:received": sorted set, lane -> the latest write time (ms) of an
          entry a worker received from that lane (not written here; clear.lua keeps its expiry)
KEYS[4]   "<ns>:{outbox:<queue>}:cleared": sorted set, mail id -> when a worker's receipt found
          no entry to clear (epoch ms): a put that comes after its own mail's receipt
          All keys share the hash tag {outbox:<queue>}: one Redis Cluster slot.
ARGV[1]   mail id
ARGV[2]   payload
ARGV[3]   time to live in milliseconds: the lane's set and the payloads expire that long after
          now; 0 leaves their expiry as it is (the caller refreshes it only when it runs low)
ARGV[4]   milliseconds a receipt found before its put is remembered (KEYS[4]); 0 when no receipt
          can come first (the put rides ahead of its own publish): KEYS[4] is not read

Reply: the write time (epoch ms), or 0 when the mail was received already (nothing written).
]]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[4] ~= '0' then
  local cleared = redis.call('ZSCORE', KEYS[4], ARGV[1])
  if cleared then
    redis.call('ZREM', KEYS[4], ARGV[1])
    if tonumber(cleared) > now - tonumber(ARGV[4]) then
      return 0
    end
  end
end
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
if ARGV[3] ~= '0' then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return now
