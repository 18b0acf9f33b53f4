--[[
mailguard scoped limiter: one atomic decision over every scope (recipient, domain, sender,
tenant) and every tier kind (sliding, fixed, gcra). Mirrors mailer/limits/algorithm.py step for
step, but for gcra bookings: kept in pages with summaries here and searched by skipping the pages
where nothing fits (docs/explanation/limiter.md, "Long gcra backlogs"; the memory store searches
them in one list); tests/test_scoped_properties.py checks that both give identical answers. Run by
mailer/limits/stores/scoped_redis.py (on Redis Cluster: once per scope,
mailer/limits/stores/scoped_cluster.py).

The policy is compiled in: mailer/limits/stores/scoped_script.py replaces --[[SCOPES]] with one entry
per scope of the policy, recipient first: {keep_ms, shared (0/1), has_log (0/1), tiers, name} and each
tier {kind (1 sliding, 2 fixed, 3 gcra), limit, window_ms, interval_us (gcra), months (0: not a
calendar-month tier), key suffixes (":g<tier>", ":G<tier>" gcra, ":f<tier>:" fixed, "" sliding)};
--[[MAX]] with MAILGUARD_MAX_BOOKINGS. A decision with nothing booked in a gcra tier and no
shared sliding log makes one MGET and its writes: the paged gcra and shared log functions are
made only when a call needs them (paged_lib, shared_lib).

KEYS[i]   the base key of the i-th scope named in ARGV[7], "<namespace>:{<keyed hash>}"; its
          data: <base>:l the recipient's sliding log (packed as in sliding_log.lua: base I6,
          then I4 offset and I6 tag per entry); a shared scope's sliding log (no tags,
          mailer/limits/shared_log.py): <base>:z a sorted set of ms slots, member "<ms>:<count>"
          and score <ms>, and <base>:h a hash, "n" the number of entries and "<tier>:<limit>"
          "lo,h" a hint (no booking fits that view in ms [lo, h)), read where a decision looks
          only (a <base>:l of an earlier version is moved there once); <base>:G<tier> a gcra
          tier, a hash: "h" "<floor µs>,<its last tag>,<bookings>,<next id>;<views>" (the
          bucket's arrival time over the emissions up to now, "0": none; the tag of the last of
          them when it alone made the floor; the view limits kept: the tier's and each share's),
          "i" per group of pages in time order the doubles id, first and last µs, bookings,
          pages, then per view the group's summary (b, g, theta: docs/explanation/limiter.md),
          but the last group's, kept in "j"; "i<id>" that group's pages the same way (id, first,
          last, bookings, summaries) but the last page's, in "k<id>" ("i" and "i<id>" of an
          earlier version hold every record, no "j", "k<id>"); "p<id>" a page of the bookings
          after now, I7 time (µs) and I6 tag each (pages and groups of about the cube root of the
          backlog), the last page's bytes going on in the string <base>:G<tier>:t (bookings
          appended at the end, APPENDed; dropped when that page is written whole); with
          nothing booked, <base>:g<tier> instead, the
          floor alone as before ("<floor>[,<last>]", one MGET and one SET, the one-timestamp
          rule); one of earlier versions with bookings ("...|" and I7 µs, I6 tag each) is moved
          into the hash once,
          <base>:f<tier>:<window start ms> a fixed tier's count in that window.
ARGV[1]   mode: "a" acquire, "p" peek (records nothing), "r" release the mail tagged ARGV[3],
          "q" the slot (ms) the mail tagged ARGV[3] holds in the first scope's log, else 0,
          "b" acquire without looking for the tag's slot first (Cluster: the coordinator looked
          in the recipient's log), "h" the answer for a mail that holds the slot ARGV[9] (Cluster: the same mail asked
          again), recording nothing
ARGV[2]   now in epoch µs, or "" to read the server's TIME (a given time adds an hour to TTLs),
          or "t<µs>": a real time given by the caller (Redis Cluster: one clock for the calls
          to every scope of one decision), without the extra hour
