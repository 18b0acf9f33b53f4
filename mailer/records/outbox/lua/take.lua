--[[
mailguard outbox, take: of the given entries, those still there and still older than the grace
are written again as of now (their copy is about to be published: the next copy only after
another grace, so two watchdogs never publish one entry twice within it) and returned with
their payloads. A member whose payload is gone is removed. Mirrors MemoryOutbox.take.

KEYS[1]   "<ns>:{outbox:<queue>}:payloads": hash, mail id -> the message's payload (opaque bytes)
KEYS[2..] "<ns>:{outbox:<queue>}:at:<lane>": the sorted set of each entry's lane, in the order of
          the ids (member the mail id, score its write time, epoch ms, Redis's clock)
ARGV[1]   grace in milliseconds
ARGV[2..] the mail ids, one per KEYS[2..]

Reply: a flat list of triples: mail id, payload, the new write time (ms), ...
]]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cutoff = now - tonumber(ARGV[1])
local out = {}
for i = 2, #KEYS do
  local id = ARGV[i]
  local at = redis.call('ZSCORE', KEYS[i], id)
  if at and tonumber(at) <= cutoff then
    local payload = redis.call('HGET', KEYS[1], id)
    if payload then
      redis.call('ZADD', KEYS[i], now, id)
      out[#out + 1] = id
      out[#out + 1] = payload
      out[#out + 1] = now
    else
      redis.call('ZREM', KEYS[i], id)
    end
  end
end
return out
