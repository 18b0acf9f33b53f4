-- The search of a paged gcra bucket (mailer/gcra_log.py earliest and used, over pages): the
-- earliest ms a view admits one more, skipping groups and pages by their summaries (L), made by
-- paged_lib()
local function search_lib()
  local group_of, page_of, ensure_view = L.group_of, L.page_of, L.ensure_view

  -- the arrival time entering each part (groups of g, or pages of one group) from base, and R
  -- after each (tail: after the last), in view V of interval T; kept until g changes
  local function edges(g, key, V, m, n, base, tail, T)
    if g.edge_memo == nil or g.changed_at ~= g.version then g.edge_memo, g.changed_at = {}, g.version end
    local known = g.edge_memo[key]
    if known then return known[1], known[2] end
    local tau, after = {base}, {}
    for j = 1, n do
      local a = tau[j] + m[j] * T
      if V.b[j] > a then a = V.b[j] end
      tau[j + 1] = a
    end
    after[n] = tail
    for j = n - 1, 1, -1 do
      local a = after[j + 1] + m[j + 1] * T
      if V.g[j + 1] > a then a = V.g[j + 1] end
      after[j] = a
    end
    g.edge_memo[key] = {tau, after}
    return tau, after
  end

  -- the last of n parts whose first is at or before x (0: none)
  local function last_at(first, n, x)
    local lo, hi = 1, n + 1
    while lo < hi do
      local mid = floor((lo + hi) / 2)
      if first[mid] <= x then lo = mid + 1 else hi = mid end
    end
    return lo - 1
  end

  -- the gap holding x (µs): group q, page j of it, the number i of that page's emissions at or
  -- before x (q = ng + 1: after every emission)
  local function locate(g, x)
    local q = last_at(g.gfirst, g.ng, x)
    if q == 0 then return 1, 1, 0 end
    if g.glast[q] <= x then return q + 1, 1, 0 end
    local G = group_of(g, q)
    local j = last_at(G.pfirst, G.np, x)
    if G.plast[j] <= x then return q, j + 1, 0 end
    local ts = page_of(g, G, j).ts
    local a, b = 1, G.pm[j] + 1
    while a < b do
      local mid = floor((a + b) / 2)
      if ts[mid] <= x then a = mid + 1 else b = mid end
    end
    return q, j, a - 1
  end

  -- one search's view of g: limit l from base, its groups' edges (tau, after)
  local function view(g, l, base)
    ensure_view(g, l)
    local T, c = view_of(g, l)
    local V = g.views[l]
    local tau, after = edges(g, l .. ':' .. fmt(base), V, g.gn, g.ng, base, NONE, T)
    return {g = g, l = l, base = base, T = T, c = c, V = V, tau = tau, after = after, memo = {},
      groups = {}}
  end

  -- the pages of group q in view s: G, its view, the arrival time entering and R after each page
  -- (kept in s: a search asks for them at every step)
  local function pages_in(s, q)
    local known = s.groups[q]
    if known then return known[1], known[2], known[3], known[4] end
    local g = s.g
    local G = group_of(g, q)
    local GV = G.views[s.l]
    local tau, after = edges(g, s.l .. ':' .. fmt(s.base) .. ':' .. fmt(G.id), GV, G.pm, G.np,
      s.tau[q], s.after[q], s.T)
    s.groups[q] = {G, GV, tau, after}
    return G, GV, tau, after
  end

  -- page j of group G in view s: its times, and tat and R at each of its gaps (0 .. m - 1),
  -- from the arrival time entering it and R after it; kept in s
  local function page_bounds(s, G, j, tau, after)
    local key = G.pid[j]
    local known = s.memo[key]
    if known then return known[1], known[2], known[3] end
    local g, T = s.g, s.T
    -- the same page from the same edges in an earlier search of this call: walked once
    local walked = g.walked
    if walked and walked[1] == g.version and walked[2] == key and walked[3] == T and
      walked[4] == tau and walked[5] == after then
      s.memo[key] = walked[6]
      return walked[6][1], walked[6][2], walked[6][3]
    end
    local ts, m = page_of(g, G, j).ts, G.pm[j]
    local tats, rights = {[0] = tau}, {[m] = after}
    for k = 1, m do
      local a = tats[k - 1]
      if ts[k] > a then a = ts[k] end
      tats[k] = a + T
    end
    for k = m, 1, -1 do
      local r = rights[k] + T
      if T - ts[k] > r then r = T - ts[k] end
      rights[k - 1] = r
    end
    s.memo[key] = {ts, tats, rights}
    g.walked = {g.version, key, T, tau, after, s.memo[key]}
    return ts, tats, rights
  end

  -- tat and R at gap (q, j, i) of view s; a group's or a page's first gap from summaries only
  local function bounds(s, q, j, i)
    local g, T = s.g, s.T
    if q > g.ng then return s.tau[g.ng + 1], NONE end
    if j == 1 and i == 0 then
      local r = s.after[q] + g.gn[q] * T
      if s.V.g[q] > r then r = s.V.g[q] end
      return s.tau[q], r
    end
    local G, GV, tau, after = pages_in(s, q)
    if i == 0 then
      local r = after[j] + G.pm[j] * T
      if GV.g[j] > r then r = GV.g[j] end
      return tau[j], r
    end
    local known = s.memo[G.pid[j]]
    if known then return known[2][i], known[3][i] end
    local ts, m = page_of(g, G, j).ts, G.pm[j]  -- one gap: no tables
    local tat, right = tau[j], after[j]
    for k = 1, i do
      local e = ts[k]
      if e > tat then tat = e end
      tat = tat + T
    end
    for k = m, i + 1, -1 do
      local r = right + T
      if T - ts[k] > r then r = T - ts[k] end
      right = r
    end
    return tat, right
  end


  -- whether a run (a group or a page) of m emissions, the last at last (µs), entered at the
  -- arrival time tau with the bound R after it, is proved to admit nothing in view s: closed
  -- (tau >= its theta) or over-full. A gap k of the run has tat_k >= tau + k·T and R_k at least
  -- R + (m - k)·T and (m - k)·T - last (the run's last emission), so tat_k + R_k exceeds c
  -- when tau + m·T + max(R, -last) does; all of it holds for every gap of the run, those after
  -- a point inside it too
  local function proved(s, tau, theta, after, m, last)
    if tau >= theta then return true end
    if -last > after then after = -last end
    return tau + after + m * s.T > s.c
  end

  -- proved for group q of view s, from its summary
  local function closed_group(s, q)
    local g = s.g
    return proved(s, s.tau[q], s.V.th[q], s.after[q], g.gn[q], g.glast[q])
  end

  -- locate(g, x) for a search in view s, but a group or page holding x (µs) that proved
  -- shows admits nothing is answered by its start, unread: the search then skips it by its
  -- summary (a search from now inside a closed front reads no page to place itself)
  local function place(s, x)
    local g = s.g
    local q = last_at(g.gfirst, g.ng, x)
    if q > 0 and g.glast[q] > x then
      if closed_group(s, q) then return q, 1, 0 end
      local G, GV, tau, after = pages_in(s, q)
      local j = last_at(G.pfirst, G.np, x)
      if j > 0 and G.plast[j] > x and proved(s, tau[j], GV.th[j], after[j], G.pm[j], G.plast[j]) then
        return q, j, 0
      end
    end
    return locate(g, x)
  end

  -- the search of view s answers x (ms) at the gap whose tat and R are these: kept per view
  -- so that the room after booking x there needs no second walk (gcra_insert carries it)
  local function found(s, x, tat, right)
    local g = s.g
    g.found = g.found or {}
    g.found[s.l] = {g.version, s.base, x * 1000, tat, right}
    return x
  end

  -- earliest ms >= t at which one more emission keeps g's view with limit l, from base (the
  -- floor, or a share's floor); t == now is an admission at now_us (gcra_log.py earliest). A
  -- group or page whose summary proves every gap closed (the arrival time entering it) or
  -- over-full (its arrival time and R at least the ones entering and leaving it) is skipped unread.
  local function first_paged(g, base, l, t)
    local s = view(g, l, base)
    local c, T = s.c, s.T
    if t == now then
      local tat, right = bounds(s, locate(g, now_us))
      if tat - now_us <= c and right + now_us <= c and tat + right <= c then return now end
      t = now + 1
    end
    local x = t
    local q, j, i = place(s, x * 1000)
    while true do
      if q > g.ng then
        local lo = ceil_div(s.tau[g.ng + 1] - c, 1000)
        if lo > x then x = lo end
        return found(s, x, s.tau[g.ng + 1], NONE)
      end
      if j == 1 and i == 0 and closed_group(s, q) then
        local nx = ceil_div(g.glast[q], 1000)
        if nx > x then x = nx end
        if q == g.ng or x * 1000 < g.gfirst[q + 1] then q, j, i = q + 1, 1, -1 end
      else
        local G, GV, tau, after = pages_in(s, q)
        if proved(s, tau[j], GV.th[j], after[j], G.pm[j], G.plast[j]) then
          local nx = ceil_div(G.plast[j], 1000)
          if nx > x then x = nx end
          if j < G.np and x * 1000 < G.pfirst[j + 1] then j, i = j + 1, -1 end
        else  -- this page's gaps from i on, as gcra_log.py earliest walks them
          local ts, tats, rights = page_bounds(s, G, j, tau[j], after[j])
          for k = i, G.pm[j] - 1 do
            local e = ts[k + 1]
            if x * 1000 < e then
              local tat, right = tats[k], rights[k]
              if tat + right <= c then
                local lo = ceil_div(tat - c, 1000)
                if lo > x then x = lo end
                if x * 1000 < e and right + x * 1000 <= c then return found(s, x, tat, right) end
              end
              local nx = ceil_div(e, 1000)
              if nx > x then x = nx end
            end
          end
        end
      end
      if i == -1 then i = 0 else q, j, i = place(s, x * 1000) end  -- -1: at the next one's start
    end
  end

  -- first_paged, but a search that answered x from t0 answers every t in [t0, x] (nothing fits
  -- before x, x fits): the same question asked again from its answer, as the decision does,
  -- is not searched twice (kept per view until g changes)
  L.gcra_first_paged = function(g, base, l, t)
    g.answers = g.answers or {}
    local known = g.answers[l]
    if known and known[1] == g.version and known[2] == base and known[3] <= t and t <= known[4] then
      return known[4]
    end
    local x = first_paged(g, base, l, t)
    g.answers[l] = {g.version, base, t, x}
    return x
  end

  -- the emissions the spans of g's view l (from base) holding at_us already use, in intervals;
  -- at the booking just made where a search of this call found it, from that search's gap
  L.gcra_used_paged = function(g, base, l, at_us)
    local known, tat, right, T = g.booked and g.booked[l], nil, nil, nil
    if known and known[1] == g.version and known[2] == base and known[3] == at_us then
      tat, right, T = known[4], known[5], (view_of(g, l))  -- the gap after the booking just made
    else
      local s = view(g, l, base)
      T = s.T
      tat, right = bounds(s, locate(g, at_us))
    end
    local ahead = 0
    if tat > at_us then ahead = tat - at_us end
    if right + at_us > 0 then ahead = ahead + right + at_us end
    return ceil_div(ahead, T)
  end

  L.last_at = last_at
end
