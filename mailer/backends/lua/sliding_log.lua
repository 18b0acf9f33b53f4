--[[
mailguard sliding-log limiter: one atomic decision over every tier of a policy.
Mirrors mailer/sliding_log.py line for line; the shared test suite checks both agree.

KEYS[1]   the subject's log, "<namespace>:{<keyed hash>}". The {hash tag} keeps all of one
          subject's data in one Redis Cluster slot.
ARGV[1]   mode: "a" acquire, "p" peek (records nothing), "r" release the entry tagged ARGV[3]
ARGV[2]   now in epoch milliseconds, or "" to read the server's TIME (production: one clock
          for every worker, whatever the clients' clocks say)
ARGV[3]   tag: a 48-bit integer derived from the mail id; 0 when the caller gave none
ARGV[4]   max_wait in milliseconds; > 0 books the earliest admissible slot when it is at most
          this far away (reservations), 0 refuses instead
ARGV[5..] the tiers sorted by window: limit_1, window_ms_1, limit_2, window_ms_2, ...

Value: a string, big-endian. base (6 bytes, epoch ms) then, per entry oldest first, offset from
base (4 bytes, ms) and tag (6 bytes). Entries older than now - max(window) are dropped; as no window
holds more than its limit, that leaves at most the longest window's limit of past entries plus
future bookings: 106 bytes for a full log of the reference policy 1/60s, 5/1h, 10/24h. Rewritten whole on
every change with a PX TTL that ends when the newest entry leaves the longest window.

Reply, acquire and peek: {allowed, booked, at_ms, wait_ms, tier, remaining_1, ...} where tier is
the 1-based index of the binding tier (0: none) and remaining_i the room left in tier i's window
ending now (at the booked time, for a booking), bookings included. Release: 1 if an entry was removed, else 0.
]]

local key = KEYS[1]
local mode = ARGV[1]
local now
if ARGV[2] == '' then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
else
  now = tonumber(ARGV[2])
end
local tag = tonumber(ARGV[3])
local max_wait = tonumber(ARGV[4])

local limits, windows, ntiers = {}, {}, 0
local max_window = 0
for i = 5, #ARGV, 2 do
  ntiers = ntiers + 1
  local limit, window = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  limits[ntiers], windows[ntiers] = limit, window
  if window > max_window then max_window = window end
end

-- Decode, keeping only the entries a window ending at or after now can still see (prune).
local ts, tags, n = {}, {}, 0
local raw = redis.call('GET', key)
if raw then
  local cut = now - max_window
  local base, pos = struct.unpack('>I6', raw)
  local len = #raw
  while pos <= len do
    local offset, entry_tag
    offset, entry_tag, pos = struct.unpack('>I4I6', raw, pos)
    if base + offset > cut then
      n = n + 1
      ts[n], tags[n] = base + offset, entry_tag
    end
  end
end

local function remaining(at)
  local out = {}
  for i = 1, ntiers do
    local low, count = at - windows[i], 0
    for j = n, 1, -1 do
      if ts[j] > low then count = count + 1 else break end
    end
    local room = limits[i] - count
    if room < 0 then room = 0 end
    out[i] = room
  end
  return out
end

local function reply(allowed, booked, at, tier, room)
  local wait = 0
  if at > now then wait = at - now end
  local out = {allowed, booked, at, wait, tier}
  for i = 1, ntiers do out[5 + i] = room[i] end
  return out
end

local function store()
  if n == 0 then
    redis.call('DEL', key)
    return
  end
  local base = ts[1]
  local parts = {struct.pack('>I6', base)}
  for j = 1, n do parts[j + 1] = struct.pack('>I4I6', ts[j] - base, tags[j]) end
  redis.call('SET', key, table.concat(parts), 'PX', ts[n] + max_window - now)
end

local function append(at)
  n = n + 1
  ts[n], tags[n] = at, tag
  store()
end

if mode == 'r' then
  for j = 1, n do
    if tags[j] == tag then
      table.remove(ts, j)
      table.remove(tags, j)
      n = n - 1
      store()
      return 1
    end
  end
  return 0
end

if mode == 'a' and tag ~= 0 then
  for j = 1, n do
    if tags[j] == tag then
      local at = ts[j]
      if at <= now then return reply(1, 0, at, 0, remaining(now)) end
      return reply(0, 1, at, 0, remaining(at))
    end
  end
end

-- t* = max(now, newest entry, max over full tiers of ts[n-L] + W)
local t = now
if n > 0 and ts[n] > t then t = ts[n] end
local tier, bind_t = 0, now
for i = 1, ntiers do
  if n >= limits[i] then
    local candidate = ts[n - limits[i] + 1] + windows[i]
    if candidate > bind_t then bind_t, tier = candidate, i end
  end
end
if bind_t > t then t = bind_t end

if t == now then
  if mode == 'a' then append(now) end
  return reply(1, 0, now, 0, remaining(now))
end
if mode == 'a' and t - now <= max_wait then
  append(t)
  return reply(0, 1, t, tier, remaining(t))
end
return reply(0, 0, t, tier, remaining(now))
