--[[
mailguard holds, witness: count the distinct recipients whose mails failed with a temporary
error within a window, in one atomic step, so that every worker adds to one count and exactly
one of them sees it reach the threshold. Mirrors MemoryHoldStore.witness in
mailer/records/holds/memory.py; the contract tests/records/test_contract_holds.py runs both.
mailer/records/holds/redis.py loads this file.

KEYS[1]   the evidence, "<namespace>:hold:evidence": a sorted set of recipients' keyed hashes
          (never an address) scored by the time of their last failure, with a PX expiry of one
          window
ARGV[1]   now, epoch seconds (a float, the caller's clock)
ARGV[2]   window, seconds (a float > 0)
ARGV[3]   count: the threshold (an integer >= 1)
ARGV[4]   member: the failing recipient's keyed hash

Reply: the number of distinct recipients that failed within (now - window, now]. When it
reaches ARGV[3] the set is deleted (the caller starts a hold; the count starts over).
]]

local now, window, count = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], now, ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local distinct = redis.call('ZCARD', KEYS[1])
if distinct >= count then
  redis.call('DEL', KEYS[1])
else
  redis.call('PEXPIRE', KEYS[1], math.max(math.ceil(window * 1000), 1))
end
return distinct
