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
ARGV[6]   optional, acquire only: late, in ms (-1 or absent: never late). A mail id whose booking
          is reached is judged against the entries actually sent (tags without the BOOKED flag):
          on time (now - slot <= late) and fitting among them, it is admitted at its slot (the
          flag cleared); else it is judged again now against the sent entries alone (every
          booking ignored: an overdue one is judged when its own run comes, a future one when
          it is reached): admitted now, booked at the earliest time they allow, or refused.
          Mirrors _held in mailer/limits/sliding_log.py.

Value: a string, big-endian. base (6 bytes, epoch ms) then, per entry oldest first, offset from
base (4 bytes, ms) and tag (6 bytes: bit 47 is the BOOKED flag of a booking under a mail id
whose mail has not been admitted yet; the other 47 bits name the mail). Entries older than now - max(window) are dropped; as no
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
local BOOKED = 140737488355328 -- 2^47: the flag of a booking not yet admitted
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

-- The most of the sorted `sent` (ns entries) in one window of w ms that holds `at`.
local function window_max(sent, ns, at, w)
  local near, m = {}, 0
  for k = 1, ns do
    if sent[k] > at - w and sent[k] < at + w then m = m + 1 near[m] = sent[k] end
  end
  local best = 0
  for k = 1, m do if near[k] >= at then best = best + 1 end end
  for a = 1, m do
    if near[a] > at then break end
    local c = 0
    for b = a, m do
      if near[b] <= near[a] + w - 1 then c = c + 1 else break end
    end
    if c > best then best = c end
  end
  return best
end

-- The earliest admissible time over the sorted log `xs` (nx entries) and its binding tier.
local function earliest(xs, nx)
  local t = now
  if nx > 0 and xs[nx] > hi then t = xs[nx] end
  local bind_t, tier = now, 0
  for i = 1, ntiers do
    if nx >= limits[i] then
      local candidate = xs[nx - limits[i] + 1] + windows[i]
      if candidate > bind_t then bind_t, tier = candidate, i end
    end
  end
  if bind_t > t then t = bind_t end
  return t, tier
end

-- One decision for one key; `tag` 0 means no mail id.
local function decide(key, mode, tag, max_wait, not_before, late)

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
    if tags[j] % BOOKED == tag % BOOKED then found = j break end
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

local found, dirty = false, false
if mode == 'a' and tag ~= 0 then
  for j = 1, n do
    if tags[j] % BOOKED == tag % BOOKED then
      at, found = ts[j], true
      if at > hi then
        booked, seen = 1, at
      elseif tags[j] < BOOKED then
        allowed = 1
      else
        -- a booking reached: judged against the entries actually sent
        local sent, ns = {}, 0
        for k = 1, n do
          if k ~= j and tags[k] < BOOKED then ns = ns + 1 sent[ns] = ts[k] end
        end
        local fits = late < 0 or now - at <= late
        for i = 1, ntiers do
          if fits and window_max(sent, ns, at, windows[i]) >= limits[i] then fits = false end
        end
        dirty = true
        if fits then
          tags[j], allowed = tags[j] - BOOKED, 1
        else
          local own = tags[j] - BOOKED
          table.remove(ts, j)
          table.remove(tags, j)
          n = n - 1
          local t
          t, tier = earliest(sent, ns)
          local stored, flag = nil, 0
          if t == now then
            allowed, tier, stored = 1, 0, hi
          else
            -- booked again: after the bookings still ahead too (not overdue)
            local cut, ahead, na = now - late, {}, 0
            if late < 0 then cut = -1 end
            for k = 1, n do
              if tags[k] < BOOKED or ts[k] >= cut then na = na + 1 ahead[na] = ts[k] end
            end
            t, tier = earliest(ahead, na)
            if t - now <= max_wait then booked, seen, stored, flag = 1, t, t, BOOKED end
          end
          at = t
          if stored then
            local p = n + 1
            for k = 1, n do
              if ts[k] > stored then p = k break end
            end
            table.insert(ts, p, stored)
            table.insert(tags, p, own + flag)
            n = n + 1
          end
        end
      end
      break
    end
  end
end

if not found then
  local t
  t, tier = earliest(ts, n)
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
  ts[n], tags[n] = at, tag % BOOKED
  if allowed == 1 then ts[n] = hi elseif tag ~= 0 then tags[n] = tag % BOOKED + BOOKED end
  dirty = true
end
if dirty then
  if n == 0 then
    redis.call('DEL', key)
  else
    redis.call('SET', key, pack(ts, tags, n), 'PX', ts[n] + max_window - now + ttl_slack)
  end
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
  for i = 1, #KEYS do replies[i] = decide(KEYS[i], 'a', tonumber(ARGV[3 + i]), max_wait, 0, -1) end
  return replies
end
return decide(KEYS[1], mode, tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5] or '0'),
  tonumber(ARGV[6] or '-1'))
