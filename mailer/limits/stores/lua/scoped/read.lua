-- the present scopes: {spec, key, ts, tags, n, gl = {}, counts = {}}, read in one MGET: the
-- recipient's log, each gcra tier's bucket, each fixed tier's count in the window holding now
-- (others lazily)
-- (reads: per name its scope and what it holds: 0 the log, a number a gcra tier, else the name
-- of a fixed tier's count)
local P, names, reads = {nil, nil, nil}, {nil, nil, nil, nil}, {nil, nil, nil, nil, nil, nil, nil, nil}
local any_shared, r = false, 1
local digits = ARGV[7]
for i = 1, #digits do
  local spec = S[string.byte(digits, i) - 48]
  local key = KEYS[i]
  local st = {spec = spec, key = key, n = 0, shared_log = spec[2] == 1 and spec[3] == 1, ts = nil,
    tags = nil, gl = nil, counts = nil}  -- the fields a call may add, sized for at once
  if st.shared_log then  -- in <base>:z and :h, read where a decision looks (shared_log)
    any_shared = true
  elseif spec[3] == 1 then  -- the recipient's log, <base>:l
    st.ts, st.tags = {}, {}
    names[r], reads[2 * r - 1], reads[2 * r], r = key .. ':l', st, 0, r + 1
  end
  local tiers = spec[4]
  for ti = 1, #tiers do
    local tier = tiers[ti]
    if tier[1] == 3 then
      st.gl = st.gl or {}
      names[r], reads[2 * r - 1], reads[2 * r], r = key .. tier[6], st, ti, r + 1
    elseif tier[1] == 2 then
      st.counts = st.counts or {}
      local name = count_name(st, ti, (window_of(tier, now)))
      names[r], reads[2 * r - 1], reads[2 * r], r = name, st, name, r + 1
    end
  end
  P[i] = st
end
-- refuse a key mailguard did not write as it is: an error reply naming the scope and the
-- (hashed) key, never a backlog decoded from foreign bytes
local function corrupt(st, name, why, advice)
  error({err = 'MAILGUARD_CORRUPT the ' .. st.spec[5] .. ' scope\'s key ' .. name .. ' ' .. why ..
    ': ' .. (advice or 'delete it (the scope then starts empty)')})
end
local function bounded(st, name, count)
  if count > MAX_BOOKINGS and st.spec[2] == 1 then
    corrupt(st, name, 'holds ' .. count .. ' entries, more than MAILGUARD_MAX_BOOKINGS (' ..
      MAX_BOOKINGS .. ') allows', 'raise MAILGUARD_MAX_BOOKINGS to keep them, or delete it ' ..
      '(the scope then starts empty)')
  end
end
local nnames = r - 1
local values = pre_values or {}  -- nothing to read: a shared sliding log's scopes alone
if not pre_values and nnames > 0 then values = redis.call('MGET', unpack(names, 1, nnames)) end
-- the keys MGET found missing: a shared scope's (another type reads as missing too) and, in any
-- scope, the hash of a gcra tier without its string (its bookings); one EXISTS over all of them
-- answers the common case (nothing there) in one call, else each is asked as before
local absent
for r = 1, nnames do
  if not values[r] then
    local st, what = reads[2 * r - 1], reads[2 * r]
    if st.spec[2] == 1 then
      absent = absent or {}
      absent[#absent + 1] = names[r]
    end
    if type(what) == 'number' and what > 0 then
      absent = absent or {}
      absent[#absent + 1] = st.key .. st.spec[4][what][7]
    end
  end
end
local unseen = pre_unseen
if unseen == nil then unseen = absent == nil or redis.call('EXISTS', unpack(absent)) == 0 end
for r = 1, nnames do
  local st, what, raw = reads[2 * r - 1], reads[2 * r], values[r]
  if not raw and st.spec[2] == 1 and not unseen and
    redis.call('EXISTS', names[r]) == 1 then
    corrupt(st, names[r], 'is not a string')  -- another type: MGET reads it as missing
  end
  if what == 0 then
    if raw then
      if #raw < 16 or (#raw - 6) % 10 ~= 0 then corrupt(st, names[r], 'is not a packed log') end
      local count = (#raw - 6) / 10
      bounded(st, names[r], count)
      local base, cut = struct.unpack('>I6', raw), now - st.spec[1]
      local v = unpack_records('I4I6', 2, count, raw, 7)
      for j = 1, 2 * count, 2 do
        local t = base + v[j]
        if t > cut then st.n = st.n + 1; st.ts[st.n], st.tags[st.n] = t, v[j + 1] end
      end
    end
  elseif type(what) == 'number' then
    if raw then
      local f, l = string.match(raw, '^(%d+),(%d+)$')
      if not f then f = string.match(raw, '^%d+$') end
      if not f then corrupt(st, names[r], 'is not a gcra bucket') end
      -- nothing booked: the floor alone (and its last tag), the one timestamp
      local g, floor_us = new_gcra(st, what), tonumber(f)
      if floor_us > now_us then g.floor, g.last = floor_us, tonumber(l) or 0 end
      g.small, st.gl[what] = true, g
    end
  else
    if raw and not string.find(raw, '^%d+$') then corrupt(st, names[r], 'is not a count') end
    st.counts[what] = tonumber(raw) or 0
  end
end

local function count_of(st, ti, start)
  local name = count_name(st, ti, start)
  local c = st.counts[name]
  if c == nil then
    c = tonumber(redis.call('GET', name)) or 0
    st.counts[name] = c
  end
  return c
end

local function limit_of(st, tier)
  if st.spec[2] == 1 then
    local l = floor(tier[2] * share + 1e-9)
    if l < 1 then l = 1 end
    return l
  end
  return tier[2]
end
