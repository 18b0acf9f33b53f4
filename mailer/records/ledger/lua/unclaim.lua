--[[
mailguard ledger, unclaim: give a claim back, but only if the caller still holds it (a claim
whose lease ran out may have been taken by another run since). Mirrors MemoryLedger.unclaim in
mailer/records/ledger/memory.py. mailer/records/ledger/redis.py loads this file.

KEYS[1]   the claim, "<namespace>:claim:{<mail id>}": a string holding the owner, with a PX
          expiry at the end of the lease (set by begin.lua)
KEYS[2]   the hand-off count, "<namespace>:runs:{<mail id>}": deleted (a run ended), whoever
          holds the claim (see handoff.lua). Both keys share the mail id as {hash tag}.
ARGV[1]   owner: the id of the run giving the claim back

Reply: 1 if the claim was deleted, 0 if it was absent, expired or held by another owner.
]]

redis.call('DEL', KEYS[2])
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
