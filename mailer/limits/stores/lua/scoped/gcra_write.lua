-- Bookings into and out of a paged gcra bucket: insert (appending to the last page when it
-- can), release, fold the past into the floor (L), made by paged_lib()
local function write_lib()
  local group_of, page_of, touched, set_page = L.group_of, L.page_of, L.touched, L.set_page
  local insert_page, remove_page, regroup = L.insert_page, L.remove_page, L.regroup
  local insert_group, new_group, last_at = L.insert_group, L.new_group, L.last_at

  L.with_pages = function(g)
    if g.gid then return g end
    local tier = g.tier
    g.key = g.st.key .. tier[7]  -- the hash <base>:G<tier>
    g.tkey = g.key .. ':t'  -- the last page's bytes appended since it was last written whole
    g.interval, g.wms, g.tlimit, g.nextid = tier[4], tier[3], tier[2], 1
    g.gid, g.gfirst, g.glast, g.gn, g.gpc = {}, {}, {}, {}, {}
    g.views, g.vlist = {[g.tlimit] = {b = {}, g = {}, th = {}}}, {g.tlimit}
    g.grp, g.pages, g.dirty, g.gdirty, g.gone = {}, {}, {}, {}, {}
    g.changed, g.version, g.ttouched, g.reshaped = false, 0, {}, true
    return g
  end


  -- one emission x (µs) for tag tg after the last of page j of G, the last page: its bytes
  -- appended to (not decoded) and its summaries carried one step further, as summarize would
  local function append_last(g, G, j, x, tg)
    local id, m = G.pid[j], G.pm[j] + 1
    g.tadd = (g.tadd or '') .. struct.pack('>I7I6', x, tg)  -- APPENDed to <G key>:t when saved
    local pg = g.pages[id]
    if pg then pg.ts[m], pg.tags[m], pg.raw = x, tg, nil end  -- read in this call: kept as it is now
    local ms = floor(x / 1000)
    if ms * 1000 < x then ms = ms + 1 end
    for _, l in ipairs(g.vlist) do
      local T, c = view_of(g, l)
      local V = G.views[l]
      local need = c + (ms - 1) * 1000 + 1
      if V.b[j] < need and need - (m - 1) * T > V.th[j] then V.th[j] = need - (m - 1) * T end
      local b = V.b[j]
      if x > b then b = x end
      V.b[j] = b + T
      if m * T - x > V.g[j] then V.g[j] = m * T - x end
    end
    G.pm[j], G.plast[j] = m, x
    touched(g, G)
  end

  -- the most emissions a page of a bucket of n keeps, and the most pages a group keeps, before
  -- either is cut in two: about the cube root of the backlog each, so a decision reads about as
  -- many group summaries, page summaries of one group and times of one page
  local FRONT = 8
  local function caps(n)
    local r = floor(n ^ (1 / 3))
    local page, group = 2 * r, floor(r / 2)
    if page < 4 then page = 4 end
    if group < 2 then group = 2 end
    return 2 * page, 2 * group
  end

  -- group q is cut in two when it keeps too many pages: in halves, but the last group grown at
  -- its end keeps every page but its last (appends fill groups as they fill pages)
  local function split_group(g, q, most, at_end)
    local G = g.grp[g.gid[q]]
    if G.np <= most then return end
    local H, half = new_group(g), floor(G.np / 2)
    if at_end and q == g.ng then half = G.np - 1 end
    for j = half + 1, G.np do
      local k = j - half
      H.pid[k], H.pfirst[k], H.plast[k], H.pm[k] = G.pid[j], G.pfirst[j], G.plast[j], G.pm[j]
      G.pid[j], G.pfirst[j], G.plast[j], G.pm[j] = nil, nil, nil, nil
      for l, V in pairs(G.views) do
        local W = H.views[l]
        W.b[k], W.g[k], W.th[k] = V.b[j], V.g[j], V.th[j]
        V.b[j], V.g[j], V.th[j] = nil, nil, nil
      end
    end
    H.np, G.np, G.other, G.shape = G.np - half, half, true, true
    regroup(g, q)
    insert_group(g, q + 1, H)
  end

  -- book one emission at x (µs, after now) for the mail tagged tg: into its page, cut when too long
  local function insert(g, x, tg)
    L.with_pages(g)
    g.n = g.n + 1
    local most_page, most_group = caps(g.n)
    if g.ng == 0 then
      local G = new_group(g)
      insert_page(g, G, 1, {ts = {x}, tags = {tg}})
      insert_group(g, 1, G)
      return
    end
    local q = last_at(g.gfirst, g.ng, x)
    if q == 0 then q = 1 end
    local G = group_of(g, q)
    local j = last_at(G.pfirst, G.np, x)
    if j == 0 then j = 1 end
    if q == g.ng and j == G.np and x >= G.plast[j] and not g.dirty[G.pid[j]] and
      G.pid[j] == g.tpid and G.pm[j] < most_page then  -- after the last booking: appended to its page's bytes
      append_last(g, G, j, x, tg)
      regroup(g, q)
      return
    end
    local pg = page_of(g, G, j)
    local k = #pg.ts + 1
    while k > 1 and pg.ts[k - 1] > x do
      pg.ts[k], pg.tags[k] = pg.ts[k - 1], pg.tags[k - 1]
      k = k - 1
    end
    pg.ts[k], pg.tags[k] = x, tg
    local m = #pg.ts
    -- a page a booking goes into, not after: cut in pages of at most a FRONT-th of the cap,
    -- so that the next bookings there (the room at the front of a backlog) read, walk and
    -- rewrite a small page
    local most = floor(most_page / FRONT)
    if most < 4 then most = 4 end
    local at_end = k == m and q == g.ng and j == G.np
    if at_end then most = most_page end  -- after the last: the page stays full, a new one starts
    if m <= most then
      -- read as stored and changed by this booking only: its bytes spliced when saved
      if pg.raw and not g.dirty[G.pid[j]] then pg.splice = k end
      set_page(g, G, j, pg)
    else
      local pieces = ceil_div(m, most)
      local size = ceil_div(m, pieces)
      if at_end then size = most end
      local parts = {}
      for p = 2, pieces do
        local rest, from = {ts = {}, tags = {}}, (p - 1) * size
        for r = from + 1, math.min(from + size, m) do
          rest.ts[r - from], rest.tags[r - from] = pg.ts[r], pg.tags[r]
        end
        parts[#parts + 1] = rest
      end
      for r = size + 1, m do pg.ts[r], pg.tags[r] = nil, nil end
      set_page(g, G, j, pg)
      for p, rest in ipairs(parts) do insert_page(g, G, j + p, rest) end
    end
    regroup(g, q)
    split_group(g, q, most_group, at_end)
  end

  -- insert, and where a search of this call found x at a gap (tat, R) in a view, the gap after
  -- the booking in that view: tat' = max(tat, x) + T, the same R (the emissions after it are
  -- those after the gap), for the room the reply gives (gcra_used_paged)
  L.gcra_insert = function(g, x, tg)
    local before, version = g.found, g.version
    g.found, g.booked = nil, nil
    insert(g, x, tg)
    if before == nil then return end
    g.booked = {}
    for l, f in pairs(before) do
      if f[1] == version and f[3] == x then
        local tat = f[4]
        if x > tat then tat = x end
        g.booked[l] = {g.version, f[2], x, tat + (view_of(g, l)), f[5]}
      end
    end
  end

  -- take back the emission of this mail's tag at slot at (ms), the latest first; whether found
  L.gcra_release = function(g, at)
    local lo_us, hi_us = (at - 1) * 1000, at * 1000
    for q = g.ng, 1, -1 do
      if g.gfirst[q] <= hi_us and g.glast[q] > lo_us then
        local G = group_of(g, q)
        for j = G.np, 1, -1 do
          if G.pfirst[j] <= hi_us and G.plast[j] > lo_us then
            local pg = page_of(g, G, j)
            for k = #pg.ts, 1, -1 do
              if pg.tags[k] == tag and -floor(-pg.ts[k] / 1000) == at then
                table.remove(pg.ts, k); table.remove(pg.tags, k)
                if #pg.ts == 0 then remove_page(g, G, j) else set_page(g, G, j, pg) end
                regroup(g, q)
                g.n = g.n - 1
                return true
              end
            end
          end
        end
      end
    end
    return false
  end

  -- move the emissions up to now into g's floor, page by page (gcra_log.py fold)
  L.gcra_fold = function(g)
    while g.ng > 0 and g.gfirst[1] <= now_us do
      local G = group_of(g, 1)
      while G.np > 0 and G.pfirst[1] <= now_us do
        local pg = page_of(g, G, 1)
        local m, cut = #pg.ts, 0
        while cut < m and pg.ts[cut + 1] <= now_us do
          cut = cut + 1
          if g.floor <= pg.ts[cut] then g.floor, g.last = pg.ts[cut], pg.tags[cut] else g.last = 0 end
          g.floor = g.floor + g.interval
        end
        g.n = g.n - cut
        if cut == m then
          remove_page(g, G, 1)
        else
          local rest = {ts = {}, tags = {}}
          for r = cut + 1, m do rest.ts[r - cut], rest.tags[r - cut] = pg.ts[r], pg.tags[r] end
          set_page(g, G, 1, rest)
        end
      end
      regroup(g, 1)
    end
    if g.floor <= now_us then g.floor, g.last = 0, 0 end
  end
end
