--[[
mailguard ledger, begin: in one atomic step, the recorded outcome of a mail if it was sent, else
a claim on it for the calling run. Mirrors MemoryLedger.begin in
mailer/records/ledger/memory.py; the contract tests/records/test_contract_ledger.py checks both agree.
mailer/records/ledger/redis.py loads this file.

KEYS[1]   the claim, "<namespace>:claim:{<mail id>}": a string holding the owner (the run that
          claimed the mail), with a PX expiry at the end of the lease
KEYS[2]   the sent marker, "<namespace>:sent:{<mail id>}": a string holding the recorded outcome
          as JSON (written by record.lua, with an EX expiry of SENT_TTL seconds)
KEYS[3]   the first run's first_seen, "<namespace>:seen:{<mail id>}": a string holding epoch
          seconds (the limiter's clock) with an EX expiry of ARGV[5]; deleted by record.lua
          All keys carry the mail id as {hash tag}, so they share one Redis Cluster slot.
ARGV[1]   owner: the claiming run's id (any string)
ARGV[2]   lease in milliseconds, a positive integer: how long the claim holds unless renewed,
          given back (unclaim.lua) or dropped by a recorded outcome (record.lua)
ARGV[3]   takeover: the owner of an earlier run of this mail that lost contact with the ledger
          while claiming ("" for none); a claim it holds is taken over by ARGV[1] at once
ARGV[4]   first_seen: epoch seconds as text, a first run's ("" for none): with the claim taken,
          set in KEYS[3] unless a value is there already (an earlier first run's)
ARGV[5]   how long KEYS[3] is kept, in seconds (EX), a positive integer
KEYS[4]   the mail's turn, "<namespace>:turn:{<mail id>}": "<number>:<parent>" of the latest
          run that claimed it once the mail was handed on (turn 1 or later: a first run's turn 0
          is read, never written), with an EX expiry of ARGV[8]; deleted by record.lua
ARGV[6]   the calling run's turn number as text ("" for unknown: KEYS[4] neither read nor set)
ARGV[7]   the calling run's parent: the run that published it ("" for a first run)
ARGV[8]   how long KEYS[4] is kept, in seconds (EX), a positive integer

Reply: the recorded outcome's JSON (bulk string) if the mail finished (sent, dropped or
failed); else {-1, number kept} when the caller is a stale copy (nothing changes): KEYS[4]
holds a higher number, or the same number with another parent; else 1 when the claim is now the caller's (newly taken, taken over from ARGV[3], or
the caller already held it: its lease starts again from now), or with ARGV[4] given, the
array {1, first_seen remembered in KEYS[3]}; 0 when another owner holds an unexpired claim
(nothing changes).
]]

local number = tonumber(ARGV[6])
local kept, stale = nil, false
if number then
  local turn = redis.call('GET', KEYS[4])
  local at = turn and string.find(turn, ':', 1, true)
  kept = at and tonumber(string.sub(turn, 1, at - 1))
  if kept then
    stale = number < kept or (number == kept and string.sub(turn, at + 1) ~= ARGV[7])
  end
end

local function claimed()
  if number and number > 0 and (not kept or number > kept) then
    redis.call('SET', KEYS[4], ARGV[6] .. ':' .. ARGV[7], 'EX', ARGV[8])
  end
  if ARGV[4] == '' then return 1 end
  redis.call('SET', KEYS[3], ARGV[4], 'NX', 'EX', ARGV[5])
  return {1, redis.call('GET', KEYS[3])}
end

local sent = redis.call('GET', KEYS[2])
if sent then return sent end
if stale then return {-1, kept} end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return claimed() end
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] or (ARGV[3] ~= '' and holder == ARGV[3]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return claimed()
end
return 0
