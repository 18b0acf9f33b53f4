-- Paged gcra buckets (docs/explanation/limiter.md, "Long gcra backlogs"): <base>:G<tier> a hash,
-- "h" "floor,last,n,next id;view limits", "i" and "j" the group index and "i<id>" and "k<id>"
-- a group's page index (per group or page in time order the doubles id, first and last emission
-- (µs), counts, then per view (b, g, theta); the whole layout in scoped.lua's header), "p<id>" a
-- page (I7 µs, I6 tag per emission). A page's summary for a view (T, c): it maps the arrival
-- time tau entering it to max(tau + m·T, b) and the bound R after it to max(R + m·T, g) before
-- it, and none of its gaps admits a ms when tau >= theta (mailer/gcra_log.py's conditions, tests/limits/test_scoped_gcra_pages.py).
local NONE = -math.huge

-- the interval and c = (l - 1)·T of g's view with limit l
local function view_of(g, l)
  local tier = g.tier
  local T = tier[4]
  if l ~= tier[2] then T = ceil_div(tier[3] * 1000, l) end
  return T, (l - 1) * T
end

-- the floor a kind with a share sees (mailer/gcra_log.py share_floor): the tokens the bucket's
-- past still holds at now, each held for the share's interval part; 0: none
local function share_floor(g, interval, part)
  if g.floor <= now_us then return 0 end
  local d = ceil_div(g.floor - now_us, interval) * part
  if d > 4503599627370496 then d = 4503599627370496 end  -- 2^52 µs: never, exact in doubles
  return now_us + d
end

-- the pages and groups of a gcra bucket: reading, summaries, changes (L), made by paged_lib()
local function pages_lib()
  local function summarize(ts, m, T, c)
    local b, gg, th = NONE, NONE, NONE
    for i = 1, m do
      local e = ts[i]
      local ms = floor(e / 1000)  -- ceil(e / 1000), exact: e is a whole number of µs
      if ms * 1000 < e then ms = ms + 1 end
      local need = c + (ms - 1) * 1000 + 1
      if b < need and need - (i - 1) * T > th then th = need - (i - 1) * T end
      if e > b then b = e end
      b = b + T
      if i * T - e > gg then gg = i * T - e end
    end
    return b, gg, th
  end

  -- the summary (b, g, theta) of parts 1 .. n of V (pages or groups, counts m), one after another
  local function compose_run(V, m, n, T)
    local a, b, gg, th = 0, NONE, NONE, NONE
    for j = 1, n do
      if V.th[j] > b and V.th[j] - a > th then th = V.th[j] - a end
      local nb = b + m[j] * T
      if V.b[j] > nb then nb = V.b[j] end
      if V.g[j] + a > gg then gg = V.g[j] + a end
      b, a = nb, a + m[j] * T
    end
    return b, gg, th
  end

  local function blank_views(g)
    local out = {}
    for _, l in ipairs(g.vlist) do out[l] = {b = {}, g = {}, th = {}} end
    return out
  end

  -- group q of g: its pages' index {id, np, pid, pfirst, plast, pm, views}, read once
  local function group_of(g, q)
    local id = g.gid[q]
    local G = g.grp[id]
    if G then return G end
    local got = redis.call('HMGET', g.key, 'i' .. fmt(id), 'k' .. fmt(id))
    local raw = got[1] and got[2] and got[1] .. got[2]  -- k<id>: its last page's record, apart
    local per = 4 + 3 * #g.vlist
    if not raw or #raw ~= 8 * per * g.gpc[q] then corrupt(g.st, g.key, 'is not a gcra bucket') end
    G = {id = id, np = g.gpc[q], pid = {}, pfirst = {}, plast = {}, pm = {}, views = blank_views(g),
      rawi = got[1], recs = {}}
    local v, k = unpack_records(string.rep('d', per), per, G.np, raw, 1), 0
    local pid, pfirst, plast, pm, nv = G.pid, G.pfirst, G.plast, G.pm, #g.vlist
    local bs, gs, ths = {}, {}, {}
    for x = 1, nv do
      local W = G.views[g.vlist[x]]
      bs[x], gs[x], ths[x] = W.b, W.g, W.th
    end
    for j = 1, G.np do
      pid[j], pfirst[j], plast[j], pm[j] = v[k + 1], v[k + 2], v[k + 3], v[k + 4]
      k = k + 4
      for x = 1, nv do
        bs[x][j], gs[x][j], ths[x][j] = v[k + 1], v[k + 2], v[k + 3]
        k = k + 3
      end
    end
    g.grp[id] = G
    if id == g.lastgid then g.tpid = G.pid[G.np] end  -- the page whose tail is <G key>:t
    return G
  end

  -- page j of group G ({ts, tags}), read once
  local function page_of(g, G, j)
    local id = G.pid[j]
    local pg = g.pages[id]
    if pg then return pg end
    local raw = redis.call('HGET', g.key, 'p' .. fmt(id))
    if raw and id == g.tpid then  -- the last page: its bytes go on in <G key>:t, and this call's
      raw = raw .. (redis.call('GET', g.tkey) or '') .. (g.tadd or '')
    end
    if not raw or #raw ~= 13 * G.pm[j] then corrupt(g.st, g.key, 'is not a gcra bucket') end
    local v = unpack_records('I7I6', 2, G.pm[j], raw, 1)
    local ts, tags = {}, {}
    pg = {ts = ts, tags = tags, raw = raw}  -- raw: its bytes as stored, for a one-booking splice
    for i = 1, G.pm[j] do ts[i], tags[i] = v[2 * i - 1], v[2 * i] end
    g.pages[id] = pg
    return pg
  end

  local function touched(g, G)
    g.gdirty[G.id], g.changed, g.version = true, true, g.version + 1
  end

  -- page j of G now holds pg: its edges and summaries, written at the end
  local function set_page(g, G, j, pg)
    if j ~= G.np then G.other = true end  -- a record before the last one changes
    if G.recs then G.recs[j] = true end  -- spliced into i<id> as read when nothing else moved
    -- its stored bytes stay of use only after one booking inserted (at, spliced in when saved)
    if pg.splice then pg.at, pg.splice = pg.splice, nil else pg.raw, pg.at = nil, nil end
    local m = #pg.ts
    G.pfirst[j], G.plast[j], G.pm[j] = pg.ts[1], pg.ts[m], m
    for _, l in ipairs(g.vlist) do
      local T, c = view_of(g, l)
      local V = G.views[l]
      V.b[j], V.g[j], V.th[j] = summarize(pg.ts, m, T, c)
    end
    g.pages[G.pid[j]], g.dirty[G.pid[j]] = pg, true
    touched(g, G)
  end

  local function insert_page(g, G, j, pg)
    local id = g.nextid
    g.nextid = id + 1
    table.insert(G.pid, j, id); table.insert(G.pfirst, j, 0); table.insert(G.plast, j, 0)
    table.insert(G.pm, j, 0)
    for _, V in pairs(G.views) do table.insert(V.b, j, 0); table.insert(V.g, j, 0); table.insert(V.th, j, 0) end
    G.np, G.other, G.shape = G.np + 1, true, true
    set_page(g, G, j, pg)
  end

  local function remove_page(g, G, j)
    local id = G.pid[j]
    table.remove(G.pid, j); table.remove(G.pfirst, j); table.remove(G.plast, j); table.remove(G.pm, j)
    for _, V in pairs(G.views) do table.remove(V.b, j); table.remove(V.g, j); table.remove(V.th, j) end
    G.np, G.other, G.shape, g.pages[id], g.dirty[id] = G.np - 1, true, true, nil, nil
    g.gone[#g.gone + 1] = 'p' .. fmt(id)
    if id == g.tpid then g.tgone = true end  -- its tail in <G key>:t goes with it
    touched(g, G)
  end

  -- group q's edges and summaries from its pages again (an empty group is removed)
  local function regroup(g, q)
    local G = g.grp[g.gid[q]]
    if G.np == 0 then
      table.remove(g.gid, q); table.remove(g.gfirst, q); table.remove(g.glast, q)
      table.remove(g.gn, q); table.remove(g.gpc, q)
      for _, V in pairs(g.views) do table.remove(V.b, q); table.remove(V.g, q); table.remove(V.th, q) end
      g.ng, g.grp[G.id], g.gdirty[G.id], g.reshaped = g.ng - 1, nil, nil, true
      g.gone[#g.gone + 1] = 'i' .. fmt(G.id)
      g.gone[#g.gone + 1] = 'k' .. fmt(G.id)
      g.changed, g.version = true, g.version + 1
      return
    end
    local count = 0
    for j = 1, G.np do count = count + G.pm[j] end
    g.gfirst[q], g.glast[q], g.gn[q], g.gpc[q] = G.pfirst[1], G.plast[G.np], count, G.np
    g.ttouched[q] = true
    for _, l in ipairs(g.vlist) do
      local V = g.views[l]
      V.b[q], V.g[q], V.th[q] = compose_run(G.views[l], G.pm, G.np, (view_of(g, l)))
    end
    touched(g, G)
  end

  local function insert_group(g, q, G)
    table.insert(g.gid, q, G.id); table.insert(g.gfirst, q, 0); table.insert(g.glast, q, 0)
    table.insert(g.gn, q, 0); table.insert(g.gpc, q, 0)
    for _, V in pairs(g.views) do table.insert(V.b, q, 0); table.insert(V.g, q, 0); table.insert(V.th, q, 0) end
    g.ng, g.grp[G.id], g.reshaped = g.ng + 1, G, true
    regroup(g, q)
  end

  -- a group not in the hash yet: every page record of it is written (other)
  local function new_group(g)
    local G = {id = g.nextid, np = 0, pid = {}, pfirst = {}, plast = {}, pm = {}, views = blank_views(g),
      other = true}
    g.nextid = g.nextid + 1
    return G
  end

  -- the summaries of g's view with limit l, made once over every page when it is first asked
  local function ensure_view(g, l)
    if g.views[l] then return end
    for q = 1, g.ng do group_of(g, q) end  -- read in the layout they were written in
    g.vlist[#g.vlist + 1] = l
    g.views[l] = {b = {}, g = {}, th = {}}
    g.reshaped, g.viewadded = true, true  -- every record grows by the new view's summary
    local T, c = view_of(g, l)
    for q = 1, g.ng do
      local G = group_of(g, q)
      local V = {b = {}, g = {}, th = {}}
      for j = 1, G.np do V.b[j], V.g[j], V.th[j] = summarize(page_of(g, G, j).ts, G.pm[j], T, c) end
      G.views[l], G.other, G.shape = V, true, true  -- every page record grows
      regroup(g, q)
    end
    g.changed = true
  end

  L.blank_views, L.group_of, L.page_of, L.touched = blank_views, group_of, page_of, touched
  L.set_page, L.insert_page, L.remove_page = set_page, insert_page, remove_page
  L.regroup, L.insert_group, L.new_group, L.ensure_view = regroup, insert_group, new_group, ensure_view
end
