-- Shared sliding logs (mailer/limits/shared_log.py): <base>:z a sorted set of ms slots, member
-- "<ms>:<count>" with score <ms>; <base>:h a hash: "n" the number of entries, "<tier>:<limit>"
-- a hint "lo,h" (no booking fits that view of the tier in ms [lo, h)). Read where needed only.



-- the functions of shared sliding logs and paged gcra tiers, made by shared_lib() and
-- paged_lib() when a call needs them (most need neither): L.<name>
local L = {}
local function shared_lib()
  -- the first index j of the sorted list ts (n entries) with ts[j] >= v (n + 1: none); with
  -- fold, entries equal to fold are read as fold - 1 (seen from now: admissions of this ms)
  local function first_at(ts, n, v, fold)
    local lo, hi = 1, n + 1
    while lo < hi do
      local mid = floor((lo + hi) / 2)
      local e = ts[mid]
      if e == fold then e = e - 1 end
      if e < v then lo = mid + 1 else hi = mid end
    end
    return lo
  end

  -- the ms and count of a slot's member, refused when mailguard did not write it
  local function slot(st, m)
    local ms, c = string.match(m, '^(%d+):(%d+)$')
    ms, c = tonumber(ms), tonumber(c)
    if not ms or not c or c < 1 or c > MAX_BOOKINGS then
      corrupt(st, st.key .. ':z', 'holds a slot mailguard did not write')
    end
    return ms, c
  end

  -- st's count and hints, with the entries at or before now - keep dropped (they matter no more)
  L.load_shared = function(st)
    local h, z = st.key .. ':h', st.key .. ':z'
    local got = redis.pcall('HGETALL', h)
    if got.err then corrupt(st, h, 'is not a hash') end
    st.count, st.hints, st.dirty, st.changed = 0, {}, {}, false
    for j = 1, #got, 2 do
      local field, value = got[j], got[j + 1]
      if field == 'n' then
        st.count = tonumber(string.match(value, '^%d+$') or '')
        if st.count == nil then corrupt(st, h, 'holds a count mailguard did not write') end
        bounded(st, h, st.count)
      else
        local ti, lo, hi = string.match(field, '^(%d+):%d+$'), string.match(value, '^(%d+),(%d+)$')
        ti = tonumber(ti)
        if not ti or not lo or not st.spec[4][ti] or st.spec[4][ti][1] ~= 1 then
          corrupt(st, h, 'holds a field mailguard did not write')
        end
        st.hints[field] = {tonumber(lo), tonumber(hi)}
      end
    end
    local old = redis.pcall('ZRANGEBYSCORE', z, '-inf', fmt(now - st.spec[1]))
    if old.err then corrupt(st, z, 'is not a sorted set') end
    if #old > 0 then
      for _, m in ipairs(old) do local _, c = slot(st, m); st.count = st.count - c end
      redis.call('ZREMRANGEBYSCORE', z, '-inf', fmt(now - st.spec[1]))
      st.changed = true
    end
  end

  -- add d (1 or -1) entries at ms x to st's shared log; false when there is none to take away
  L.log_add = function(st, x, d)
    local z = st.key .. ':z'
    local got = redis.call('ZRANGEBYSCORE', z, fmt(x), fmt(x))
    local c = 0
    if got[1] then c = select(2, slot(st, got[1])) end
    if c + d < 0 then return false end
    if got[1] then redis.call('ZREM', z, got[1]) end
    if c + d > 0 then redis.call('ZADD', z, fmt(x), fmt(x) .. ':' .. (c + d)) end
    st.count, st.changed = st.count + d, true
    return true
  end

  -- the entries of st's shared log from the first at or after v on, read 64 slots at a time
  local function seg_open(st, v) return {st = st, ts = {}, n = 0, from = fmt(v), done = false} end
  local function seg_at(seg, j)
    while j > seg.n and not seg.done do
      local got = redis.call('ZRANGEBYSCORE', seg.st.key .. ':z', seg.from, '+inf', 'LIMIT', 0, 64)
      if #got < 64 then seg.done = true end
      for _, m in ipairs(got) do
        local ms, c = slot(seg.st, m)
        for _ = 1, c do seg.n = seg.n + 1; seg.ts[seg.n] = ms end
        seg.from = '(' .. fmt(ms)
      end
    end
    return seg.ts[j]
  end

  -- earliest ms >= t at which one more entry fits in st's shared log (insertion.py earliest_insert)
  local function insert_shared(st, limit, w, t)
    local x = t
    local seg = seg_open(st, x - w + 1)
    local j = 1
    while true do
      local last = seg_at(seg, j + limit - 1)
      if last == nil or last - w + 1 > x then break end
      local first = seg.ts[j]
      if last - first < w and x <= first + w - 1 then x = first + w end
      j = j + 1
    end
    return x
  end

  -- whether one more entry fits at now seen from now: entries at hi count as now (fits_now)
  L.fits_now = function(st, limit, w, hi)
    local seg = seg_open(st, now - w + 1)
    local j = 1
    while true do
      local last = seg_at(seg, j + limit - 1)
      if last == nil then return true end
      local first = seg.ts[j]
      if first == hi then first = now end
      if last == hi then last = now end
      if last - w + 1 > now then return true end
      if last - first < w and now <= first + w - 1 then return false end
      j = j + 1
    end
  end

  -- insert_shared from t, started at the end of the view's hint when t lies in it; what the
  -- search learns is kept as the hint (shared_log.py earliest_hinted)
  L.hinted = function(st, ti, limit, w, t)
    local key = ti .. ':' .. limit
    local hint = st.hints[key]
    local start = t
    if hint and hint[1] <= t and t < hint[2] then start = hint[2] end
    local x = insert_shared(st, limit, w, start)
    if x > t then
      local lo, h = t, x
      if hint and t <= hint[2] and x >= hint[1] then
        if hint[1] < lo then lo = hint[1] end
        if hint[2] > h then h = hint[2] end
      end
      if not hint or lo ~= hint[1] or h ~= hint[2] then
        st.hints[key], st.dirty[key], st.changed = {lo, h}, true, true
      end
    end
    return x
  end

  -- a release at ms at: each hint of tier ti ends at at - W + 1 at the latest (shared_log.remove)
  L.clip_hints = function(st, at)
    for key, hint in pairs(st.hints) do
      local w = st.spec[4][tonumber(string.match(key, '^(%d+):'))][3]
      local e = hint[2]
      if at - w + 1 < e then e = at - w + 1 end
      if e <= hint[1] then st.hints[key], st.dirty[key] = nil, true
      elseif e ~= hint[2] then st.hints[key], st.dirty[key] = {hint[1], e}, true end
    end
  end

  -- write st's count and changed hints, expiring when the last entry leaves the longest window
  L.save_shared = function(st)
    if not st.changed then return end
    local z, h = st.key .. ':z', st.key .. ':h'
    local last = redis.call('ZREVRANGEBYSCORE', z, '+inf', '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if st.count <= 0 or last[2] == nil then redis.call('DEL', z, h) return end
    local args, gone = {'n', st.count}, {}
    for key in pairs(st.dirty) do
      local hint = st.hints[key]
      if hint then
        args[#args + 1], args[#args + 2] = key, fmt(hint[1]) .. ',' .. fmt(hint[2])
      else
        gone[#gone + 1] = key
      end
    end
    redis.call('HSET', h, unpack(args))
    if #gone > 0 then redis.call('HDEL', h, unpack(gone)) end
    local ttl = tonumber(last[2]) + st.spec[1] - now + slack
    redis.call('PEXPIRE', z, ttl)
    redis.call('PEXPIRE', h, ttl)
  end

  -- the most entries of st's sorted log in one window of w ms that holds at
  L.window_max = function(st, at, w)
    local ts, n = {}, 0
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', st.key .. ':z', fmt(at - w + 1), fmt(at + w - 1))) do
      local ms, c = slot(st, m)
      for _ = 1, c do n = n + 1; ts[n] = ms end
    end
    local low, high = first_at(ts, n, at - w + 1, nil), first_at(ts, n, at + w, nil) - 1
    local best = high - first_at(ts, n, at, nil) + 1
    local r = low
    for i = low, high do
      if ts[i] > at then break end
      while r <= high and ts[r] <= ts[i] + w - 1 do r = r + 1 end
      if r - i > best then best = r - i end
    end
    return best
  end
end

if any_shared then
  shared_lib()
  for _, st in ipairs(P) do
    if st.shared_log then L.load_shared(st) end
  end
end

-- the shared logs' counts and hints written (once per call, at its end)
local function finish()
  if any_shared then
    for _, st in ipairs(P) do if st.shared_log then L.save_shared(st) end end
  end
end
