--[[
mailguard warm-up, take: count one mail of a sender in its plan's allowance for the day, or
mark it waiting for the next day, in one atomic step (every worker agrees on the count).
Mirrors MemoryWarmupStore.take in mailer/records/warmup/memory.py;
tests/records/test_contract_warmup.py runs both. mailer/records/warmup/redis.py loads this file.

Every key carries the hash tag "{warmup}" (one Cluster slot):
KEYS[1]  the sender's state, "<ns>:{warmup}:state:<sender hash>", a hash: "start" (day 1's
         start, epoch seconds as given), "last" (the last mail's time), "day", "used",
         "waiting", "m0" / "m1" (the day whose mails KEYS[2] / KEYS[3] hold); PX: the idle
         span after the last mail (then the sender starts over anyway)
KEYS[2]  the mails of an even day, "<ns>:{warmup}:mails0:<sender hash>", hashed mail id ->
         "a" (counted) or its position among the day's waiting mails
KEYS[3]  the same for an odd day ("mails1"); both PX two days
ARGV[1]  now, epoch seconds (the limiter's clock)
ARGV[2]  a day's length in seconds
ARGV[3]  the idle span in seconds after which the sender starts over on day 1
ARGV[4]  the hashed mail id
ARGV[5]  "1": a transactional kind (counted, never waits), else "0"
ARGV[6...] the plan's allowances, day 1 first (past the last: no limit)

Reply: {admitted (1/0), day, allowance (-1: none), used, waiting, start (as stored), position}
]]

local now, width, idle = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local mail, force = ARGV[4], ARGV[5] == '1'
local h = KEYS[1]
local st = redis.call('HMGET', h, 'start', 'last', 'day', 'used', 'waiting', 'm0', 'm1')
local start_raw = st[1]
local day, used, waiting = tonumber(st[3] or 0), tonumber(st[4] or 0), tonumber(st[5] or 0)
local held = {tonumber(st[6] or -1), tonumber(st[7] or -1)}
local last = tonumber(st[2] or 0)
if not start_raw or now - last >= idle then
  redis.call('DEL', h, KEYS[2], KEYS[3])
  start_raw, last, day, used, waiting, held = ARGV[1], now, 0, 0, 0, {-1, -1}
end
local start = tonumber(start_raw)
local today = math.floor((now - start) / width) + 1
if today < day then today = day end
if today ~= day then
  day, used, waiting = today, 0, 0
end
-- Each mails hash holds today's or yesterday's mails; an older one is emptied.
for p = 0, 1 do
  if held[p + 1] ~= today and held[p + 1] ~= today - 1 and held[p + 1] ~= -1 then
    redis.call('DEL', KEYS[2 + p])
  end
end
local mine, before = KEYS[2 + today % 2], KEYS[2 + (today - 1) % 2]
if last < now then last = now end
local allowance = tonumber(ARGV[5 + today] or -1)
local seen = redis.call('HGET', mine, mail)
local admitted = seen == 'a'
if not admitted and held[(today - 1) % 2 + 1] == today - 1 then
  admitted = redis.call('HGET', before, mail) == 'a'
end
local position = 0
if not admitted and (force or allowance < 0 or used < allowance) then
  used = used + 1
  redis.call('HSET', mine, mail, 'a')
  admitted = true
elseif not admitted then
  if not seen then
    waiting = waiting + 1
    seen = tostring(waiting)
    redis.call('HSET', mine, mail, seen)
  end
  position = tonumber(seen)
end
redis.call('PEXPIRE', mine, math.ceil(2 * width * 1000))
redis.call('HSET', h, 'start', start_raw, 'last', string.format('%.6f', last), 'day', day,
  'used', used, 'waiting', waiting, 'm' .. (today % 2), today)
redis.call('PEXPIRE', h, math.ceil(idle * 1000))
return {admitted and 1 or 0, day, allowance, used, waiting, start_raw, position}
