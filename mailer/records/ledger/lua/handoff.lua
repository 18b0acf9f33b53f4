--[[
mailguard ledger, handoff: count one more hand-off of a redelivered copy of a mail to a worker's
pool, unless the mail finished or a run holds its claim. A message that kills the worker which
handles it (before any run could finish it) comes back again and again; this count is how the
worker recognises it and quarantines it (Ledger.handoff in mailer/records/ledger/base.py).
Mirrors MemoryLedger.handoff in mailer/records/ledger/memory.py.
mailer/records/ledger/redis.py loads this file.

KEYS[1]   the claim, "<namespace>:claim:{<mail id>}": a run holds the mail while it exists
KEYS[2]   the sent marker, "<namespace>:sent:{<mail id>}": the recorded final outcome
KEYS[3]   the hand-off count, "<namespace>:runs:{<mail id>}": an integer, deleted by every run
          that ends (unclaim.lua, record.lua). All three keys share the mail id as {hash tag}.
ARGV[1]   how long the count is kept, in milliseconds (PX), a positive integer

Reply: the count after this hand-off (1, 2, ...); 0 when nothing was counted: the mail has a
recorded outcome, or a run holds its claim (it is running, or died holding it: the lease ends
that, and the ledger's claim already keeps a second copy from sending).
]]

if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local count = redis.call('INCR', KEYS[3])
redis.call('PEXPIRE', KEYS[3], ARGV[1])
return count
