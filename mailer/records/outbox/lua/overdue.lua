--[[
mailguard outbox, overdue: the entries written more than a grace ago whose message was popped
from its lane (behind the lane's mark, or any with "drained"), oldest first per lane; and how
many others are that old. Changes nothing but removing entries past their time to live.
Mirrors MemoryOutbox.overdue.

KEYS[1]   "<ns>:{outbox:<queue>}:payloads": hash, mail id -> the message's payload (opaque bytes)
KEYS[2]   "<ns>:{outbox:<queue>}:received": sorted set, lane -> the latest write time (ms) of an
          entry a worker received from that lane (the lane's mark)
KEYS[3..] "<ns>:{outbox:<queue>}:at:<lane>": sorted set per lane, member the mail id, score the
          time the entry was written (epoch ms, Redis's clock)
ARGV[1]   grace in milliseconds: only entries written before now - grace
ARGV[2]   slack in milliseconds: an entry counts as popped when written before mark - slack
ARGV[3]   1: the caller saw the queue empty, every entry older than the grace counts as popped
ARGV[4]   limit: how many entries at most
ARGV[5]   time to live in milliseconds: older entries are removed (at most 100 per lane a call)
ARGV[6..] the lanes, in the order of KEYS[3..]

Reply: { waiting, id1, lane1, at1, id2, ... }: the count of entries older than the grace not
shown popped, then a flat list of triples.
]]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cutoff = now - tonumber(ARGV[1])
local slack = tonumber(ARGV[2])
local left = tonumber(ARGV[4])
local waiting = 0
local out = {}
for i = 3, #KEYS do
  local lane = ARGV[i + 3]
  local expired = redis.call('ZRANGEBYSCORE', KEYS[i], '-inf', now - tonumber(ARGV[5]), 'LIMIT', 0, 100)
  for _, id in ipairs(expired) do
    redis.call('ZREM', KEYS[i], id)
    redis.call('HDEL', KEYS[1], id)
  end
  local bound = cutoff
  if ARGV[3] ~= '1' then
    local mark = redis.call('ZSCORE', KEYS[2], lane)
    bound = mark and math.min(cutoff, tonumber(mark) - slack) or -1
  end
  local shown = 0
  if bound >= 0 and left > 0 then
    local rows = redis.call('ZRANGEBYSCORE', KEYS[i], '-inf', bound, 'WITHSCORES', 'LIMIT', 0, left)
    for j = 1, #rows, 2 do
      out[#out + 1] = rows[j]
      out[#out + 1] = lane
      out[#out + 1] = rows[j + 1]
    end
    shown = #rows / 2
    left = left - shown
  end
  local old = redis.call('ZCOUNT', KEYS[i], '-inf', cutoff)
  waiting = waiting + math.max(old - (bound >= 0 and redis.call('ZCOUNT', KEYS[i], '-inf', bound) or 0), 0)
end
table.insert(out, 1, waiting)
return out