ARGV[3]   the mail's 48-bit tag (0: none)
ARGV[4]   max_wait in ms (> 0 books the earliest slot at most this far away)
ARGV[5]   the kind's share in (0, 1], applied to the shared scopes' limits
ARGV[6]   the time zone's offset from UTC in ms (fixed windows align to local midnight)
ARGV[7]   which scopes this mail has keys in: their 1-based indexes, one digit each ("134")
ARGV[8]   optional, acquire and peek: not_before in epoch ms (a hold's end, or on Redis Cluster
          the slot another scope found); the slot is the earliest time at or after it that
          every scope admits
ARGV[9]   optional, release: the slot (ms) to give back (Redis Cluster, scope by scope: a scope
          of fixed or gcra tiers only keeps no log to find it in); "h": the slot the mail holds
ARGV[10]  optional: calendar-month window starts (ms) around now, "N=b1,b2,..." per month count
          N of the policy's month tiers, ";"-separated (Lua has no calendar)

Reply (a, p): {allowed, booked, at_ms, wait_ms, scope, tier, remaining...}; scope and tier are
1-based indexes of the binding tier (0: none), remaining one per tier of the present scopes.
Reply (r): 1 if the mail held a slot (now given back in every scope), else 0.
Reply (a): a shared scope's key that keeps MAX_BOOKINGS entries refuses the mail: scope set,
tier 0. Data mailguard did not write (another type, a foreign value, more than MAX_BOOKINGS
entries) is refused with an error reply "MAILGUARD_CORRUPT ..." naming the scope and the key.
]]

local S = {--[[SCOPES]]}
-- the most entries one key of a shared scope keeps (MAILGUARD_MAX_BOOKINGS): a mail that would
-- add one more is refused (reply: scope set, tier 0); a key holding more is refused as corrupt
local MAX_BOOKINGS = --[[MAX]]

local mode = ARGV[1]
local fresh = mode == 'b'  -- "b": acquire without looking for the tag (Cluster: asked already)
if fresh then mode = 'a' end
local now_us, slack = 0, 0
if ARGV[2] == '' then
  local time = redis.call('TIME')
  now_us = time[1] * 1000000 + time[2]
elseif string.sub(ARGV[2], 1, 1) == 't' then
  now_us = tonumber(string.sub(ARGV[2], 2))
else
  now_us, slack = tonumber(ARGV[2]), 3600000
end
local now = math.floor(now_us / 1000)
local tag, max_wait, share, off = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local floor = math.floor

