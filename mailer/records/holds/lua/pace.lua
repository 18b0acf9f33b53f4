--[[
mailguard holds, pace: the sender's learned rate after a hold, one atomic step per call. Mirrors
mailer/records/holds/pace.py (take_slot, slow_pace, Pace.over, MemoryPaceStore); the contract
tests/records/test_pace.py runs both. mailer/records/holds/pace_redis.py loads this file.

KEYS[1]   the pace, "<namespace>:pace:sender": JSON {rate, since, next, step, cap, level}
          (rate mails/s at since, epoch s; next: the earliest slot not given; step: mails/s
          gained per second; cap: mails/s, 0 none; level: halvings)
KEYS[2]   the reservations, "<namespace>:pace:sender:slots": a hash, mail tag -> slot
ARGV[1]   mode: "s" start, "t" take, "w" slow
ARGV[2]   now, epoch seconds (the caller's clock, the holds'; for "s": the pace's first slot)
ARGV[3]   "s": the pace's JSON; "t": the mail's tag; "w": asked, when the refused send was
          admitted (epoch s)
ARGV[4]   forget: seconds a pace without a cap lasts after its last change

Reply: "s": 1. "t": {slot as a string, the pace's JSON}, or nil when no pace is in force (one
that is over is deleted). "w": {the pace's JSON after the slow-down, 1 when this call halved it else 0}, or nil
without a pace.
Both keys expire "forget" seconds after the pace's next slot.
]]

local mode, now = ARGV[1], tonumber(ARGV[2])
local forget = tonumber(ARGV[4])

local function save(p)
  local ttl = math.max(math.ceil((p.next - now + forget) * 1000), 1)
  redis.call('SET', KEYS[1], cjson.encode(p), 'PX', ttl)
  if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('PEXPIRE', KEYS[2], ttl) end
end

local function rate_at(p, t)
  local rate = p.rate + p.step * math.max(t - p.since, 0)
  if p.cap > 0 and rate > p.cap then rate = p.cap end
  return rate
end

if mode == 's' then
  redis.call('DEL', KEYS[2])
  save(cjson.decode(ARGV[3]))
  return 1
end

local raw = redis.call('GET', KEYS[1])
if not raw then return nil end
local p = cjson.decode(raw)

if mode == 'w' then
  if tonumber(ARGV[3]) < p.since then return {raw, 0} end
  local rate = math.max(rate_at(p, now) / 2, 0.05)
  p.rate, p.since, p.next, p.level = rate, now, now + 1 / rate, p.level + 1
  redis.call('DEL', KEYS[2])
  save(p)
  return {cjson.encode(p), 1}
end

-- take
local over = (p.cap > 0 and rate_at(p, now) >= p.cap) or (p.cap <= 0 and now - p.since > forget)
if over then
  redis.call('DEL', KEYS[1], KEYS[2])
  return nil
end
local held = redis.call('HGET', KEYS[2], ARGV[3])
if held then
  if tonumber(held) <= now then redis.call('HDEL', KEYS[2], ARGV[3]) end
  return {held, raw}
end
local slot = math.max(now, p.next)
p.next = slot + 1 / rate_at(p, slot)
local given = string.format('%.6f', slot)
if slot > now then redis.call('HSET', KEYS[2], ARGV[3], given) end
save(p)
return {given, cjson.encode(p)}
