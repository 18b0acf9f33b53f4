--[[
mailguard ledger, parked: a mail a run handed on is parked in the schedule (durably: called after
the schedule's park.lua answered); the first_seen its claim keeps for a first run's copies is
dropped with the claim, which nobody holds once the run gave it back (unclaim.lua). The parked
payload carries first_seen for every later run, and a first run's late copy ends at its begin
(begin.lua, ARGV[9]: its mail has an entry in the schedule). Called only where begin.lua reads
the schedule (RedisLedger.recognise_parked). Mirrors MemoryLedger.parked (which keeps it: the
memory ledger reads no schedule). mailer/records/ledger/redis.py loads this file.

KEYS[1]   the claim, "<namespace>:claim:{<mail id>}": "<lease end>:<first_seen>:<owner>" (see
          begin.lua): deleted when given back (no owner); a claim a run holds (a copy that took
          it since) and a claim as 0.1.0 wrote it (the owner alone) stay

Reply: 1 if the claim was deleted, else 0.
]]

local claim = redis.call('GET', KEYS[1])
if not claim or string.sub(claim, -1) ~= ':' then return 0 end
local a = string.find(claim, ':', 1, true)
local b = a and string.find(claim, ':', a + 1, true)
if not b or b ~= #claim then return 0 end
return redis.call('DEL', KEYS[1])
