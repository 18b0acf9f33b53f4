-- Each tier's questions (the earliest ms it admits one more, the room it has left), and the
-- recipient's log and gcra tiers loaded and saved.

-- earliest ms >= t at which one more emission keeps g's view with limit l, from base (the
-- floor, or a share's floor); t == now is an admission at now_us (gcra_log.py earliest)
local function gcra_first(g, base, l, t)
  if g.ng == 0 then  -- nothing booked: the one timestamp of redis-cell's GCRA
    local c = (l - 1) * view_of(g, l)
    if t == now then
      if base - now_us <= c then return now end
      t = now + 1
    end
    local fits = ceil_div(base - c, 1000)
    if fits > t then return fits end
    return t
  end
  return L.gcra_first_paged(g, base, l, t)
end

-- the emissions the spans of g's view l (from base) holding at_us already use, in intervals
local function gcra_used(g, base, l, at_us)
  if g.ng == 0 then
    if base > at_us then return ceil_div(base - at_us, (view_of(g, l))) end
    return 0
  end
  return L.gcra_used_paged(g, base, l, at_us)
end

-- earliest ms >= t at which tier ti of st admits one more (appending; inserting in the shared
-- scopes' sliding logs, where a mail admitted now must fit at now and at now rounded up)
local function earliest(st, ti, t)
  local tier = st.spec[4][ti]
  local limit = limit_of(st, tier)
  if tier[1] == 1 and st.spec[2] == 1 then  -- asked again for the same t: the same answer
    st.memo = st.memo or {}
    local key = ti .. ':' .. fmt(t)
    local fit = st.memo[key]
    if fit == nil then
      local hi = -floor(-now_us / 1000)
      if t ~= now or hi == now then
        fit = L.hinted(st, ti, limit, tier[3], t)
      else
        fit = L.hinted(st, ti, limit, tier[3], hi)
        if fit == hi and L.fits_now(st, limit, tier[3], hi) then fit = now end
      end
      st.memo[key] = fit
    end
    return fit
  elseif tier[1] == 1 then
    if st.n >= limit then
      local c = st.ts[st.n - limit + 1] + tier[3]
      if c > t then return c end
    end
    return t
  elseif tier[1] == 3 then
    local g = st.gl[ti]
    if g == nil then return t end
    if limit == tier[2] then return gcra_first(g, g.floor, limit, t) end
    local part = ceil_div(tier[3] * 1000, limit)  -- a share: a smaller bucket, refilled slower
    local base = share_floor(g, tier[4], part)
    -- the earliest ms both views admit, the share's asked first: its bookings are the ones
    -- that fill it, so its search skips them by summaries where the tier's own would walk the
    -- room it still has at the front (the same answer in either order: each search returns
    -- the earliest ms its view admits from t, never past one both admit)
    while true do
      local y = gcra_first(g, base, limit, t)
      local x = gcra_first(g, g.floor, tier[2], y)
      if x == y then return x end
      t = x
    end
  end
  while true do
    local start, stop = window_of(tier, t)
    if count_of(st, ti, start) < limit then return t end
    t = stop
  end
end

local function room(st, ti, at, at_us)
  local tier = st.spec[4][ti]
  local limit = limit_of(st, tier)
  local used = 0
  if tier[1] == 1 and st.spec[2] == 1 then
    used = L.window_max(st, at, tier[3])
  elseif tier[1] == 1 then
    local low, ts = at - tier[3], st.ts
    for j = st.n, 1, -1 do
      if ts[j] > low then used = used + 1 else break end
    end
  elseif tier[1] == 3 then
    local g = st.gl[ti]
    if g == nil then return limit end
    local full = tier[2] - gcra_used(g, g.floor, tier[2], at_us)
    if limit < tier[2] then
      local part_us = ceil_div(tier[3] * 1000, limit)
      local part = limit - gcra_used(g, share_floor(g, tier[4], part_us), limit, at_us)
      if part < full then full = part end
    end
    if full > 0 then return full end
    return 0
  else
    used = count_of(st, ti, (window_of(tier, at)))
  end
  if limit - used > 0 then return limit - used end
  return 0
end

local function save_log(st)
  if st.n == 0 then redis.call('DEL', st.key .. ':l') return end
  local base, n = st.ts[1], st.n
  local packed
  if n == 1 then
    packed = struct.pack('>I6I4I6', base, 0, st.tags[1])
  else
    local flat = {}
    for j = 1, n do flat[2 * j - 1], flat[2 * j] = st.ts[j] - base, st.tags[j] end
    packed = struct.pack('>I6', base) .. pack_records('I4I6', 2, flat, n)
  end
  redis.call('SET', st.key .. ':l', packed, 'PX', st.ts[n] + st.spec[1] - now + slack)
end


-- gcra tier ti of st: its hash's header and index, the past folded into the floor; nil when
-- nothing is stored
local function load_gcra(st, ti)
  if st.gl[ti] then return st.gl[ti] end  -- nothing booked: the one timestamp, read already
  if unseen then return nil end  -- neither its string nor its hash exists
  local key = st.key .. st.spec[4][ti][7]
  local got = redis.pcall('HMGET', key, 'h', 'i', 'j')
  if got.err then corrupt(st, key, 'is not a hash') end
  if not got[1] and not got[2] then return nil end
  if not L.gcra_insert then paged_lib() end
  local g = L.with_pages(new_gcra(st, ti))
  L.parse_gcra(g, got[1], got[2], got[3])
  g.paged = true
  L.gcra_fold(g)
  return g
end


-- stored when changed: the header, the group index with every view's summaries, the page
-- indexes and pages written; expires when the bucket is full again (the full view's arrival
-- time after every emission)
local function save_gcra(st, ti)
  local g = st.gl[ti]
  if not g.changed then return end
  if g.ng == 0 then  -- nothing booked: the floor alone, as one string (<base>:g<tier>)
    if g.paged then redis.call('DEL', g.key, g.tkey) end
    g.paged, g.changed = false, false
    if g.floor <= now_us then redis.call('DEL', st.key .. st.spec[4][ti][6]) return end
    local text = fmt(g.floor)
    if g.last ~= 0 then text = text .. ',' .. fmt(g.last) end
    redis.call('SET', st.key .. st.spec[4][ti][6], text, 'PX', -floor(-g.floor / 1000) - now + slack + 1)
    g.small = true
    return
  end
  if g.small then redis.call('DEL', st.key .. st.spec[4][ti][6]) end
  L.save_paged(st, ti, g)
end


for _, st in ipairs(P) do
  for ti, tier in ipairs(st.spec[4]) do
    if tier[1] == 3 then st.gl[ti] = load_gcra(st, ti) end
  end
end
