--[[
mailguard sliding-log limiter: one atomic decision over every tier of a policy.
Mirrors mailer/limits/sliding_log.py step for step; the shared test suite checks both agree.
Run by mailer/limits/stores/redis.py for a policy of recipient sliding tiers only.

The policy is compiled in: mailer/limits/stores/redis.py replaces the two --[[LIMITS]] and
--[[WINDOWS]] markers below with the tiers (sorted by window, windows in ms), so each policy is
its own script (its own SHA) and no call carries the policy.

KEYS[1]   the subject's log, "<namespace>:{<keyed hash>}". The {hash tag} keeps all of one
          subject's data in one Redis Cluster slot.
ARGV[1]   mode: "a" acquire, "p" peek (records nothing), "r" release the entry tagged ARGV[3],
          "m" acquire for every key: KEYS[1..n], ARGV[3] max_wait, ARGV[4..3+n] their tags
ARGV[2]   now in epoch microseconds, or "" to read the server's TIME (production: one clock
          for every worker, whatever the clients' clocks say). A given time (tests and
          simulations) adds an hour to every TTL, as simulated and real time drift apart.
          Never early: tiers are checked against now rounded down to the ms, and an admission
          now is stored at now rounded up.
ARGV[3]   tag: a 48-bit integer derived from the mail id; 0 when the caller gave none
ARGV[4]   max_wait in milliseconds; > 0 books the earliest admissible slot when it is at most
          this far away (reservations), 0 refuses instead
ARGV[5]   optional, acquire only: not_before in epoch ms (a hold's end): the slot is the earliest
          admissible time at or after it (every time after t* admits, so max(t*, not_before))

Value: a string, big-endian. base (6 bytes, epoch ms) then, per entry oldest first, offset from
base (4 bytes, ms) and tag (6 bytes). Entries older than now - max(window) are dropped; as no
window holds more than its limit, that leaves at most the longest window's limit of past entries
plus future bookings: 106 bytes for a full log of the reference policy 1/60s, 5/1h, 10/24h.
Rewritten whole on every change with a PX TTL that ends when the newest entry leaves the longest
window.

Reply, acquire and peek (for "m": one such reply per key, in order): {allowed, booked, at_ms, wait_ms, tier, remaining_1, ...} where tier is
the 1-based index of the binding tier (0: none) and remaining_i the room left in tier i's window
ending now (at the booked time, for a booking), bookings included. Release: 1 if an entry was
removed, else 0.
]]

local limits = {--[[LIMITS]]}
local windows = {--[[WINDOWS]]}
local ntiers = #limits
local max_window = windows[ntiers]

local mode = ARGV[1]
local now, hi, ttl_slack = 0, 0, 0
if ARGV[2] == '' then
  local time = redis.call('TIME')
  now = time[1] * 1000 + math.floor(time[2] / 1000)
  hi = now
  if time[2] % 1000 ~= 0 then hi = now + 1 end
else
  -- A client clock is a simulation: its time and Redis's expiry clock drift apart, so keys
  -- get an hour more, lest they expire mid-test while the simulated clock stands still.
  local us = tonumber(ARGV[2])
  now, ttl_slack = math.floor(us / 1000), 3600000
  hi = now
  if us % 1000 ~= 0 then hi = now + 1 end
end

-- The packed log: base, then (offset, tag) per entry, in one struct.pack call.
local function pack(ts, tags, n)
  local base = ts[1]
  local flat = {base}
  for j = 1, n do flat[2 * j], flat[2 * j + 1] = ts[j] - base, tags[j] end
  return struct.pack('>I6' .. string.rep('I4I6', n), unpack(flat, 1, 2 * n + 1))
end

-- One decision for one key; `tag` 0 means no mail id.
local function decide(key, mode, tag, max_wait, not_before)

-- Decode in one unpack, keeping only the entries a window ending at or after now can see.
local ts, tags, n = {}, {}, 0
local raw = redis.call('GET', key)
if raw then
  local count = (#raw - 6) / 10
  local v = {struct.unpack('>I6' .. string.rep('I4I6', count), raw)}
  local base, cut = v[1], now - max_window
  for j = 2, 2 * count, 2 do
    local t = base + v[j]
    if t > cut then
      n = n + 1
      ts[n], tags[n] = t, v[j + 1]
    end
  end
end

-- at: the decision's time; room is measured in the window ending at `seen`.
local allowed, booked, at, tier, seen, record = 0, 0, now, 0, now, false

if mode == 'r' then
  local found = 0
  for j = 1, n do
    if tags[j] == tag then found = j break end
  end
  if found == 0 then return 0 end
  table.remove(ts, found)
  table.remove(tags, found)
  n = n - 1
  if n == 0 then
    redis.call('DEL', key)
  else
    redis.call('SET', key, pack(ts, tags, n), 'PX', ts[n] + max_window - now + ttl_slack)
  end
  return 1
end

local found = false
if mode == 'a' and tag ~= 0 then
  for j = 1, n do
    if tags[j] == tag then
      at, found = ts[j], true
      if at <= hi then allowed = 1 else booked, seen = 1, at end
      break
    end
  end
end

if not found then
  -- t* = max(now, newest entry, max over full tiers of ts[n-L] + W)
  local t = now
  if n > 0 and ts[n] > hi then t = ts[n] end
  local bind_t = now
  for i = 1, ntiers do
    if n >= limits[i] then
      local candidate = ts[n - limits[i] + 1] + windows[i]
      if candidate > bind_t then bind_t, tier = candidate, i end
    end
  end
  if bind_t > t then t = bind_t end
  if not_before > t then t, tier = not_before, 0 end
  at = t
  if t == now then
    allowed, tier, record = 1, 0, mode == 'a'
  elseif mode == 'a' and t - now <= max_wait then
    booked, seen, record = 1, t, true
  end
end

if record then
  n = n + 1
  ts[n], tags[n] = at, tag
  if allowed == 1 then ts[n] = hi end
  redis.call('SET', key, pack(ts, tags, n), 'PX', ts[n] + max_window - now + ttl_slack)
end

local wait = 0
if at > now and allowed == 0 then wait = at - now end
local reply = {allowed, booked, at, wait, tier}
for i = 1, ntiers do
  local low, count = seen - windows[i], 0
  for j = n, 1, -1 do
    if ts[j] > low then count = count + 1 else break end
  end
  local room = limits[i] - count
  if room < 0 then room = 0 end
  reply[5 + i] = room
end
return reply
end

if mode == 'm' then
  local max_wait, replies = tonumber(ARGV[3]), {}
  for i = 1, #KEYS do replies[i] = decide(KEYS[i], 'a', tonumber(ARGV[3 + i]), max_wait, 0) end
  return replies
end
return decide(KEYS[1], mode, tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5] or '0'))
