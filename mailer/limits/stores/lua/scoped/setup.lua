-- The policy compiled in, the call's arguments (mode, now, tag, share, offset, calendar months),
-- and the helpers every part uses: windows, fixed tiers' count keys, packed records, fmt, ceil_div.
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
