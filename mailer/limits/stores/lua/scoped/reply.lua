-- The call answered: q (the tag's slot), r (release in every scope), else the search over every
-- tier of every present scope for the earliest slot, the writes (a) and the reply.

local head = P[1]

if mode == 'q' then
  finish()
  for j = 1, head.n do if head.tags[j] == tag then return head.ts[j] end end
  return 0
end

if mode == 'r' then
  local at = tonumber(ARGV[9] or '')  -- given: exactly that slot (Cluster, scope by scope)
  if at == nil then
    for j = 1, head.n do if head.tags[j] == tag then at = head.ts[j] break end end
  end
  if at == nil then finish() return 0 end
  for _, st in ipairs(P) do
    if st.shared_log then
      if L.log_add(st, at, -1) then L.clip_hints(st, at) end
    elseif st.spec[3] == 1 then
      for j = st.n, 1, -1 do
        if st.tags[j] == tag and st.ts[j] == at then
          table.remove(st.ts, j); table.remove(st.tags, j); st.n = st.n - 1
          save_log(st)
          break
        end
      end
    end
    for ti, tier in ipairs(st.spec[4]) do
      if tier[1] == 3 and st.gl[ti] then  -- listed, or the floor's last
        local g = st.gl[ti]
        local found = false
        if g.ng > 0 then found = L.gcra_release(g, at) end
        if not found and tag ~= 0 and g.last == tag and -floor(-(g.floor - tier[4]) / 1000) == at then
          g.floor, g.last, g.changed, found = 0, 0, true, true  -- it alone made the floor: full
        end
        if found then save_gcra(st, ti) end
      elseif tier[1] == 2 then
        local start = window_of(tier, at)
        if start ~= at and count_of(st, ti, start) > 0 then
          redis.call('DECR', count_name(st, ti, start))
        end
      end
    end
  end
  finish()
  return 1
end

local allowed, booked, at, bs, bt = 0, 0, now, 0, 0
local found = false
if mode == 'h' then  -- answer for a mail known to hold the slot ARGV[9]; records nothing
  at, found = tonumber(ARGV[9]), true
  if at <= -floor(-now_us / 1000) then allowed = 1 else booked = 1 end
end
if mode == 'a' and tag ~= 0 and not fresh then
  for j = 1, head.n do
    if head.tags[j] == tag then
      at, found = head.ts[j], true
      if at <= -floor(-now_us / 1000) then allowed = 1 else booked = 1 end
      break
    end
  end
end

if not found then
  local t, hi = now, -floor(-now_us / 1000)
  for _, st in ipairs(P) do  -- the recipient's mails keep their order; shared logs insert
    if st.spec[2] == 0 and st.n > 0 and st.ts[st.n] > t and st.ts[st.n] > hi then t = st.ts[st.n] end
  end
  local not_before = tonumber(ARGV[8] or '0')
  if not_before > t then t = not_before end
  local moved = true
  while moved do
    moved = false
    for si, st in ipairs(P) do
      for ti = 1, #st.spec[4] do
        local fit = earliest(st, ti, t)
        if fit > t then t, moved, bs, bt = fit, true, si, ti end
      end
    end
  end
  at = t
  if t == now then
    allowed, bs, bt = 1, 0, 0
  elseif mode == 'a' and t - now <= max_wait then
    booked = 1
  end
  if mode == 'a' and (allowed == 1 or booked == 1) then  -- a shared key full: refused
    for si, st in ipairs(P) do
      if st.spec[2] == 1 then
        local kept = st.n
        if st.shared_log then kept = st.count end
        if st.gl then for _, g in pairs(st.gl) do if g.n > kept then kept = g.n end end end
        if kept >= MAX_BOOKINGS then
          allowed, booked, bs, bt = 0, 0, si, 0
          break
        end
      end
    end
  end
  if mode == 'a' and (allowed == 1 or booked == 1) then
    local x_us, x_ms, win = t * 1000, t, t
    if allowed == 1 then x_us, x_ms, win = now_us, -floor(-now_us / 1000), now end
    for _, st in ipairs(P) do
      if st.shared_log then  -- a shared log may hold later bookings: inserted
        L.log_add(st, x_ms, 1)
      elseif st.spec[3] == 1 then
        local j = st.n + 1  -- x_ms into the sorted log, after equals
        while j > 1 and st.ts[j - 1] > x_ms do
          st.ts[j], st.tags[j] = st.ts[j - 1], st.tags[j - 1]
          j = j - 1
        end
        st.ts[j], st.tags[j], st.n = x_ms, tag, st.n + 1
        save_log(st)
      end
      for ti, tier in ipairs(st.spec[4]) do
        if tier[1] == 3 then
          local g = st.gl[ti] or new_gcra(st, ti)
          if x_us <= now_us then  -- an admission now goes into the floor at once (gcra_log.py)
            if g.floor <= x_us then g.floor, g.last = x_us + tier[4], tag
            else g.floor, g.last = g.floor + tier[4], 0 end
            g.changed = true
          else
            if not L.gcra_insert then paged_lib() end
            L.gcra_insert(g, x_us, tag)
          end
          st.gl[ti] = g
          save_gcra(st, ti)
        elseif tier[1] == 2 then
          local start, stop = window_of(tier, win)
          local c = count_of(st, ti, start)
          local name = count_name(st, ti, start)
          if redis.call('INCR', name) == 1 then
            redis.call('PEXPIRE', name, stop - now + slack)
          end
          st.counts[name] = c + 1
        end
      end
    end
  end
end

local seen, seen_us = now, now_us
if booked == 1 then seen, seen_us = at, at * 1000 end
local wait = 0
if at > now and allowed == 0 then wait = at - now end
local reply = {allowed, booked, at, wait, bs, bt}
for _, st in ipairs(P) do
  for ti = 1, #st.spec[4] do reply[#reply + 1] = room(st, ti, seen, seen_us) end
end
for _, st in ipairs(P) do  -- a share's view made over every page is kept, booked or not
  if st.gl then
    for ti, g in pairs(st.gl) do
      if g.viewadded then save_gcra(st, ti) end
    end
  end
end
finish()
return reply
