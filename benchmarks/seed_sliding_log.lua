-- The seed's design: the project's first multi-tier sliding-window script (commit dd7dbea,
-- mailer/backends/lua/sliding_log.lua), verbatim below. Benchmark only (benchmarks/decision.py
-- runs it as the floor "the seed's design"); never loaded by mailguard.
--[[
mailguard sliding-log limiter: one atomic decision over every tier of a policy.
Mirrors mailer/sliding_log.py step for step; the shared test suite checks both agree.

The policy is compiled in: mailer/backends/redis.py replaces the two --[[LIMITS]] and
--[[WINDOWS]] markers below with the tiers (sorted by window, windows in ms), so each policy is
its own script (its own SHA) and no call carries the policy.

KEYS[1]   the subject's log, "<namespace>:{<keyed hash>}". The {hash tag} keeps all of one
          subject's data in one Redis Cluster slot.
ARGV[1]   mode: "a" acquire, "p" peek (records nothing), "r" release the entry tagged ARGV[3]
ARGV[2]   now in epoch milliseconds, or "" to read the server's TIME (production: one clock
          for every worker, whatever the clients' clocks say)
ARGV[3]   tag: a 48-bit integer derived from the mail id; 0 when the caller gave none
ARGV[4]   max_wait in milliseconds; > 0 books the earliest admissible slot when it is at most
          this far away (reservations), 0 refuses instead

Value: a string, big-endian. base (6 bytes, epoch ms) then, per entry oldest first, offset from
base (4 bytes, ms) and tag (6 bytes). Entries older than now - max(window) are dropped; as no
window holds more than its limit, that leaves at most the longest window's limit of past entries
plus future bookings: 106 bytes for a full log of the reference policy 1/60s, 5/1h, 10/24h.
Rewritten whole on every change with a PX TTL that ends when the newest entry leaves the longest
window.

Reply, acquire and peek: {allowed, booked, at_ms, wait_ms, tier, remaining_1, ...} where tier is
the 1-based index of the binding tier (0: none) and remaining_i the room left in tier i's window
ending now (at the booked time, for a booking), bookings included. Release: 1 if an entry was
removed, else 0.
]]

local limits = {--[[LIMITS]]}
local windows = {--[[WINDOWS]]}
local ntiers = #limits
local max_window = windows[ntiers]

local key = KEYS[1]
local mode = ARGV[1]
local now
if ARGV[2] == '' then
  local time = redis.call('TIME')
  now = time[1] * 1000 + math.floor(time[2] / 1000)
else
  now = tonumber(ARGV[2])
end
local tag = tonumber(ARGV[3])

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
    local base = ts[1]
    local parts = {struct.pack('>I6', base)}
    for j = 1, n do parts[j + 1] = struct.pack('>I4I6', ts[j] - base, tags[j]) end
    redis.call('SET', key, table.concat(parts), 'PX', ts[n] + max_window - now)
  end
  return 1
end

local found = false
if mode == 'a' and tag ~= 0 then
  for j = 1, n do
    if tags[j] == tag then
      at, found = ts[j], true
      if at <= now then allowed = 1 else booked, seen = 1, at end
      break
    end
  end
end

if not found then
  -- t* = max(now, newest entry, max over full tiers of ts[n-L] + W)
  local t = now
  if n > 0 and ts[n] > t then t = ts[n] end
  local bind_t = now
  for i = 1, ntiers do
    if n >= limits[i] then
      local candidate = ts[n - limits[i] + 1] + windows[i]
      if candidate > bind_t then bind_t, tier = candidate, i end
    end
  end
  if bind_t > t then t = bind_t end
  at = t
  if t == now then
    allowed, tier, record = 1, 0, mode == 'a'
  elseif mode == 'a' and t - now <= tonumber(ARGV[4]) then
    booked, seen, record = 1, t, true
  end
end

if record then
  n = n + 1
  ts[n], tags[n] = at, tag
  local base = ts[1]
  local parts = {struct.pack('>I6', base)}
  for j = 1, n do parts[j + 1] = struct.pack('>I4I6', ts[j] - base, tags[j]) end
  redis.call('SET', key, table.concat(parts), 'PX', ts[n] + max_window - now)
end

local wait = 0
if at > now then wait = at - now end
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
