--[[
mailguard ledger, begin: in one atomic step, the recorded outcome of a mail if it was sent, else
a claim on it for the calling run. Mirrors MemoryLedger.begin in
mailer/records/ledger/memory.py; the contract tests/records/test_contract_ledger.py checks both agree.
mailer/records/ledger/redis.py loads this file, and composes it with a limiter's decision
(mailer/records/ledger/ride.py, at the RIDE marker below: begin's locals read, reply, time and
remembered are in scope there).

Everything it reads is read in one MGET: the mail's three keys, and KEYS[5] onwards, which the
caller reads in the same step (the guard's gates: suppression, holds) and gets back as read.
Commands, a first run claiming: MGET, TIME, SET (and HEXISTS with ARGV[9] given: a copy).

KEYS[1]   the claim, "<namespace>:claim:{<mail id>}": "<lease end>:<first_seen>:<owner>", the
          end of the owner's lease in epoch ms (Redis's clock; the claim is held until then),
          the first run's first_seen ("" for none: epoch seconds on the limiter's clock, kept
          for the first run's copies) and the owner (the run that claimed the mail; "" once it
          gave the claim back, unclaim.lua). Expires with the lease (PX), or with first_seen
          kept, after max(lease, ARGV[5] seconds) from the latest claim; deleted by record.
          A claim as 0.1.0 wrote it (the owner alone, expiring with its lease) is read too.
KEYS[2]   the sent marker, "<namespace>:sent:{<mail id>}": a string holding the recorded outcome
          as JSON (written by record, with an EX expiry of SENT_TTL seconds)
KEYS[3]   the mail's turn, "<namespace>:turn:{<mail id>}": "<number>:<parent>" of the latest
          run that claimed it once the mail was handed on (turn 1 or later: a first run's turn 0
          is read, never written), with an EX expiry of ARGV[8]; deleted by record
          These three keys carry the mail id as {hash tag}, so they share one Redis Cluster slot.
KEYS[4]   with ARGV[9]: the schedule's payloads hash, "<namespace>:{schedule:<queue>}:payloads"
          (mailer/records/schedule/shard.py), read with HEXISTS, never written (only where it
          shares a server with the mail's keys: not on Cluster); else KEYS[1] again, unread.
          Its MGET value (a hash's: nil) is not used.
KEYS[5..] optional: other keys read in the same MGET, their values returned as read (only where
          they share a server with the mail's keys: not on Cluster)
ARGV[1]   owner: the claiming run's id (any non-empty string)
ARGV[2]   lease in milliseconds, a positive integer: how long the claim holds unless renewed,
          given back (unclaim.lua) or dropped by a recorded outcome (record)
ARGV[3]   takeover: the owner of an earlier run of this mail that lost contact with the ledger
          while claiming ("" for none); a claim it holds is taken over by ARGV[1] at once
ARGV[4]   first_seen: epoch seconds as text, a first run's ("" for none): with the claim taken,
          kept in KEYS[1] unless one is kept already (an earlier first run's)
ARGV[5]   how long a first_seen is kept, in seconds, a positive integer
ARGV[6]   the calling run's turn number as text ("" for unknown: KEYS[3] neither checked nor set)
ARGV[7]   the calling run's parent: the run that published it ("" for a first run)
ARGV[8]   how long KEYS[3] is kept, in seconds (EX), a positive integer
ARGV[9]   the mail's field in KEYS[4] ("" for none: nothing read there; given only for a first
          message the broker delivered again, Turn.copy). A run of turn 0 (a
          first message: ARGV[6] "0") whose mail has an entry in the schedule (parked, promoting
          or watched) is a stale copy: its first run handed the mail on and parked or watched
          it (the payloads written there carry turn 1 or later, and the claim with first_seen
          is dropped once the mail is parked: Ledger.parked)

Reply: an array {status, value, then the values at KEYS[5..] as read}. status 2: the mail
finished (sent, dropped or failed), value its recorded outcome's JSON; -1: the caller is a stale
copy (nothing changes), value the turn number kept (KEYS[3] holds a higher number, or the same
number with another parent; 1 for a first message whose mail is in the schedule); 1: the claim is now the caller's (newly taken, taken over from
ARGV[3], or the caller already held it: its lease starts again from now), value the first_seen
kept with ARGV[4] given, else nil; 0: another owner holds an unexpired claim (nothing
changes), value nil.
]]

local read = redis.call('MGET', unpack(KEYS))
local claim, sent, turn = read[1], read[2], read[3]
local reply = {0, false}
for i = 5, #KEYS do reply[i - 2] = read[i] end
if sent then
  reply[1], reply[2] = 2, sent
  return reply
end
local number = tonumber(ARGV[6])
local kept = nil
if number and turn then
  local at = string.find(turn, ':', 1, true)
  kept = at and tonumber(string.sub(turn, 1, at - 1))
  if kept and (number < kept or (number == kept and string.sub(turn, at + 1) ~= ARGV[7])) then
    reply[1], reply[2] = -1, kept
    return reply
  end
end
if number == 0 and ARGV[9] ~= '' and redis.call('HEXISTS', KEYS[4], ARGV[9]) == 1 then
  reply[1], reply[2] = -1, 1
  return reply
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local remembered = nil -- the first_seen the claim keeps
if claim then
  local a = string.find(claim, ':', 1, true)
  local b = a and string.find(claim, ':', a + 1, true)
  local holder, until_ms = claim, now + 1 -- a 0.1.0 claim (the owner alone): held until it expires
  if b then
    holder, until_ms = string.sub(claim, b + 1), tonumber(string.sub(claim, 1, a - 1)) or 0
    if b > a + 1 then remembered = string.sub(claim, a + 1, b - 1) end
  end
  if holder ~= '' and until_ms > now and holder ~= ARGV[1] and
      (ARGV[3] == '' or holder ~= ARGV[3]) then
    return reply
  end
end
local first, ttl = remembered, tonumber(ARGV[2])
if not first and ARGV[4] ~= '' then first = ARGV[4] end
if first and ttl < ARGV[5] * 1000 then ttl = ARGV[5] * 1000 end
redis.call('SET', KEYS[1], (now + ARGV[2]) .. ':' .. (first or '') .. ':' .. ARGV[1], 'PX', ttl)
if number and number > 0 and (not kept or number > kept) then
  redis.call('SET', KEYS[3], ARGV[6] .. ':' .. ARGV[7], 'EX', ARGV[8])
end
reply[1] = 1
if ARGV[4] ~= '' then reply[2] = first end
--[[RIDE]]
return reply
