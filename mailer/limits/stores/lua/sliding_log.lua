--[[
mailguard sliding-log limiter: one atomic decision over every tier of a policy.
Mirrors mailer/limits/sliding_log.py step for step; the shared test suite checks both agree.
Run by mailer/limits/stores/redis.py for a policy of recipient sliding tiers only.

The policy is compiled in: mailer/limits/stores/redis.py replaces the markers below (LIMITS,
WINDOWS and the numbers and unrolled code derived from them) with the tiers (sorted by window,
windows in ms), so each policy is its own script (its own SHA) and no call carries the policy.

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
ARGV[6]   optional, acquire only: late, in ms (-1 or absent: never late). A mail id whose entry
          is reached is judged against the slot it holds, booked or admitted: on time (now -
          slot <= late), an admission keeps its slot and a booking fitting among the entries
          actually sent (tags without the BOOKED flag) is admitted at its slot (the flag
          cleared); else (late: a copy of a run that died after its admission too) it is
          judged again now in its recipient's booked order: placed among the sent entries
          behind the places of the bookings reached before it (not written), admitted now,
          booked at the earliest time that fits there (the bookings after it moved back, in
          order, each only as far as the policy requires), or refused (its entry given back).
          Mirrors _held and _judged in mailer/limits/sliding_log.py.
ARGV[7]   optional, acquire only: the mail's order stamp ("" none): its recipient's booked order
          (lua/sliding_order.lua, compiled in at ORDERING). A stamped call skips the quick path.

The usual call may send ARGV as {tag, max_wait} alone: acquire on the server's TIME, as
{"a", "", tag, max_wait} (two arguments fewer to send and unpack); or nothing: tag and max_wait 0.

Value: a string, big-endian. base (6 bytes, epoch ms) then, per entry oldest first, offset from
base (4 bytes, ms) and tag (6 bytes: bit 47 is the BOOKED flag of a booking under a mail id
whose mail has not been admitted yet; the other 47 bits name the mail). Entries older than now - max(window) are dropped; as no
window holds more than its limit, that leaves at most the longest window's limit of past entries
plus future bookings: 106 bytes for a full log of the reference policy 1/60s, 5/1h, 10/24h.
Rewritten whole on every change with a PX TTL that ends when the newest entry leaves the longest
window.

Reply, acquire and peek (for "m": one such reply per key, in order): one string, big-endian,
struct format REPLY: allowed (1 byte), booked (1), at_ms (8), wait_ms (8), tier (1), then
remaining_i (4 bytes) per tier, where tier is the 1-based index of the binding tier (0: none)
and remaining_i the room left in tier i's window ending now (at the booked time, for a
booking), bookings included. A string, not an array of integers: Redis converts an array
element by element, which cost a tenth of the usual call's time on the server.
mailer/limits/stores/redis.py's sliding_decision reads it. Release: 1 if an entry was removed,
else 0.
]]

local max_window = --[[MAX_WINDOW]] -- the longest window, ms
local REPLY = '--[[REPLY]]' -- '>BBI8I8B' then 'I4' per tier, compiled in (not built per call)

local mode, clock, tag_arg, max_wait_arg = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local nargs = #ARGV
if nargs < 3 then -- the usual call's short forms: tag, max_wait; or none (tag 0, max_wait 0)
  mode, clock, tag_arg, max_wait_arg = 'a', '', ARGV[1] or '0', ARGV[2] or '0'
end
local BOOKED = 140737488355328 -- 2^47: the flag of a booking not yet admitted
local us, ttl_slack = 0, 0 -- now in epoch µs (an integer: exact in a double until 2255)
if clock == '' then
  local time = redis.call('TIME')
  us = time[1] * 1000000 + time[2]
else
  -- A client clock is a simulation: its time and Redis's expiry clock drift apart, so keys
  -- get an hour more, lest they expire mid-test while the simulated clock stands still.
  us, ttl_slack = tonumber(clock), 3600000
