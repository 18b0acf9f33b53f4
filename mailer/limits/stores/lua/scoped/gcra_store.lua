-- A paged gcra bucket in its hash: parsed (header and group index) and saved (L), made by
-- paged_lib()
local function store_lib()
  local blank_views = L.blank_views

  -- g's header and group index from the hash's fields h, i and j (the last group's record),
  -- refused when mailguard did not write them
  L.parse_gcra = function(g, h, idx, last)
    local f, l, n, nx, vl = string.match(h or '', '^(%d+),(%d+),(%d+),(%d+);([%d,]*)$')
    if not f or not idx or not last then corrupt(g.st, g.key, 'is not a gcra bucket') end
    g.floor, g.last, g.n, g.nextid = tonumber(f), tonumber(l), tonumber(n), tonumber(nx)
    bounded(g.st, g.key, g.n)
    g.vlist = {}
    for v in string.gmatch(vl, '%d+') do g.vlist[#g.vlist + 1] = tonumber(v) end
    g.views = blank_views(g)
    local per = 5 + 3 * #g.vlist
    if not g.views[g.tlimit] or #idx % (8 * per) ~= 0 then corrupt(g.st, g.key, 'is not a gcra bucket') end
    g.raw_i = idx
    idx = idx .. last
    if #idx % (8 * per) ~= 0 then corrupt(g.st, g.key, 'is not a gcra bucket') end
    g.ng, g.reshaped = #idx / (8 * per), false
    local v, k, total = unpack_records(string.rep('d', per), per, g.ng, idx, 1), 0, 0
    -- every decision parses the whole index: its tables held in locals (a few dozen groups)
    local gid, gfirst, glast, gn, gpc = g.gid, g.gfirst, g.glast, g.gn, g.gpc
    local bs, gs, ths, nv = {}, {}, {}, #g.vlist
    for x = 1, nv do
      local W = g.views[g.vlist[x]]
      bs[x], gs[x], ths[x] = W.b, W.g, W.th
    end
    for q = 1, g.ng do
      gid[q], gfirst[q], glast[q], gn[q], gpc[q] = v[k + 1], v[k + 2], v[k + 3], v[k + 4], v[k + 5]
      k, total = k + 5, total + v[k + 4]
      for x = 1, nv do
        bs[x][q], gs[x][q], ths[x][q] = v[k + 1], v[k + 2], v[k + 3]
        k = k + 3
      end
    end
    if total ~= g.n then corrupt(g.st, g.key, 'is not a gcra bucket') end
    g.lastgid = g.gid[g.ng]
  end

  -- stored when changed: the header, the group index with every view's summaries, the page
  -- indexes and pages written; expires when the bucket is full again (the full view's arrival
  -- time after every emission)
  L.save_paged = function(st, ti, g)
    g.small, g.paged = false, true
    local T, V, tat = g.interval, g.views[g.tlimit], g.floor
    for q = 1, g.ng do
      local a = tat + g.gn[q] * T
      if V.b[q] > a then a = V.b[q] end
      tat = a
    end
    if tat <= now_us then redis.call('DEL', g.key, g.tkey) return end
    local per = 5 + 3 * #g.vlist
    local rec = '>' .. string.rep('d', per)
    local function record(q)
      local r = {g.gid[q], g.gfirst[q], g.glast[q], g.gn[q], g.gpc[q]}
      for _, l in ipairs(g.vlist) do
        local W = g.views[l]
        r[#r + 1], r[#r + 2], r[#r + 3] = W.b[q], W.g[q], W.th[q]
      end
      return r
    end
    -- the group index: "i" every group's record but the last, "j" the last one's (an append
    -- changes "j" only)
    local args = {'h', fmt(g.floor) .. ',' .. fmt(g.last) .. ',' .. fmt(g.n) .. ',' .. fmt(g.nextid) .. ';' ..
      table.concat(g.vlist, ','), 'j', struct.pack(rec, unpack(record(g.ng)))}
    local index = g.raw_i
    if g.reshaped then  -- groups added, removed or grown: the whole index
      local flat = {}
      for q = 1, g.ng - 1 do
        for _, v in ipairs(record(q)) do flat[#flat + 1] = v end
      end
      index = pack_records(string.rep('d', per), per, flat, g.ng - 1)
      args[#args + 1], args[#args + 2] = 'i', index
    else  -- the same groups: the records that changed, spliced into the index as read
      local parts, from, size = {}, 1, 8 * per
      for q = 1, g.ng - 1 do
        if g.ttouched[q] then
          parts[#parts + 1] = string.sub(index, from, (q - 1) * size)
          parts[#parts + 1] = struct.pack(rec, unpack(record(q)))
          from = q * size + 1
        end
      end
      if #parts > 0 then
        parts[#parts + 1] = string.sub(index, from)
        index = table.concat(parts)
        args[#args + 1], args[#args + 2] = 'i', index
      end
    end
    -- a group's page index: "i<id>" its pages' records but the last, "k<id>" the last one's
    local prec = '>' .. string.rep('d', per - 1)
    for id in pairs(g.gdirty) do
      local G, gf, kk = g.grp[id], {}, 0
      local from = 1
      local size, rawi = 8 * (per - 1), G.rawi
      -- the same pages as read, some records before the last changed: spliced into i<id>
      local splice = G.other and not G.shape and rawi and #rawi == size * (G.np - 1)
      if G.other and not splice then from = 1 else from = G.np end
      for j = from, G.np do
        gf[kk + 1], gf[kk + 2], gf[kk + 3], gf[kk + 4] = G.pid[j], G.pfirst[j], G.plast[j], G.pm[j]
        kk = kk + 4
        for _, l in ipairs(g.vlist) do
          local W = G.views[l]
          gf[kk + 1], gf[kk + 2], gf[kk + 3] = W.b[j], W.g[j], W.th[j]
          kk = kk + 3
        end
      end
      local packed = pack_records(string.rep('d', per - 1), per - 1, gf, G.np - from + 1)
      local cut = #packed - 8 * (per - 1)
      if from == 1 then
        rawi = string.sub(packed, 1, cut)
        args[#args + 1], args[#args + 2] = 'i' .. fmt(id), rawi
      elseif splice then
        local parts, at = {}, 1
        for j = 1, G.np - 1 do
          if G.recs[j] then
            local r = {G.pid[j], G.pfirst[j], G.plast[j], G.pm[j]}
            for _, l in ipairs(g.vlist) do
              local W = G.views[l]
              r[#r + 1], r[#r + 2], r[#r + 3] = W.b[j], W.g[j], W.th[j]
            end
            parts[#parts + 1] = string.sub(rawi, at, (j - 1) * size)
            parts[#parts + 1] = struct.pack(prec, unpack(r))
            at = j * size + 1
          end
        end
        parts[#parts + 1] = string.sub(rawi, at)
        rawi = table.concat(parts)
        args[#args + 1], args[#args + 2] = 'i' .. fmt(id), rawi
      end
      args[#args + 1], args[#args + 2] = 'k' .. fmt(id), string.sub(packed, cut + 1)
      G.other, G.shape, G.rawi, G.recs = false, false, rawi, {}
    end
    -- pages written whole; the last page's appended bytes APPENDed to <G key>:t (the page's
    -- bytes are "p<id>" then that key's), dropped when that page is written whole or removed
    local tail_gone = g.tgone
    for id in pairs(g.dirty) do
      local pg, packed = g.pages[id], nil
      local k = pg.at
      if pg.raw and k and #pg.raw == 13 * (#pg.ts - 1) then  -- one booking into its bytes as read
        local cut = 13 * (k - 1)
        packed = string.sub(pg.raw, 1, cut) .. struct.pack('>I7I6', pg.ts[k], pg.tags[k]) ..
          string.sub(pg.raw, cut + 1)
      else
        local pf = {}
        for r = 1, #pg.ts do pf[2 * r - 1], pf[2 * r] = pg.ts[r], pg.tags[r] end
        packed = pack_records('I7I6', 2, pf, #pg.ts)
      end
      pg.raw, pg.at = packed, nil
      args[#args + 1], args[#args + 2] = 'p' .. fmt(id), packed
      if id == g.tpid then tail_gone = true end
    end
    redis.call('HSET', g.key, unpack(args))
    if #g.gone > 0 then redis.call('HDEL', g.key, unpack(g.gone)) end
    local ttl = -floor(-tat / 1000) - now + slack + 1
    redis.call('PEXPIRE', g.key, ttl)
    if tail_gone then
      redis.call('DEL', g.tkey)
    elseif g.tadd then
      redis.call('APPEND', g.tkey, g.tadd)
    end
    redis.call('PEXPIRE', g.tkey, ttl)
    local LG = g.grp[g.gid[g.ng]]  -- the last page as stored now: its tail is <G key>:t
    if tail_gone or g.tpid == nil then g.tpid = LG and LG.pid[LG.np] end
    g.lastgid, g.tadd, g.tgone = g.gid[g.ng], nil, nil
    g.changed, g.dirty, g.gdirty, g.gone = false, {}, {}, {}
    g.raw_i, g.ttouched, g.reshaped = index, {}, false
  end
end

-- the paged gcra functions (L), made when a gcra tier keeps (or gets) bookings
local function paged_lib()
  pages_lib()
  search_lib()
  write_lib()
  store_lib()
end
