"""The ledger in Redis: one ``EVALSHA`` of a script in ``lua/`` per method (``GET`` for
:meth:`RedisLedger.recorded`).

Keys, both with the mail id as ``{hash tag}`` so that one mail's keys share a Cluster slot:

- ``<ns>:claim:{<mail id>}``: the owner of the claim, expiring after the lease (``PX``)
- ``<ns>:sent:{<mail id>}``: the recorded outcome as JSON, expiring after
  :data:`~mailer.records.ledger.base.SENT_TTL` (``EX``)
- ``<ns>:runs:{<mail id>}``: how many redelivered copies were handed to a pool since a run
  last ended (``handoff.lua``), expiring after :data:`~mailer.records.ledger.base.RUNS_TTL`
- ``<ns>:seen:{<mail id>}``: when the guard first saw the mail (epoch seconds, as text),
  written by the first run's ``begin`` for its copies (``begin.lua``), deleted with the
  recorded outcome, expiring after :data:`~mailer.records.ledger.base.FIRST_SEEN_TTL`
- ``<ns>:turn:{<mail id>}``: the turn of the latest run that claimed the mail
  (``<number>:<parent>``, ``begin.lua``), so that a stale copy ends at its ``begin``; deleted
  with the recorded outcome, expiring after :data:`~mailer.records.ledger.base.TURN_TTL`

And one key for all mails: ``<ns>:dead-letters``, a sorted set of quarantined outcomes (JSON)
by time, the newest :data:`~mailer.records.ledger.base.MAX_DEAD_LETTERS`.

Expiry is Redis's own clock: the ledger takes no clock. The scripts' headers name every key and
argument.
"""

from __future__ import annotations

import json
from typing import Any

from mailer.outcomes import Outcome
from mailer.records.ledger.base import (
    FIRST_SEEN_TTL,
    MAX_DEAD_LETTERS,
    RUNS_TTL,
    SENT_TTL,
    TURN_TTL,
    Begun,
    Claimed,
    Superseded,
    Turn,
)
from mailer.storage import RedisStore, lua_source

#: The scripts' texts, read once from the package files.
BEGIN_SCRIPT = lua_source("mailer.records.ledger", "begin")
UNCLAIM_SCRIPT = lua_source("mailer.records.ledger", "unclaim")
RECORD_SCRIPT = lua_source("mailer.records.ledger", "record")
HANDOFF_SCRIPT = lua_source("mailer.records.ledger", "handoff")


class RedisLedger:
    """The ledger in Redis: ``<ns>:claim:{id}`` (owner, PX lease) and ``<ns>:sent:{id}`` (JSON).

    One round trip per method. Both keys of a mail share its id as hash tag (Cluster-safe).
    Raises :class:`mailer.errors.BackendUnavailable` with ``backend="ledger"`` when the server
    cannot be reached.
    """

    def __init__(self, client: Any, url: str, namespace: str = "mailguard") -> None:
        self._redis = RedisStore(client, url, backend="ledger")
        self._ns = namespace
        self._begin = self._redis.script(BEGIN_SCRIPT)
        self._unclaim = self._redis.script(UNCLAIM_SCRIPT)
        self._record = self._redis.script(RECORD_SCRIPT)
        self._handoff = self._redis.script(HANDOFF_SCRIPT)
        self._dead = f"{namespace}:dead-letters"

    @property
    def client(self) -> Any:
        """The redis-py client (other stores on the ledger's Redis share it)."""
        return self._redis.client

    def _keys(self, mail_id: str) -> list[str]:
        """The claim, the sent marker, the hand-off count, the first run's ``first_seen`` and
        the turn of ``mail_id`` (one slot)."""
        tag = f"{{{mail_id}}}"
        ns = self._ns
        names = ("claim", "sent", "runs", "seen", "turn")
        return [f"{ns}:{name}:{tag}" for name in names]

    def begin(
        self,
        mail_id: str,
        owner: str,
        lease: float,
        *,
        takeover: str | None = None,
        first_seen: float | None = None,
        turn: Turn | None = None,
    ) -> Begun:
        claim, sent, _, seen, kept = self._keys(mail_id)
        remember = "" if first_seen is None else repr(float(first_seen))
        number, parent = ("", "") if turn is None else (str(int(turn.number)), turn.parent)
        args = [owner, int(lease * 1000), takeover or "", remember, FIRST_SEEN_TTL]
        args += [number, parent, TURN_TTL]
        answer = self._begin([claim, sent, seen, kept], args)
        if isinstance(answer, bytes | str):
            return Outcome.from_dict(json.loads(answer))
        if isinstance(answer, list):
            if int(answer[0]) == -1:
                return Superseded(int(answer[1]))
            return Claimed(float(answer[1]))
        return bool(answer)

    def unclaim(self, mail_id: str, owner: str) -> None:
        claim, _, runs, _, _ = self._keys(mail_id)
        self._unclaim([claim, runs], [owner])

    def record(self, outcome: Outcome) -> None:
        self._record(self._keys(outcome.mail_id), [json.dumps(outcome.as_dict()), SENT_TTL])

    def record_command(self, outcome: Outcome) -> tuple[str, list[str], list[Any], Any]:
        """:meth:`record` as ``(script, keys, args, client)``, for a caller that sends it in
        one pipeline with commands of its own on that client (the sender reputation's count
        rides on it: :mod:`mailer.guard.gates.bulk`)."""
        args = [json.dumps(outcome.as_dict()), SENT_TTL]
        return RECORD_SCRIPT, self._keys(outcome.mail_id), args, self._redis.client

    def handoff(self, mail_id: str) -> int:
        return int(self._handoff(self._keys(mail_id)[:3], [RUNS_TTL * 1000]))

    def quarantine(self, outcome: Outcome) -> None:
        self.record(outcome)
        entry = json.dumps(outcome.as_dict())
        # Another slot than the mail's keys (Cluster): a second call, after the record.
        pipe = self._redis.client.pipeline(transaction=False)
        pipe.zadd(self._dead, {entry: outcome.decided_at or 0.0})
        pipe.zremrangebyrank(self._dead, 0, -MAX_DEAD_LETTERS - 1)
        self._redis.call(pipe.execute)

    def dead_letters(self, limit: int = 100) -> list[Outcome]:
        raw = self._redis.call(self._redis.client.zrevrange, self._dead, 0, max(limit, 1) - 1)
        return [Outcome.from_dict(json.loads(item)) for item in raw]

    def recorded(self, mail_id: str) -> Outcome | None:
        raw = self._redis.call(self._redis.client.get, self._keys(mail_id)[1])
        return None if raw is None else Outcome.from_dict(json.loads(raw))
