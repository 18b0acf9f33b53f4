--[[
mailguard sliding-log limiter, a recipient's booked order: the functions compiled into
sliding_log.lua at its ORDERING marker (mailer/limits/stores/redis.py), mirroring
mailer/limits/ordering.py and sliding_log.behind line for line.

A call with an order stamp (ARGV[7]: 18 digits, priority rank then epoch microseconds; strings
compare as the stamps sort) records it in the hash KEYS[1] .. ':o' (tag in decimal -> stamp,
for the log's bookings only; the log's TTL) when it books, and takes the slot of the earliest
future booking stamped after it (at or after not_before), each of those one place back
(keep_order): which mail holds which slot changes, never the slots. With late (ARGV[6] >= 0) the
bookings reached less than ORDER_GRACE ms ago are kept past the longest window, and a booking
reached on time, or a mail not in the log, that a booking before it stamped before it and
reached within ORDER_GRACE still waits for goes behind that booking's place (waits_behind:
judged again; floor_behind: booked no earlier than behind).
]]

-- Record `order` for entry i's booking in the hash `okey` (the stamps of the log's bookings, the
-- others removed) and give entry i the slot of the earliest future booking stamped after it
-- (at or after not_before), each of those one place back; entry i's index then
-- (keep_order in mailer/limits/ordering.py, line for line).
local function keep_order(ts, tags, n, i, order, not_before, okey, ttl)
  local named = tags[i] % BOOKED
  local flat = redis.call('HGETALL', okey)
  local orders, future, stale = {}, {}, {}
  for k = 1, n do
    if tags[k] >= BOOKED then future[tags[k] - BOOKED] = true end
  end
  for f = 1, #flat, 2 do
    local g = tonumber(flat[f])
    if g and future[g] and g ~= named then
      orders[g] = flat[f + 1]
    else
      stale[#stale + 1] = flat[f]
    end
  end
  if #stale > 0 then redis.call('HDEL', okey, unpack(stale)) end
  redis.call('HSET', okey, string.format('%d', named), order)
  redis.call('PEXPIRE', okey, ttl)
  local at, ahead = ts[i], {}
  for j = 1, i - 1 do
    local t = ts[j]
    if t > hi and t < at and t >= not_before and tags[j] >= BOOKED then
      local o = orders[tags[j] - BOOKED]
      if o and o > order then ahead[#ahead + 1] = j end
    end
  end
  if #ahead == 0 then return i end
  local moved = {tags[i]}
  for a = 1, #ahead do moved[a + 1] = tags[ahead[a]] end
  ahead[#ahead + 1] = i
  for a = 1, #ahead do tags[ahead[a]] = moved[a] end
  return ahead[1]
end

-- Whether entry j's booking (reached, on time) waits behind a booking before it stamped before
-- `order` (the hash `okey`) and reached less than ORDER_GRACE ms ago, its run not come yet
-- (waits_behind in mailer/limits/ordering.py).
local ORDER_GRACE = --[[ORDER_GRACE]] -- ms: ORDER_GRACE_MS, compiled in
local function waits_behind(ts, tags, j, order, okey)
  if (order or '') == '' then return false end
  local orders = nil
  for k = 1, j - 1 do
    if tags[k] >= BOOKED and ts[k] >= now - ORDER_GRACE then
      if not orders then
        orders = {}
        local flat = redis.call('HGETALL', okey)
        for f = 1, #flat, 2 do
          local g = tonumber(flat[f])
          if g then orders[g] = flat[f + 1] end
        end
      end
      local o = orders[tags[k] - BOOKED]
      if o and o < order then return true end
    end
  end
  return false
end

-- The earliest ms a mail fits after the places of the bookings reached and not yet run, in
-- order, among the entries sent (behind in mailer/limits/sliding_log.py).
local function behind(ts, tags, n)
  local placed, np = {}, 0
  for k = 1, n do
    if tags[k] < BOOKED then np = np + 1 placed[np] = ts[k] end
  end
  local lb = now
  for k = 1, n do
    if tags[k] >= BOOKED and ts[k] <= hi then
      lb = fit(placed, np, lb)
      if lb == now then lb = hi end
      np = insort(placed, np, lb)
    end
  end
  return fit(placed, np, lb)
end

-- The slot not before `not_before` for a mail not in the log (`fresh`; else not_before): behind
-- the places of the bookings reached before it when one stamped before `order` still waits for
-- its run.
local function floor_behind(ts, tags, n, order, okey, not_before, fresh)
  if not fresh or n == 0 or not waits_behind(ts, tags, n + 1, order, okey) then
    return not_before
  end
  local lb = behind(ts, tags, n)
  if not_before > lb then return not_before end
  return lb
end

-- keep_order for the booking tagged `tag` (`order` false or "": none): its new slot and binding
-- tier (that of the entries before the slot) when it moved, else nil. The hash beside the log
-- `key` lives as long as it: `life` ms after its newest entry, `slack` added.
local function reorder(ts, tags, n, tag, order, not_before, key, life, slack)
  if not order or order == '' or tag == 0 or n == 0 then return nil end
  local i = 0
  for j = 1, n do
    if tags[j] % BOOKED == tag % BOOKED then i = j break end
  end
  if i == 0 then return nil end
  local k = keep_order(ts, tags, n, i, order, not_before, key .. ':o', ts[n] + life - now + slack)
  if k == i then return nil end
  local _, tier = earliest(ts, k - 1)
  return ts[k], tier
end