-- Calendar-month windows (ARGV[10], "N=b1,b2,...;M=..."): the window starts the caller computed
-- in its time zone for tiers of N months, around now; other fixed windows are arithmetic.
local months = {}
if ARGV[10] then
  for n, list in string.gmatch(ARGV[10], '(%d+)=([%d,]+)') do
    local b = {}
    for x in string.gmatch(list, '%d+') do b[#b + 1] = tonumber(x) end
    months[tonumber(n)] = b
  end
end

-- the start and end (ms) of tier's calendar window holding t
local function window_of(tier, t)
  local b = months[tier[5]]
  if b == nil then
    local w = tier[3]
    local start = floor((t + off) / w) * w - off
    return start, start + w
  end
  for j = #b, 1, -1 do
    if b[j] <= t then
      if j < #b then return b[j], b[j + 1] end
      return b[j], b[j] + tier[3]  -- past the last boundary given: never reached in practice
    end
  end
  return b[1] - tier[3], b[1]
end

-- the key of fixed tier ti's count in st for the window starting at start (ms), kept per tier
-- (st.counts: the counts by key, and [ti] the last start asked, [-ti] its key)
local function count_name(st, ti, start)
  local counts = st.counts
  if counts[ti] == start then return counts[-ti] end
  local name = st.key .. st.spec[4][ti][6] .. start  -- ms below 1e14 print whole (%.14g)
  counts[ti], counts[-ti] = start, name
  return name
end

-- Lua's stack holds some 8000 values: logs are packed and unpacked CHUNK records at a time
local CHUNK = 1000

-- the count records of format rec (k values each) in raw from byte pos, as one flat table
local function unpack_records(rec, k, count, raw, pos)
  local most = floor(2 * CHUNK / k)
  if count <= most then return {struct.unpack('>' .. string.rep(rec, count), raw, pos)} end
  local out, m = {}, 0
  while count > 0 do
    local c = count
    if c > most then c = most end
    local v = {struct.unpack('>' .. string.rep(rec, c), raw, pos)}
    for j = 1, c * k do out[m + j] = v[j] end
    m, pos, count = m + c * k, v[c * k + 1], count - c
  end
  return out
end

-- the flat table's count records of format rec (k values each), packed
local function pack_records(rec, k, flat, count)
  local parts, done, most = {}, 0, floor(2 * CHUNK / k)
  while done < count do
    local c = count - done
    if c > most then c = most end
    parts[#parts + 1] = struct.pack('>' .. string.rep(rec, c), unpack(flat, done * k + 1, (done + c) * k))
    done = done + c
  end
  return table.concat(parts)
end


-- an empty bucket for gcra tier ti of st (nothing booked, the bucket full); its pages' tables
-- are made when it first keeps a booking (paged)
local function new_gcra(st, ti)
  return {st = st, ti = ti, tier = st.spec[4][ti], floor = 0, last = 0, n = 0, ng = 0}
end

-- whole ms and µs printed whole
local function fmt(x) return string.format('%.0f', x) end

-- ceil(a / b) for whole numbers, exact where a / b in floating point is not
local function ceil_div(a, b)
  local q = floor(a / b)
  if q * b < a then q = q + 1 end
  return q
end

-- The usual call, decided fast: a mail admitted now (a, b) or asked about now (p), with no
-- shared sliding log among its scopes, nothing booked in any gcra tier, no not_before past now
-- and no calendar-month window. It reads what the general code below reads (one MGET, one
-- EXISTS for missing keys) and, when every tier admits the mail now, writes and answers exactly
-- as the general code would, without making that code's tables and functions (most of a
-- call's time). Anything else (data to convert or refuse, a tier that does not admit now, the
-- mail's tag in the recipient's log) goes on to the general code, with the values read.
local pre_values, pre_unseen
local fast = (mode == 'a' or mode == 'p') and ARGV[10] == nil and MAX_BOOKINGS >= 1
if fast then
  local nb = tonumber(ARGV[8] or '0')
  fast = nb ~= nil and nb <= now
end
if fast then
  local digits, names, n = ARGV[7], {nil, nil, nil, nil}, 0
  for i = 1, #digits do
    local spec = S[string.byte(digits, i) - 48]
    if spec[3] == 1 then
      if spec[2] == 1 then fast = false break end  -- a shared sliding log
      n = n + 1; names[n] = KEYS[i] .. ':l'
    end
    local tiers = spec[4]
    for ti = 1, #tiers do
      local tier = tiers[ti]
      if tier[1] == 3 then
        n = n + 1; names[n] = KEYS[i] .. tier[6]
      elseif tier[1] == 2 then
        local w = tier[3]
        n = n + 1; names[n] = KEYS[i] .. tier[6] .. (floor((now + off) / w) * w - off)
      end
    end
  end
  local values, absent, r = nil, nil, 0
  if fast then
    values = redis.call('MGET', unpack(names, 1, n))
    for i = 1, #digits do  -- the missing keys the general code asks about, in one EXISTS
      local spec = S[string.byte(digits, i) - 48]
      if spec[3] == 1 then r = r + 1 end
      for _, tier in ipairs(spec[4]) do
        if tier[1] ~= 1 then
          r = r + 1
          if not values[r] then
            absent = absent or {}
            if spec[2] == 1 then absent[#absent + 1] = names[r] end
            if tier[1] == 3 then absent[#absent + 1] = KEYS[i] .. tier[7] end
          end
        end
      end
    end
    pre_values = values
    pre_unseen = absent == nil or #absent == 0 or redis.call('EXISTS', unpack(absent)) == 0
    fast = pre_unseen
  end
  -- the recipient's log (the one log here), per name a gcra floor (0: none) or a count, and a
  -- floor's last tag; does every tier admit the mail now?
  local ts, tags, m, num, hi = {}, {}, 0, {nil, nil, nil, nil}, -floor(-now_us / 1000)
  r = 0
  for i = 1, #digits do
    if not fast then break end
    local spec = S[string.byte(digits, i) - 48]
    if spec[3] == 1 then
      r = r + 1
      local raw = values[r]
      if raw then
        if #raw < 16 or (#raw - 6) % 10 ~= 0 then fast = false break end
        local count = (#raw - 6) / 10
        local base, cut = struct.unpack('>I6', raw), now - spec[1]
        local v = unpack_records('I4I6', 2, count, raw, 7)
        for j = 1, 2 * count, 2 do
          local t = base + v[j]
          if t > cut then m = m + 1; ts[m], tags[m] = t, v[j + 1] end
        end
      end
      if m > 0 and ts[m] > hi then fast = false break end  -- its mails keep their order
    end
    local tiers = spec[4]
    for ti = 1, #tiers do
      local tier = tiers[ti]
      local kind, limit = tier[1], tier[2]
      if spec[2] == 1 then
        limit = floor(tier[2] * share + 1e-9)
        if limit < 1 then limit = 1 end
      end
      if kind == 1 then  -- a recipient's sliding tier
        if m >= limit and ts[m - limit + 1] + tier[3] > now then fast = false break end
      elseif kind == 3 then
        r = r + 1
        local raw, fl = values[r], 0
        if raw then
          local f = string.match(raw, '^(%d+),%d+$')
          if not f then f = string.match(raw, '^%d+$') end
          if not f then fast = false break end  -- bookings, of an earlier format, or foreign
          fl = tonumber(f)
          if fl <= now_us then fl = 0 end
        end
        num[r] = fl
        if fl - now_us > (tier[2] - 1) * tier[4] then fast = false break end
        if limit < tier[2] and fl > now_us then  -- a share's view: the bucket's past, slower
          local Ts = ceil_div(tier[3] * 1000, limit)
          local d = ceil_div(fl - now_us, tier[4]) * Ts
          if d > 4503599627370496 then d = 4503599627370496 end
          if d > (limit - 1) * Ts then fast = false break end
        end
      else
        r = r + 1
        local raw = values[r]
        if raw and not string.find(raw, '^%d+$') then fast = false break end
        num[r] = tonumber(raw) or 0
        if num[r] >= limit then fast = false break end
      end
    end
  end
  if fast and mode == 'a' and tag ~= 0 and not fresh then  -- the mail may hold a slot already
    for j = 1, m do if tags[j] == tag then fast = false break end end
  end
  if fast then  -- admitted now: the writes (acquire) and the room left per tier
    local reply = {1, 0, now, 0, 0, 0, nil, nil, nil, nil, nil, nil}  -- sized for six tiers
    r = 0
    for i = 1, #digits do
      local spec = S[string.byte(digits, i) - 48]
      local key = KEYS[i]
      if spec[3] == 1 then
        r = r + 1
        if mode == 'a' then
          local j = m + 1  -- now rounded up into the sorted log, after equals
          while j > 1 and ts[j - 1] > hi do
            ts[j], tags[j] = ts[j - 1], tags[j - 1]
            j = j - 1
          end
          ts[j], tags[j], m = hi, tag, m + 1
          local packed
          if m == 1 then
            packed = struct.pack('>I6I4I6', ts[1], 0, tags[1])
          else
            local flat = {}
            for k = 1, m do flat[2 * k - 1], flat[2 * k] = ts[k] - ts[1], tags[k] end
            packed = struct.pack('>I6', ts[1]) .. pack_records('I4I6', 2, flat, m)
          end
          redis.call('SET', key .. ':l', packed, 'PX', ts[m] + spec[1] - now + slack)
        end
      end
      local tiers = spec[4]
      for ti = 1, #tiers do
        local tier = tiers[ti]
        local kind, limit, left = tier[1], tier[2], 0
        if spec[2] == 1 then
          limit = floor(tier[2] * share + 1e-9)
          if limit < 1 then limit = 1 end
        end
        if kind == 1 then
          local used, low = 0, now - tier[3]
          for j = m, 1, -1 do
            if ts[j] > low then used = used + 1 else break end
          end
          left = limit - used
        elseif kind == 3 then
          r = r + 1
          local fl, T = num[r], tier[4]
          if mode == 'a' then  -- into the floor at once
            local la = 0
            if fl <= now_us then fl, la = now_us + T, tag else fl = fl + T end
            local text = fmt(fl)
            if la ~= 0 then text = text .. ',' .. fmt(la) end
            redis.call('SET', key .. tier[6], text, 'PX', -floor(-fl / 1000) - now + slack + 1)
          end
          left = tier[2]
          if fl > now_us then left = tier[2] - ceil_div(fl - now_us, T) end
          if limit < tier[2] then
            local part = limit
            if fl > now_us then
              local Ts = ceil_div(tier[3] * 1000, limit)
              local d = ceil_div(fl - now_us, T) * Ts
              if d > 4503599627370496 then d = 4503599627370496 end
              part = limit - ceil_div(d, Ts)
            end
            if part < left then left = part end
          end
        else
          r = r + 1
          local c = num[r]
          if mode == 'a' then
            local w = tier[3]
            local stop = floor((now + off) / w) * w - off + w
            if redis.call('INCR', names[r]) == 1 then
              redis.call('PEXPIRE', names[r], stop - now + slack)
            end
            c = c + 1
          end
          left = limit - c
        end
        if left < 0 then left = 0 end
        reply[#reply + 1] = left
      end
    end
    return reply
  end
end

-- the present scopes: {spec, key, ts, tags, n, gl = {}, counts = {}}, read in one MGET: each
-- log, each gcra tier's bucket, each fixed tier's count in the window holding now (others lazily)
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
  if spec[3] == 1 then  -- a shared log lives in <base>:z and :h; <base>:l is read to migrate it
    st.ts, st.tags = {}, {}
    names[r], reads[2 * r - 1], reads[2 * r], r = key .. ':l', st, 0, r + 1
    if st.shared_log then any_shared = true end
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
local values = pre_values or redis.call('MGET', unpack(names, 1, nnames))
-- the keys MGET found missing: a shared scope's (another type reads as missing too) and, in any
-- scope, the hash of a gcra tier without its string (its bookings); one EXISTS over all of them
-- answers the common case (nothing there) in one call, else each is asked as before
local absent
for r = 1, nnames do
  if not values[r] then
    local st, what = reads[2 * r - 1], reads[2 * r]
    if st.spec[2] == 1 and not (what == 0 and st.shared_log) then
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
  local legacy = what == 0 and st.shared_log  -- usually absent: its type is not asked
  if not raw and st.spec[2] == 1 and not legacy and not unseen and
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
      if f then  -- nothing booked: the floor alone (and its last tag), the one timestamp
        local g, floor_us = new_gcra(st, what), tonumber(f)
        if floor_us > now_us then g.floor, g.last = floor_us, tonumber(l) or 0 end
        g.small, st.gl[what] = true, g
      else
        local bar = string.find(raw, '|', 1, true)
        local head = bar and string.sub(raw, 1, bar - 1) or raw
        if not bar or not (string.find(head, '^%d+$') or string.find(head, '^%d+,%d+$'))
          or (#raw - bar) % 13 ~= 0 or #raw == bar then
          corrupt(st, names[r], 'is not a gcra bucket')
        end
        bounded(st, names[r], (#raw - bar) / 13)
        st.legacy = st.legacy or {}
        st.legacy[what] = raw  -- a bucket of an earlier version: moved into pages once
      end
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
    if st.shared_log then
      L.load_shared(st)
      if st.n > 0 then  -- a log of an earlier version (<base>:l, with tags): moved here once
        for j = 1, st.n do L.log_add(st, st.ts[j], 1) end
        redis.call('DEL', st.key .. ':l')
        st.ts, st.tags, st.n = {}, {}, 0
      end
    end
  end
end

-- the shared logs' counts and hints written (once per call, at its end)
local function finish()
  if any_shared then
    for _, st in ipairs(P) do if st.shared_log then L.save_shared(st) end end
  end
end

-- Paged gcra buckets (docs/explanation/limiter.md, "Long gcra backlogs"): <base>:G<tier> a hash,
-- "h" "floor,last,n,next id;view limits", "i" per page (in time order) the doubles id, first
-- and last emission (µs), count, then per view (b, g, theta), "p<id>" a page (I7 µs, I6 tag per
-- emission). A page's summary for a view (T, c): it maps the arrival time tau entering it to
-- max(tau + m·T, b) and the bound R after it to max(R + m·T, g) before it, and none of its gaps
-- admits a ms when tau >= theta (mailer/gcra_log.py's conditions, tests/test_scoped_gcra_pages.py).
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

-- the paged gcra functions (L), made by paged_lib() when a gcra tier keeps (or gets) bookings
local function paged_lib()
  -- a gcra tier's bucket {floor, last, n, ts, tags}: the emissions up to now folded into the floor
  L.read_gcra = function(raw, interval)
    local g = {floor = 0, n = 0, last = 0}  -- ts, tags and seen made when needed
    local bar = string.find(raw, '|', 1, true)
    local head = bar and string.sub(raw, 1, bar - 1) or raw
    local comma = string.find(head, ',', 1, true)
    local floor_us = tonumber(comma and string.sub(head, 1, comma - 1) or head) or 0
    local last = comma and tonumber(string.sub(head, comma + 1)) or 0
    if bar then
      g.ts, g.tags = {}, {}
      local count = (#raw - bar) / 13
      local v = unpack_records('I7I6', 2, count, raw, bar + 1)
      for j = 1, 2 * count, 2 do
        local e = v[j]
        if e <= now_us then
          if floor_us <= e then floor_us, last = e, v[j + 1] else last = 0 end
          floor_us = floor_us + interval
        else
          g.n = g.n + 1; g.ts[g.n], g.tags[g.n] = e, v[j + 1]
        end
      end
    end
    if floor_us > now_us then g.floor, g.last = floor_us, last end
    return g
  end


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
    local raw = got[1] and got[1] .. (got[2] or '')  -- k<id>: its last page's record, apart
    local per = 4 + 3 * #g.vlist
    if not raw or #raw ~= 8 * per * g.gpc[q] then corrupt(g.st, g.key, 'is not a gcra bucket') end
    G = {id = id, np = g.gpc[q], pid = {}, pfirst = {}, plast = {}, pm = {}, views = blank_views(g),
      split = got[2] ~= false}
    local v, k = unpack_records(string.rep('d', per), per, G.np, raw, 1), 0
    for j = 1, G.np do
      G.pid[j], G.pfirst[j], G.plast[j], G.pm[j] = v[k + 1], v[k + 2], v[k + 3], v[k + 4]
      k = k + 4
      for _, l in ipairs(g.vlist) do
        local W = G.views[l]
        W.b[j], W.g[j], W.th[j] = v[k + 1], v[k + 2], v[k + 3]
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
    pg = {ts = {}, tags = {}}
    for i = 1, G.pm[j] do pg.ts[i], pg.tags[i] = v[2 * i - 1], v[2 * i] end
    g.pages[id] = pg
    return pg
  end

  local function touched(g, G)
    g.gdirty[G.id], g.changed, g.version = true, true, g.version + 1
  end

  -- page j of G now holds pg: its edges and summaries, written at the end
  local function set_page(g, G, j, pg)
    if j ~= G.np then G.other = true end  -- a record before the last one changes
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
    G.np, G.other = G.np + 1, true
    set_page(g, G, j, pg)
  end

  local function remove_page(g, G, j)
    local id = G.pid[j]
    table.remove(G.pid, j); table.remove(G.pfirst, j); table.remove(G.plast, j); table.remove(G.pm, j)
    for _, V in pairs(G.views) do table.remove(V.b, j); table.remove(V.g, j); table.remove(V.th, j) end
    G.np, G.other, g.pages[id], g.dirty[id] = G.np - 1, true, nil, nil
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

  local function new_group(g)
    local G = {id = g.nextid, np = 0, pid = {}, pfirst = {}, plast = {}, pm = {}, views = blank_views(g)}
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
      G.views[l], G.other = V, true  -- every page record grows
      regroup(g, q)
    end
    g.changed = true
  end

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
    local T, ts, m = s.T, page_of(s.g, G, j).ts, G.pm[j]
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
    local _, tats, rights = page_bounds(s, G, j, tau[j], after[j])
    return tats[i], rights[i]
  end


  -- earliest ms >= t at which one more emission keeps g's view with limit l, from base (the
  -- floor, or a share's floor); t == now is an admission at now_us (gcra_log.py earliest). A
  -- group or page whose summary proves every gap closed (the arrival time entering it) or
  -- over-full (its arrival time and R at least the ones entering and leaving it) is skipped unread.
  L.gcra_first_paged = function(g, base, l, t)
    local s = view(g, l, base)
    local c, T = s.c, s.T
    if t == now then
      local tat, right = bounds(s, locate(g, now_us))
      if tat - now_us <= c and right + now_us <= c and tat + right <= c then return now end
      t = now + 1
    end
    local x = t
    local q, j, i = locate(g, x * 1000)
    while true do
      if q > g.ng then
        local lo = ceil_div(s.tau[g.ng + 1] - c, 1000)
        if lo > x then return lo end
        return x
      end
      if j == 1 and i == 0 and (s.tau[q] >= s.V.th[q] or s.tau[q] + s.after[q] + g.gn[q] * T > c) then
        local nx = ceil_div(g.glast[q], 1000)
        if nx > x then x = nx end
        if q == g.ng or x * 1000 < g.gfirst[q + 1] then q, j, i = q + 1, 1, -1 end
      else
        local G, GV, tau, after = pages_in(s, q)
        if i == 0 and (tau[j] >= GV.th[j] or tau[j] + after[j] + G.pm[j] * T > c) then
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
                if x * 1000 < e and right + x * 1000 <= c then return x end
              end
              local nx = ceil_div(e, 1000)
              if nx > x then x = nx end
            end
          end
        end
      end
      if i == -1 then i = 0 else q, j, i = locate(g, x * 1000) end  -- -1: at the next one's start
    end
  end

  -- the emissions the spans of g's view l (from base) holding at_us already use, in intervals
  L.gcra_used_paged = function(g, base, l, at_us)
    local s = view(g, l, base)
    local tat, right = bounds(s, locate(g, at_us))
    local ahead = 0
    if tat > at_us then ahead = tat - at_us end
    if right + at_us > 0 then ahead = ahead + right + at_us end
    return ceil_div(ahead, s.T)
  end


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
    if pg then pg.ts[m], pg.tags[m] = x, tg end  -- read in this call: kept as it is now
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
  local function caps(n)
    local r = floor(n ^ (1 / 3))
    local page, group = 2 * r, floor(r / 2)
    if page < 4 then page = 4 end
    if group < 2 then group = 2 end
    return 2 * page, 2 * group
  end

  -- group q is cut in two when it keeps too many pages
  local function split_group(g, q, most)
    local G = g.grp[g.gid[q]]
    if G.np <= most then return end
    local H, half = new_group(g), floor(G.np / 2)
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
    H.np, G.np, G.other = G.np - half, half, true
    regroup(g, q)
    insert_group(g, q + 1, H)
  end

  -- book one emission at x (µs, after now) for the mail tagged tg: into its page, cut when too long
  L.gcra_insert = function(g, x, tg)
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
    if m <= most_page then
      set_page(g, G, j, pg)
    else
      local half, rest = floor(m / 2), {ts = {}, tags = {}}
      for r = half + 1, m do
        rest.ts[r - half], rest.tags[r - half] = pg.ts[r], pg.tags[r]
        pg.ts[r], pg.tags[r] = nil, nil
      end
      set_page(g, G, j, pg)
      insert_page(g, G, j + 1, rest)
    end
    regroup(g, q)
    split_group(g, q, most_group)
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

  -- g's header and group index from the hash's fields h and i, refused when mailguard did not
  -- write them
  L.parse_gcra = function(g, h, idx, last)
    local f, l, n, nx, vl = string.match(h or '', '^(%d+),(%d+),(%d+),(%d+);([%d,]*)$')
    if not f or not idx then corrupt(g.st, g.key, 'is not a gcra bucket') end
    g.floor, g.last, g.n, g.nextid = tonumber(f), tonumber(l), tonumber(n), tonumber(nx)
    bounded(g.st, g.key, g.n)
    g.vlist = {}
    for v in string.gmatch(vl, '%d+') do g.vlist[#g.vlist + 1] = tonumber(v) end
    g.views = blank_views(g)
    local per = 5 + 3 * #g.vlist
    if not g.views[g.tlimit] or #idx % (8 * per) ~= 0 then corrupt(g.st, g.key, 'is not a gcra bucket') end
    g.raw_i, g.split_i = idx, last ~= nil  -- "j": the last group's record, apart (else in "i")
    idx = idx .. (last or '')
    if #idx % (8 * per) ~= 0 then corrupt(g.st, g.key, 'is not a gcra bucket') end
    g.ng, g.reshaped = #idx / (8 * per), false
    local v, k, total = unpack_records(string.rep('d', per), per, g.ng, idx, 1), 0, 0
    for q = 1, g.ng do
      g.gid[q], g.gfirst[q], g.glast[q], g.gn[q], g.gpc[q] = v[k + 1], v[k + 2], v[k + 3], v[k + 4], v[k + 5]
      k, total = k + 5, total + v[k + 4]
      for _, lv in ipairs(g.vlist) do
        local W = g.views[lv]
        W.b[q], W.g[q], W.th[q] = v[k + 1], v[k + 2], v[k + 3]
        k = k + 3
      end
    end
    if total ~= g.n then corrupt(g.st, g.key, 'is not a gcra bucket') end
    g.lastgid = g.gid[g.ng]
  end

  -- the sorted bookings of an earlier version's bucket, cut in pages and groups at once
  L.build_gcra = function(g, ts, tags, n)
    local most_page, most_group = caps(n)
    local size, per_group, q = most_page / 2, most_group / 2, 0
    local G = new_group(g)
    while q < n do
      local pg = {ts = {}, tags = {}}
      for r = 1, size do
        if q + r > n then break end
        pg.ts[r], pg.tags[r] = ts[q + r], tags[q + r]
      end
      insert_page(g, G, G.np + 1, pg)
      q = q + #pg.ts
      if G.np >= per_group or q >= n then
        insert_group(g, g.ng + 1, G)
        G = new_group(g)
      end
    end
    g.n = n
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
    if g.reshaped or not g.split_i then  -- groups added, removed or grown: the whole index
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
    for id in pairs(g.gdirty) do
      local G, gf, kk = g.grp[id], {}, 0
      local from = 1
      if G.other or not G.split then from = 1 else from = G.np end
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
      if from == 1 then args[#args + 1], args[#args + 2] = 'i' .. fmt(id), string.sub(packed, 1, cut) end
      args[#args + 1], args[#args + 2] = 'k' .. fmt(id), string.sub(packed, cut + 1)
      G.other, G.split = false, true
    end
    -- pages written whole; the last page's appended bytes APPENDed to <G key>:t (the page's
    -- bytes are "p<id>" then that key's), dropped when that page is written whole or removed
    local tail_gone = g.tgone
    for id in pairs(g.dirty) do
      local pg, pf = g.pages[id], {}
      for r = 1, #pg.ts do pf[2 * r - 1], pf[2 * r] = pg.ts[r], pg.tags[r] end
      args[#args + 1], args[#args + 2] = 'p' .. fmt(id), pack_records('I7I6', 2, pf, #pg.ts)
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
    g.raw_i, g.split_i, g.ttouched, g.reshaped = index, true, {}, false
  end
end


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
    while true do
      local x = gcra_first(g, g.floor, tier[2], t)
      local y = gcra_first(g, base, limit, x)
      if y == x then return x end
      t = y
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


-- gcra tier ti of st: its hash's header and index, a bucket of an earlier version (<base>:g<ti>)
-- moved into pages once, the past folded into the floor; nil when nothing is stored
local function load_gcra(st, ti)
  local tier = st.spec[4][ti]
  if st.gl[ti] then return st.gl[ti] end  -- nothing booked: the one timestamp, read already
  local raw = st.legacy and st.legacy[ti]
  if not raw and unseen then return nil end  -- neither its string nor its hash exists
  local key = st.key .. tier[7]
  local got = redis.pcall('HMGET', key, 'h', 'i', 'j')
  if got.err then corrupt(st, key, 'is not a hash') end
  if not got[1] and not got[2] and not raw then return nil end
  if not L.gcra_insert then paged_lib() end
  local g = L.with_pages(new_gcra(st, ti))
  if got[1] or got[2] then L.parse_gcra(g, got[1], got[2], got[3] or nil) end
  g.paged = got[1] ~= false or got[2] ~= false
  if raw then
    g.small, g.moved = true, true
    local old = L.read_gcra(raw, tier[4])
    if old.floor > g.floor then g.floor, g.last = old.floor, old.last end
    if g.ng == 0 and old.n > 0 then
      L.build_gcra(g, old.ts, old.tags, old.n)
    else
      for q = 1, old.n do L.gcra_insert(g, old.ts[q], old.tags[q]) end
    end
    g.changed = true
  end
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
    if tier[1] == 3 then
      st.gl[ti] = load_gcra(st, ti)
      if st.gl[ti] and st.gl[ti].moved then save_gcra(st, ti) end  -- moved over: written at once
    end
  end
end

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
