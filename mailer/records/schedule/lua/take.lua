--[[
mailguard schedule, take: move up to N due entries to "promoting" under a lease, atomically,
so that two workers polling at once never take the same entry (until its lease ends). Mirrors
MemorySchedule.take_due in mailer/records/schedule/memory.py.

KEYS[1]   "<ns>:{schedule:<queue>}:due": sorted set, member the mail id, score its due time (epoch ms)
          while parked, the end of its promotion lease (epoch ms) while promoting, the time by
          which a run should have been seen (epoch ms) while watched
KEYS[2]   "<ns>:{schedule:<queue>}:promoting": set of the mail ids being promoted
KEYS[3]   "<ns>:{schedule:<queue>}:payloads": hash, mail id -> the mail's payload (opaque bytes)
KEYS[4]   "<ns>:{schedule:<queue>}:watched": set of the mail ids whose entry is a watch (a booked
          mail held as a countdown by a worker: published again only if no run came)
ARGV[1]   limit: how many entries at most (positive integer)
ARGV[2]   lease in milliseconds: how long the caller holds what it takes
ARGV[3]   ahead in milliseconds: entries scored before now + ahead are taken

Now is Redis's clock (TIME). One sorted set holds both kinds of entry, so one cheap read of its
first score (ZRANGE 0 0 WITHSCORES) tells a poller whether anything is due: a parked mail whose
due time came, or a promoting one whose lease ended (its promoter died between publishing and
forgetting it; such a lease is re-taken up to ARGV[3] ms early), or a watch whose score (the
time its run should have started, plus a grace) passed with no run seen (a watch is never
taken ahead). Earliest first. A watch taken stops being one: it is promoting like any other.
Reply: a flat array of triples: mail id, payload (nil if it vanished), 1 if the entry was a
watch else 0, ...
]]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local scored = redis.call(
  'ZRANGEBYSCORE', KEYS[1], '-inf', now + tonumber(ARGV[3]), 'WITHSCORES', 'LIMIT', 0,
  tonumber(ARGV[1]))
local out = {}
local lease_end = now + tonumber(ARGV[2])
for i = 1, #scored, 2 do
  local id = scored[i]
  -- a watch is taken once its score passed, never ahead: its run may still come
  local watched = redis.call('SISMEMBER', KEYS[4], id)
  if watched == 0 or tonumber(scored[i + 1]) <= now then
    redis.call('ZADD', KEYS[1], lease_end, id)
    redis.call('SADD', KEYS[2], id)
    redis.call('SREM', KEYS[4], id)
    out[#out + 1] = id
    out[#out + 1] = redis.call('HGET', KEYS[3], id)
    out[#out + 1] = watched
  end
end
return out
