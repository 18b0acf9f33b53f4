"""The ledger's ``begin`` with a limiter's decision riding on it: one script call before a mail
is sent (:meth:`~mailer.records.ledger.redis.RedisLedger.begin_riding`).

:func:`compose` builds one script from ``lua/begin.lua`` and a compiled decision script (the
limiter's ``sliding_log.lua`` with its policy, :func:`mailer.limits.stores.redis.compile_script`),
neither file edited: the decision becomes a Lua function, ``decide(KEYS, ARGV, redis)``, run at
begin's ``RIDE`` marker. Its key's value was read in begin's one ``MGET`` and the server's time
by begin's ``TIME``; the ``redis`` it is given answers its ``TIME`` with begin's and its first
``GET`` of that key with the value read (any other command first, ``TIME`` aside, and every
later one go to Redis). So the decision adds one command, its write: the composed call makes
``MGET``, ``TIME``, the claim's ``SET`` and the log's ``SET``.

One difference from the limiter's own call: ``MGET`` reads a key of another type as empty where
``GET`` fails, so a log key holding a hash or a list (nothing the limiter writes) is written
over instead of failing the call.

The decision is made only when it is the one the caller would ask for next anyway: the claim
taken (status 1), by a first run that is not the copy of an earlier one (the first_seen kept is
the one given) or by a later run, and every other key read with the mail's (the gates': a
suppression, a hold) empty. Otherwise nothing is decided and the caller asks the limiter on its
own, as it would without the ride. A decision that raises (foreign data in the key) is not
made either: the caller's own call meets the error and handles it.

Composed script, keys and arguments: ``KEYS[1..4]`` and ``ARGV[1..9]`` as ``begin.lua``;
``KEYS[5 .. 4+g]`` the gates' keys, ``KEYS[5+g]`` the decision's key; ``ARGV[10]`` g;
``ARGV[11..]`` the decision's arguments. Reply: begin's, the values of the gates' keys as read,
then the decision's reply (nil when none was made).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

#: Run at begin's RIDE marker; begin's locals ``read``, ``reply``, ``time`` (its TIME) and
#: ``remembered`` (a first_seen kept before the call) are in scope.
_RIDE = """\
local gates = tonumber(ARGV[10])
local at = 5 + gates -- the decision's key and its value in read
local clear = reply[1] == 1 and (ARGV[4] == '' or not remembered)
for i = 5, at - 1 do if read[i] then clear = false end end
reply[at - 2] = false -- the log's value is not sent back; the decision is, when made
if clear then
  local args = {}
  for i = 11, #ARGV do args[i - 10] = ARGV[i] end
  local ok, answer = pcall(decide, {KEYS[at]}, args, prefetched(KEYS[at], read[at], time))
  if ok then reply[at - 2] = answer end
end
"""

#: The decision's ``redis``: its TIME answered with begin's, and its first GET of ``key``
#: with ``value`` (both read already in this call).
_PREFETCHED = """\
local function prefetched(key, value, time)
  local real, armed = redis, true
  local function call(command, ...)
    if command == 'TIME' then return {time[1], time[2]} end
    if armed then
      armed = false
      local first = ...
      if command == 'GET' and first == key then return value end
    end
    return real.call(command, ...)
  end
  return setmetatable({call = call}, {__index = real})
end
"""

MARKER = "--[[RIDE]]"


@dataclass(frozen=True)
class Ride:
    """A decision to make in begin's script call: the compiled decision script's ``source``,
    its one ``key`` and its ``args`` (as the limiter's own call would send them)."""

    source: str
    key: str
    args: tuple[Any, ...]


def compose(begin: str, decision: str) -> tuple[str, str]:
    """``(source, sha1)`` of ``begin`` (``begin.lua``'s text) with ``decision`` (a compiled
    decision script) run at its RIDE marker."""
    if begin.count(MARKER) != 1:
        raise ValueError("begin.lua must hold the RIDE marker once")
    decide = f"local function decide(KEYS, ARGV, redis)\n{decision}\nend\n"
    source = _PREFETCHED + decide + begin.replace(MARKER, _RIDE)
    return source, hashlib.sha1(source.encode()).hexdigest()  # noqa: S324 - Redis's script name
