"""The ledger: who is sending a mail right now (a claim with a lease), and which mails were sent.

It is what makes one ``send_mail`` call send at most one mail although the broker may hand the
same task out twice (a Redis ``visibility_timeout`` shorter than a countdown, a worker that died
after sending, before acknowledging). Before sending, a worker claims the mail id (``SET NX`` with
a lease); after sending it records the outcome under the mail id. A second copy finds the
outcome and sends nothing, or finds the claim and waits for it to resolve.

Caveat: a worker that dies after the server accepted the mail but before the outcome was recorded
leaves the claim to expire; the copy that then runs sends again. SMTP gives no way to ask whether
a mail was accepted, so this window (milliseconds) is the at-least-once part of the design.
"""

from __future__ import annotations

import json
import threading
from typing import Protocol

import redis
import redis.exceptions

from mailer.clock import Clock, system_clock
from mailer.errors import BackendUnavailable
from mailer.outcomes import Outcome

#: Errors that mean the ledger's Redis cannot answer now (as for the limiter's): down, hanging past
#: the socket timeout, a read-only replica after a failover, a cluster without quorum.
_UNAVAILABLE = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.ClusterError,
)

#: How long a recorded outcome is kept, in seconds (7 days: longer than any deferral).
SENT_TTL = 7 * 86_400


class Ledger(Protocol):
    """Claims and sent-markers per mail id. Every method is atomic."""

    def claim(self, mail_id: str, owner: str, lease: float) -> bool:
        """Take the right to send ``mail_id`` for ``lease`` seconds; False if another holds it."""
        ...

    def unclaim(self, mail_id: str, owner: str) -> None:
        """Give the claim back, if ``owner`` still holds it."""
        ...

    def record(self, outcome: Outcome) -> None:
        """Remember ``outcome`` as the final one of its mail id and drop the claim."""
        ...

    def recorded(self, mail_id: str) -> Outcome | None:
        """The final outcome of ``mail_id``, if one was recorded."""
        ...


class MemoryLedger:
    """The ledger inside one process (tests, the demo, a threads or solo pool)."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or system_clock
        self._lock = threading.Lock()
        self._claims: dict[str, tuple[str, float]] = {}
        self._done: dict[str, tuple[Outcome, float]] = {}

    def claim(self, mail_id: str, owner: str, lease: float) -> bool:
        now = self._clock()
        with self._lock:
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


_UNCLAIM = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisLedger:
    """The ledger in Redis: ``<ns>:claim:{id}`` (``SET NX PX``) and ``<ns>:sent:{id}`` (JSON)."""

    def __init__(self, client: redis.Redis, url: str, namespace: str = "mailguard") -> None:
        self._client = client
        self._url = url
        self._ns = namespace
        self._unclaim = client.register_script(_UNCLAIM)

    def _keys(self, mail_id: str) -> tuple[str, str]:
        return f"{self._ns}:claim:{{{mail_id}}}", f"{self._ns}:sent:{{{mail_id}}}"

    def claim(self, mail_id: str, owner: str, lease: float) -> bool:
        claim_key, _ = self._keys(mail_id)
        try:
            return bool(self._client.set(claim_key, owner, nx=True, px=int(lease * 1000)))
        except _UNAVAILABLE as exc:
            raise BackendUnavailable(self._url, exc) from exc

    def unclaim(self, mail_id: str, owner: str) -> None:
        claim_key, _ = self._keys(mail_id)
        try:
            self._unclaim(keys=[claim_key], args=[owner])
        except _UNAVAILABLE as exc:
            raise BackendUnavailable(self._url, exc) from exc

    def record(self, outcome: Outcome) -> None:
        claim_key, sent_key = self._keys(outcome.mail_id)
        try:
            pipe = self._client.pipeline(transaction=True)
            pipe.set(sent_key, json.dumps(outcome.as_dict()), ex=SENT_TTL)
            pipe.delete(claim_key)
            pipe.execute()
        except _UNAVAILABLE as exc:
            raise BackendUnavailable(self._url, exc) from exc

    def recorded(self, mail_id: str) -> Outcome | None:
        _, sent_key = self._keys(mail_id)
        try:
            raw = self._client.get(sent_key)
        except _UNAVAILABLE as exc:
            raise BackendUnavailable(self._url, exc) from exc
        return None if raw is None else Outcome.from_dict(json.loads(raw))
