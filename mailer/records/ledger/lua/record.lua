--[[
mailguard ledger, record: remember a mail's final outcome and drop its claim, in one atomic
step, so that every later begin.lua answers the outcome. Mirrors MemoryLedger.record in
mailer/records/ledger/memory.py. mailer/records/ledger/redis.py loads this file.

KEYS[1]   the claim, "<namespace>:claim:{<mail id>}": deleted, whoever holds it (and the
          first_seen it keeps)
KEYS[2]   the sent marker, "<namespace>:sent:{<mail id>}": set to ARGV[1], replacing any
          earlier outcome. All keys carry the mail id as {hash tag} (one Cluster slot).
KEYS[3]   the hand-off count, "<namespace>:runs:{<mail id>}": deleted (see handoff.lua)
KEYS[4]   the mail's turn, "<namespace>:turn:{<mail id>}": deleted (see begin.lua)
ARGV[1]   the outcome as JSON (Outcome.as_dict in mailer/outcomes.py)
ARGV[2]   how long the outcome is kept, in seconds (EX): SENT_TTL, 7 days

Reply: 1.
]]

redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[2])
redis.call('DEL', KEYS[1], KEYS[3], KEYS[4])
return 1
