--[[
mailguard ledger, handoff: count one more hand-off of a redelivered copy of a mail to a worker's
pool, unless the mail finished or a run holds its claim. A message that kills the worker which
handles it (before any run could finish it) comes back again and again; this count is how the
worker recognises it and quarantines it (Ledger.handoff in mailer/records/ledger/base.py).
Mirrors MemoryLedger.handoff in mailer/records/ledger/memory.py.
mailer/records/ledger/redis.py loads this file.

KEYS[1]   the claim, "<namespace>:claim:{<mail id>}": "<lease end>:<first_seen>:<owner>" (see
          begin.lua): a run holds the mail while its lease (epoch ms, Redis's clock) has not
          ended; a claim as 0.1.0 wrote it (the owner alone) while it exists
KEYS[2]   the sent marker, "<namespace>:sent:{<mail id>}": the recorded final outcome
KEYS[3]   the hand-off count, "<namespace>:runs:{<mail id>}": an integer, deleted by every run
          that ends (unclaim.lua, record). All three keys share the mail id as {hash tag}.
ARGV[1]   how long the count is kept, in milliseconds (PX), a positive integer

Reply: the count after this hand-off (1, 2, ...); 0 when nothing was counted: the mail has a
recorded outcome, or a run holds its claim (it is running, or died holding it: the lease ends
that, and the ledger's claim already keeps a second copy from sending).
]]

if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
local claim = redis.call('GET', KEYS[1])
if claim then
  local a = string.find(claim, ':', 1, true)
  local b = a and string.find(claim, ':', a + 1, true)
  if not b then return 0 end
  if string.sub(claim, b + 1) ~= '' then
    local time = redis.call('TIME')
    local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
    if (tonumber(string.sub(claim, 1, a - 1)) or 0) > now then return 0 end
  end
end
local count = redis.call('INCR', KEYS[3])
redis.call('PEXPIRE', KEYS[3], ARGV[1])
return count
