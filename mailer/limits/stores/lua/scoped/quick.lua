-- The usual call, decided fast: a mail admitted now (a, b) or asked about now (p), with no
-- shared sliding log among its scopes, nothing booked in any gcra tier, no not_before past now
-- and no calendar-month window. It reads what the general code below reads (one MGET, one
-- EXISTS for missing keys) and, when every tier admits the mail now, writes and answers exactly
-- as the general code would, without making that code's tables and functions (most of a
-- call's time). Anything else (data to refuse, a tier that does not admit now, the
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
          if not f then fast = false break end  -- foreign: the general code refuses it
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
