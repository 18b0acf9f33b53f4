--[[
mailguard ledger, unclaim: give a claim back, but only if the caller still holds it (a claim
whose lease ran out may have been taken by another run since). Mirrors MemoryLedger.unclaim in
mailer/records/ledger/memory.py. mailer/records/ledger/redis.py loads this file.

KEYS[1]   the claim, "<namespace>:claim:{<mail id>}": "<lease end>:<first_seen>:<owner>" (see
          begin.lua; 0.1.0's: the owner alone). Given back, the first_seen it keeps
          stays, with no owner ("0:<first_seen>:", its expiry kept); with none kept, deleted.
KEYS[2]   the hand-off count, "<namespace>:runs:{<mail id>}": deleted (a run ended), whoever
          holds the claim (see handoff.lua). Both keys share the mail id as {hash tag}.
ARGV[1]   owner: the id of the run giving the claim back

Reply: 1 if the claim was given back, 0 if it was absent or held by another owner.
]]

redis.call('DEL', KEYS[2])
local claim = redis.call('GET', KEYS[1])
if not claim then return 0 end
local a = string.find(claim, ':', 1, true)
local b = a and string.find(claim, ':', a + 1, true)
if not b then -- a claim as 0.1.0 wrote it (the owner alone)
  if claim == ARGV[1] then return redis.call('DEL', KEYS[1]) end
  return 0
end
if string.sub(claim, b + 1) ~= ARGV[1] then return 0 end
if b == a + 1 then return redis.call('DEL', KEYS[1]) end
redis.call('SET', KEYS[1], '0:' .. string.sub(claim, a + 1, b - 1) .. ':', 'KEEPTTL')
return 1