end
local now = (us - us % 1000) / 1000 -- rounded down to the ms; hi: rounded up
local hi = now
if us % 1000 ~= 0 then hi = now + 1 end

-- The quick path: acquire or peek with no hold (ARGV[5] absent or 0) and a mail id not in the
-- log (or none): the usual call, a mail decided now. Read, decide, write, reply, before any
-- of the functions below are built; a mail id found in the log (a run asked again, a booking
-- reached, a late run) goes on to the full path, which reads the log again.
if (mode == 'a' or mode == 'p') and (ARGV[5] == nil or ARGV[5] == '0')
    and (ARGV[7] == nil or ARGV[7] == '') then
  local key, tag, own = KEYS[1], tonumber(tag_arg), 0
  if mode == 'a' and tag ~= 0 then own = tag % BOOKED end
  local raw = redis.call('GET', key)
  if not raw then -- nothing kept: admitted now (every limit is at least 1), or a peek's full room
    if mode == 'p' then return struct.pack(REPLY, 1, 0, now, 0, 0, --[[LIMITS]]) end
    redis.call('SET', key, struct.pack('>I6I4I6', hi, 0, own), 'PX',
      hi + max_window - now + ttl_slack)
    return struct.pack(REPLY, 1, 0, now, 0, 0, --[[ROOMS_AFTER_ONE]])
  end
  local ts, n, found, first, base, v = {}, 0, false, 0, 0, nil
  do
    local count = (#raw - 6) / 10
    local format -- the shortest logs' formats as constants: none built per call
    if count == 1 then
      format = '>I6I4I6'
    elseif count == 2 then
      format = '>I6I4I6I4I6'
    else
      format = '>I6' .. string.rep('I4I6', count)
    end
    v = {struct.unpack(format, raw)}
    local cut = now - max_window
    base = v[1]
    for j = 2, 2 * count, 2 do
      local t = base + v[j]
      if t > cut then
        if first == 0 then first = j end
        n = n + 1
        ts[n] = t
        if own ~= 0 and v[j + 1] % BOOKED == own then found = true break end
      end
    end
  end
  if not found then
    local t, tier, allowed, booked, seen = now, 0, 0, 0, now
    if n > 0 and ts[n] > hi then t = ts[n] end
    local bind_t = now
    -- unrolled per tier i (L, W): with n >= L, ts[n - L + 1] + W binds when later than bind_t
    --[[BIND]]
    if bind_t > t then t = bind_t end
    local entry = nil
    if t == now then
      allowed, tier = 1, 0
      if mode == 'a' then entry = hi end
    elseif mode == 'a' and t - now <= tonumber(max_wait_arg) then
      booked, seen, entry = 1, t, t
      if tag ~= 0 then own = own + BOOKED end
    end
    if entry then -- appended: the log stays sorted (nothing after now, or t >= the newest)
      local value
      if n == 0 then
        value = struct.pack('>I6I4I6', entry, 0, own)
      elseif first == 2 then -- nothing dropped
        value = raw .. struct.pack('>I4I6', entry - base, own)
      else -- entries left the longest window: rebased on the oldest kept
        local b0 = ts[1]
        local flat = {b0}
        for j = 1, n do flat[2 * j], flat[2 * j + 1] = ts[j] - b0, v[first + 2 * j - 1] end
        flat[2 * n + 2], flat[2 * n + 3] = entry - b0, own
        value = struct.pack('>I6' .. string.rep('I4I6', n + 1), unpack(flat, 1, 2 * n + 3))
      end
      n = n + 1
      ts[n] = entry
      redis.call('SET', key, value, 'PX', entry + max_window - now + ttl_slack)
    end
    local wait = 0
    if allowed == 0 and t > now then wait = t - now end
    -- unrolled: r<i> the room of tier i (L, W), L less the entries after seen - W, at least 0
    --[[ROOMS]]
    return struct.pack(REPLY, allowed, booked, t, wait, tier, --[[ROOM_VARS]])
  end
end

-- The policy's tables, for the general path (the quick path above has its numbers unrolled).
local limits = {--[[LIMITS]]}
local windows = {--[[WINDOWS]]}
local ntiers = #limits

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

-- The earliest ms >= t at which one more entry fits tier (limit, w) among the sorted xs
-- (nx entries). Mirrors earliest_insert in mailer/limits/insertion.py.
-- The first index k of the sorted xs (nx entries) with xs[k] > v (bisect_right), or with
-- xs[k] >= v when `left` (bisect_left); nx + 1 when none.
local function bisect(xs, nx, v, left)
  local lo, hi_ = 1, nx + 1
  while lo < hi_ do
    local mid = math.floor((lo + hi_) / 2)
    if xs[mid] < v or (not left and xs[mid] == v) then lo = mid + 1 else hi_ = mid end
  end
  return lo
end

local function insert_at(xs, nx, limit, w, t)
  local x, j = t, bisect(xs, nx, t - w + 1, true)
  while j <= nx - limit + 1 do
    local last = xs[j + limit - 1]
    if last - w + 1 > x then break end
    if last - xs[j] < w and x <= xs[j] + w - 1 then x = xs[j] + w end
    j = j + 1
  end
  return x
end

-- The earliest ms >= x that every tier accepts among xs (_fit_from in sliding_log.py).
local function fit_from(xs, nx, x)
  while true do
    local y = x
    for i = 1, ntiers do y = insert_at(xs, nx, limits[i], windows[i], y) end
    if y == x then return x end
    x = y
  end
end

-- _fit: now only when it fits seen from now and from hi.
local function fit(xs, nx, lb)
  local x = fit_from(xs, nx, lb)
  if x == now and hi ~= now then
    local after = fit_from(xs, nx, hi)
    if after ~= hi then return after end
  end
  return x
end

-- Insert v into the sorted xs (nx entries) after the entries equal to it (and w into ws at
-- the same place, when given); the new count.
local function insort(xs, nx, v, ws, w)
  local p = bisect(xs, nx, v, false)
  table.insert(xs, p, v)
  if ws then table.insert(ws, p, w) end
  return nx + 1
end

-- Entry j's mail judged again now, in its recipient's booked order (_judged in
-- mailer/limits/sliding_log.py, line for line). Changes ts/tags in place; returns allowed,
-- booked, at, tier, seen and the new count.
local function judged(ts, tags, n, j, max_wait)
  local own = tags[j] % BOOKED
  table.remove(ts, j)
  table.remove(tags, j)
  n = n - 1
  local placed, np = {}, 0
  for k = 1, n do
    if tags[k] < BOOKED then np = np + 1 placed[np] = ts[k] end
  end
  local lb = now
  for k = 1, j - 1 do -- the bookings reached before it: their places, in order
    if tags[k] >= BOOKED then
      lb = fit(placed, np, lb)
      if lb == now then lb = hi end
      np = insort(placed, np, lb)
    end
  end
  local t = fit(placed, np, lb)
  if t == now then
    n = insort(ts, n, hi, tags, own)
    return 1, 0, now, 0, now, n
  end
  local tier, best = 0, lb
  for i = 1, ntiers do
    local x = insert_at(placed, np, limits[i], windows[i], lb)
    if x > best then best, tier = x, i end
  end
  if t - now > max_wait then return 0, 0, t, tier, now, n end
  local mts, mtags, nm = {}, {}, 0
  for k = n, j, -1 do
    if tags[k] >= BOOKED then
      nm = nm + 1
      mts[nm], mtags[nm] = ts[k], tags[k]
      table.remove(ts, k)
      table.remove(tags, k)
      n = n - 1
    end
  end
  np = insort(placed, np, t)
  n = insort(ts, n, t, tags, own + BOOKED)
  local last, m = t, nm
  while m >= 1 do -- collected last first: in order, each no further than required
    local slot = mts[m]
    if slot >= last + max_window then -- no window holds it and a change: the rest stay
      for r = m, 1, -1 do n = insort(ts, n, mts[r], tags, mtags[r]) end
      break
    end
    if slot < last then slot = last end
    last = fit(placed, np, slot)
    np = insort(placed, np, last)
    n = insort(ts, n, last, tags, mtags[m])
    m = m - 1
  end
  return 0, 1, t, tier, t, n
end

--[[ORDERING]]
-- One decision for one key; `tag` 0 means no mail id; `order` "" means no stamp.
local function decide(key, mode, tag, max_wait, not_before, late, order)

-- Decode in one unpack, keeping only the entries a window ending at or after now can see.
local ts, tags, n = {}, {}, 0
local life = late >= 0 and (order or '') ~= '' and math.max(max_window, ORDER_GRACE) or max_window
local raw = redis.call('GET', key)
if raw then
  local count = (#raw - 6) / 10
  local v = {struct.unpack('>I6' .. string.rep('I4I6', count), raw)}
  local base, cut = v[1], now - max_window
  local kept = now - life -- a stamped late call keeps the bookings reached within ORDER_GRACE
  for j = 2, 2 * count, 2 do
    local t = base + v[j]
    if t > cut or (t > kept and v[j + 1] >= BOOKED) then
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
      else
        local on_time = late < 0 or now - at <= late
        if on_time and tags[j] < BOOKED then
          allowed = 1 -- admitted already (the same mail asking again)
        else
          local fits = on_time
          if fits then -- a booking reached on time: judged against the entries actually sent
            local sent, ns = {}, 0
            for k = 1, n do
              if k ~= j and tags[k] < BOOKED then ns = ns + 1 sent[ns] = ts[k] end
            end
            for i = 1, ntiers do
              if fits and window_max(sent, ns, at, windows[i]) >= limits[i] then fits = false end
            end
          end
          if fits and late >= 0 and waits_behind(ts, tags, j, order, key .. ':o') then
            fits = false -- behind an earlier mail whose run has not come: judged behind it
          end
          dirty = true
          if fits then
            tags[j], allowed = tags[j] - BOOKED, 1
          else
            allowed, booked, at, tier, seen, n = judged(ts, tags, n, j, max_wait)
          end
        end
      end
      break
    end
  end
end

local floor = floor_behind(ts, tags, n, order, key .. ':o', not_before, -- or the hold's end
  not found and mode == 'a' and tag ~= 0 and late >= 0)
if not found then
  local t
  t, tier = earliest(ts, n)
  if floor > t then t, tier = floor, 0 end
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
local moved, t = reorder(ts, tags, n, tag, booked == 1 and order, not_before, key, life, ttl_slack)
if moved then at, seen, tier, dirty = moved, moved, t, true end -- a slot booked after it
if dirty then
  if n == 0 then
    redis.call('DEL', key)
  else
    redis.call('SET', key, pack(ts, tags, n), 'PX', ts[n] + life - now + ttl_slack)
  end
end

local wait = 0
if at > now and allowed == 0 then wait = at - now end
local rooms = {}
for i = 1, ntiers do
  local low, count = seen - windows[i], 0
  for j = n, 1, -1 do
    if ts[j] > low then count = count + 1 else break end
  end
  local room = limits[i] - count
  if room < 0 then room = 0 end
  rooms[i] = room
end
return struct.pack(REPLY, allowed, booked, at, wait, tier, unpack(rooms, 1, ntiers))
end

if mode == 'm' then
  local max_wait, replies = tonumber(ARGV[3]), {}
  for i = 1, #KEYS do replies[i] = decide(KEYS[i], 'a', tonumber(ARGV[3 + i]), max_wait, 0, -1) end
  return replies
end
return decide(KEYS[1], mode, tonumber(tag_arg), tonumber(max_wait_arg), tonumber(ARGV[5] or '0'),
  tonumber(ARGV[6] or '-1'), ARGV[7] or '')
