"""The ledger: who is sending a mail right now (a claim with a lease), and which mails were sent.

It is what makes one ``send_mail`` call send at most one mail although the broker may hand the
same task out twice (a Redis ``visibility_timeout`` shorter than a countdown, a worker that died
after sending, before acknowledging). A run first calls :meth:`Ledger.begin`, which in one atomic
step returns the recorded outcome if the mail was already sent, or else takes a claim on the
mail id (``SET NX`` with a lease), or reports that another run holds it. After sending, the run
records the outcome under the mail id, which also drops its claim.

Caveat: a worker that dies after the server accepted the mail but before the outcome was recorded
leaves the claim to expire; the copy that then runs sends again. SMTP gives no way to ask whether
a mail was accepted, so this window (milliseconds) is the at-least-once part of the design.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Protocol

from mailer.backends.redis_errors import REDIS_DOWN
from mailer.clock import Clock, system_clock
from mailer.errors import BackendUnavailable
from mailer.outcomes import Outcome

#: How long a recorded outcome is kept, in seconds (7 days: longer than any deferral).
SENT_TTL = 7 * 86_400

#: What :meth:`Ledger.begin` answers: the recorded outcome, True (claimed) or False (held).
Begun = Outcome | bool


class Ledger(Protocol):
    """Claims and sent-markers per mail id. Every method is one atomic step."""

    def begin(self, mail_id: str, owner: str, lease: float) -> Begun:
        """The recorded outcome of ``mail_id`` if it was sent; else claim it for ``lease``
        seconds under ``owner`` and answer True; False if another owner holds the claim."""
        ...

    def unclaim(self, mail_id: str, owner: str) -> None:
        """Give the claim back, if ``owner`` still holds it."""
        ...

    def record(self, outcome: Outcome) -> None:
        """Remember ``outcome`` as the final one of its mail id and drop the claim."""
        ...

    def recorded(self, mail_id: str) -> Outcome | None:
        """The final outcome of ``mail_id``, if one was recorded (for operators and tests)."""
        ...


class MemoryLedger:
    """The ledger inside one process (tests, the demo, a threads or solo pool)."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or system_clock
        self._lock = threading.Lock()
        self._claims: dict[str, tuple[str, float]] = {}
        self._done: dict[str, tuple[Outcome, float]] = {}

    def begin(self, mail_id: str, owner: str, lease: float) -> Begun:
        now = self._clock()
        with self._lock:
            done = self._done.get(mail_id)
            if done is not None and done[1] > now:
                return done[0]
            held = self._claims.get(mail_id)
            if held is not None and held[1] > now and held[0] != owner:
                return False
            self._claims[mail_id] = (owner, now + lease)
            return True

    def unclaim(self, mail_id: str, owner: str) -> None:
        with self._lock:
            held = self._claims.get(mail_id)
            if held is not None and held[0] == owner:
                del self._claims[mail_id]

    def record(self, outcome: Outcome) -> None:
        now = self._clock()
        with self._lock:
            self._done[outcome.mail_id] = (outcome, now + SENT_TTL)
            self._claims.pop(outcome.mail_id, None)
            if len(self._done) > 1024:  # forget expired outcomes now and then
                for key in [k for k, (_, exp) in self._done.items() if exp <= now]:
                    del self._done[key]

    def recorded(self, mail_id: str) -> Outcome | None:
        with self._lock:
            done = self._done.get(mail_id)
        return done[0] if done is not None and done[1] > self._clock() else None


# KEYS[1] claim key, KEYS[2] sent key (one hash tag: one Cluster slot); ARGV[1] owner,
# ARGV[2] lease in ms. Returns the recorded outcome (JSON), 1 (claimed) or 0 (held by another).
_BEGIN = """
local sent = redis.call('GET', KEYS[2])
if sent then return sent end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""
# KEYS[1] claim key; ARGV[1] owner. Deletes the claim only if the owner still holds it.
_UNCLAIM = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
# KEYS[1] claim key, KEYS[2] sent key; ARGV[1] outcome JSON, ARGV[2] TTL in seconds.
_RECORD = """
redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[2])
redis.call('DEL', KEYS[1])
return 1
"""


class RedisLedger:
    """The ledger in Redis: ``<ns>:claim:{id}`` (owner, PX lease) and ``<ns>:sent:{id}`` (JSON).

    One round trip per method. Both keys of a mail share its id as hash tag (Cluster-safe).
    """

    def __init__(self, client: Any, url: str, namespace: str = "mailguard") -> None:
        self._client = client
        self._url = url
        self._ns = namespace
        self._begin = client.register_script(_BEGIN)
        self._unclaim = client.register_script(_UNCLAIM)
        self._record = client.register_script(_RECORD)

    def _keys(self, mail_id: str) -> list[str]:
        return [f"{self._ns}:claim:{{{mail_id}}}", f"{self._ns}:sent:{{{mail_id}}}"]

    def begin(self, mail_id: str, owner: str, lease: float) -> Begun:
        try:
            answer = self._begin(keys=self._keys(mail_id), args=[owner, int(lease * 1000)])
        except REDIS_DOWN as exc:
            raise BackendUnavailable(self._url, exc, backend="ledger") from exc
        if isinstance(answer, bytes | str):
            return Outcome.from_dict(json.loads(answer))
        return bool(answer)

    def unclaim(self, mail_id: str, owner: str) -> None:
        try:
            self._unclaim(keys=self._keys(mail_id)[:1], args=[owner])
        except REDIS_DOWN as exc:
            raise BackendUnavailable(self._url, exc, backend="ledger") from exc

    def record(self, outcome: Outcome) -> None:
        try:
            self._record(
                keys=self._keys(outcome.mail_id), args=[json.dumps(outcome.as_dict()), SENT_TTL]
            )
        except REDIS_DOWN as exc:
            raise BackendUnavailable(self._url, exc, backend="ledger") from exc

    def recorded(self, mail_id: str) -> Outcome | None:
        try:
            raw = self._client.get(self._keys(mail_id)[1])
        except REDIS_DOWN as exc:
            raise BackendUnavailable(self._url, exc, backend="ledger") from exc
        return None if raw is None else Outcome.from_dict(json.loads(raw))
