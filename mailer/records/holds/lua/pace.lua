--[[
mailguard holds, pace: the sender's learned rate after a hold, one atomic step per call. Mirrors
mailer/records/holds/pace.py (take_slot, slow_pace, Pace.over, MemoryPaceStore); the contract
tests/records/test_pace.py runs both. mailer/records/holds/pace_redis.py loads this file.

KEYS[1]   the pace, "<namespace>:pace:sender": JSON {rate, since, next, step, cap, level,
          quota, window, given, idle} (rate mails/s at since, epoch s; next: the earliest slot
          not given; step: mails/s gained per second sent; cap: mails/s, 0 none; level:
          changes; quota: the learned count per window seconds, 0 none; given: the slots given
          since since, the latest given_max; idle: seconds since since nobody took a slot)
KEYS[2]   the reservations, "<namespace>:pace:sender:slots": a hash, mail tag -> slot
KEYS[3]   the learned count, "<namespace>:pace:sender:learned": JSON {quota, window, until}
ARGV[1]   mode: "s" start, "t" take, "w" slow
ARGV[2]   now, epoch seconds (the caller's clock, the holds'; for "s": the pace's first slot)
ARGV[3]   "s": the pace's JSON; "t": the mail's tag; "w": asked, when the refused send was
          admitted (epoch s)
ARGV[4]   forget: seconds a pace without a cap lasts after its last change
ARGV[5]   "w": the relay's window, seconds (0: none; the rate halves)
ARGV[6]   learned_for: seconds a learned count outlives its pace
ARGV[7]   margin: a learned count is spread over window * margin seconds
ARGV[8]   given_max: the most slots a pace remembers

Reply: "s": the pace's JSON as set. "t": {slot as a string, the pace's JSON}, or nil when no
pace is in force (one that is over is deleted). "w": {the pace's JSON after the slow-down, 1
when this call changed it else 0}, or nil without a pace.
KEYS[1..2] expire "forget" seconds after the pace's next slot, KEYS[3] after learned_for.
]]

local mode, now = ARGV[1], tonumber(ARGV[2])
local forget = tonumber(ARGV[4])
local learned_for, margin = tonumber(ARGV[6]), tonumber(ARGV[7])

local function save(p)
  local ttl = math.max(math.ceil((p.next - now + forget) * 1000), 1)
  redis.call('SET', KEYS[1], cjson.encode(p), 'PX', ttl)
  if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('PEXPIRE', KEYS[2], ttl) end
end

local function rate_at(p, t)
  local rate = p.rate + p.step * math.max(t - p.since - (p.idle or 0), 0)
  if p.cap > 0 and rate > p.cap then rate = p.cap end
  return rate
end

if mode == 's' then
  redis.call('DEL', KEYS[2])
  local p = cjson.decode(ARGV[3])
  local raw = redis.call('GET', KEYS[3])
  if raw then
    local l = cjson.decode(raw)
    if l['until'] > p.since then
      local rate = l.quota / (l.window * margin)
      if p.cap > 0 and rate > p.cap then rate = p.cap end
      p.rate, p.step, p.quota, p.window = rate, 0, l.quota, l.window
    end
  end
  save(p)
  return cjson.encode(p)
end

local raw = redis.call('GET', KEYS[1])
if not raw then return nil end
local p = cjson.decode(raw)

if mode == 'w' then
  if tonumber(ARGV[3]) < p.since then return {raw, 0} end
  local window = tonumber(ARGV[5])
  local counted = {}
  if window > 0 then
    for _, slot in ipairs(p.given or {}) do
      if slot >= now - window and slot <= now then counted[#counted + 1] = slot end
    end
  end
  local level = p.level + 1
  if #counted > 1 then
    local quota, span = #counted - 1, window * margin
    p = {rate = quota / span, since = now, next = math.max(counted[1] + span, now), step = 0,
         cap = p.cap, level = level, quota = quota, window = window, given = {}, idle = 0}
    redis.call('SET', KEYS[3],
      cjson.encode({quota = quota, window = window, ['until'] = now + learned_for}),
      'PX', math.max(math.ceil(learned_for * 1000), 1))
  else
    local rate = rate_at(p, now)
    if (p.quota or 0) <= 0 then rate = math.max(rate / 2, 0.05) end
    p.rate, p.since, p.next, p.level, p.given, p.idle = rate, now, now + 1 / rate, level, {}, 0
  end
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
p.idle = (p.idle or 0) + math.max(now - p.next, 0)
local given = p.given or {}
given[#given + 1] = slot
while #given > tonumber(ARGV[8]) do table.remove(given, 1) end
p.given = given
p.next = slot + 1 / rate_at(p, slot)
local text = string.format('%.6f', slot)
if slot > now then redis.call('HSET', KEYS[2], ARGV[3], text) end
save(p)
return {text, cjson.encode(p)}
