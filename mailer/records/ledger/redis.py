"""The ledger in Redis: one ``EVALSHA`` of a script in ``lua/`` per method (``GET`` for
:meth:`RedisLedger.recorded`; :meth:`RedisLedger.record` is one pipeline of ``SET`` and ``DEL``).
:meth:`RedisLedger.begin_riding` reads other keys in begin's one ``MGET`` and can carry a
limiter's decision in the same call (:mod:`mailer.records.ledger.ride`).

Keys, both with the mail id as ``{hash tag}`` so that one mail's keys share a Cluster slot:

- ``<ns>:claim:{<mail id>}``: ``<lease end>:<first_seen>:<owner>``: the owner of the claim,
  held until the lease's end (epoch ms, Redis's ``TIME``), and the first run's ``first_seen``
  (epoch seconds, as text; "" for none), kept for its copies (``begin.lua``). Expires with the
  lease (``PX``), or with a ``first_seen`` kept, after
  :data:`~mailer.records.ledger.base.FIRST_SEEN_TTL` from the latest claim; a claim given back
  keeps its ``first_seen`` with no owner (``unclaim.lua``); deleted with the recorded outcome.
  One key, one ``SET`` for a first run's claim and its ``first_seen``.
- ``<ns>:sent:{<mail id>}``: the recorded outcome as JSON, expiring after
  :data:`~mailer.records.ledger.base.SENT_TTL` (``EX``)
- ``<ns>:runs:{<mail id>}``: how many redelivered copies were handed to a pool since a run
  last ended (``handoff.lua``), expiring after :data:`~mailer.records.ledger.base.RUNS_TTL`
- ``<ns>:turn:{<mail id>}``: the turn of the latest run that claimed the mail
  (``<number>:<parent>``, ``begin.lua``), so that a stale copy ends at its ``begin``; deleted
  with the recorded outcome, expiring after :data:`~mailer.records.ledger.base.TURN_TTL`

A first run's claim (with its ``first_seen``) is deleted once the mail is parked
(:meth:`RedisLedger.parked`): the parked payload carries ``first_seen``, and a late copy of the
first message (one the broker delivered again: :attr:`~mailer.records.ledger.base.Turn.copy`)
ends at its ``begin``, which reads the schedule's payloads hash
(:meth:`RedisLedger.recognise_parked`; not on Cluster, where the claim stays for its
``FIRST_SEEN_TTL``). So a parked mail leaves nothing in the ledger in its first turn.

And one key for all mails: ``<ns>:dead-letters``, a sorted set of quarantined outcomes (JSON)
by time, the newest :data:`~mailer.records.ledger.base.MAX_DEAD_LETTERS`.

Expiry is Redis's own clock: the ledger takes no clock. The scripts' headers name every key and
argument.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
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
from mailer.records.ledger.ride import Ride, compose
from mailer.storage import RedisStore, Script, is_cluster, lua_source

#: The scripts' texts, read once from the package files.
BEGIN_SCRIPT = lua_source("mailer.records.ledger", "begin")
UNCLAIM_SCRIPT = lua_source("mailer.records.ledger", "unclaim")
RECORD_SCRIPT = lua_source("mailer.records.ledger", "record")
HANDOFF_SCRIPT = lua_source("mailer.records.ledger", "handoff")
PARKED_SCRIPT = lua_source("mailer.records.ledger", "parked")


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
        self._rides: dict[str, Script] = {}
        self._handoff = self._redis.script(HANDOFF_SCRIPT)
        self._parked = self._redis.script(PARKED_SCRIPT)
        self._dead = f"{namespace}:dead-letters"
        #: The schedule's payloads hash and a mail id's field in it (:meth:`recognise_parked`).
        self._schedule: tuple[str, Callable[[str], str | bytes]] | None = None

    def recognise_parked(
        self, payloads_key: str, field: Callable[[str], str | bytes] = str
    ) -> bool:
        """Have :meth:`begin` end a first message (turn 0) whose mail has an entry in the
        schedule's ``payloads_key`` hash (a stale copy: its first run parked or watched the
        mail), and :meth:`parked` drop a parked mail's claim with its ``first_seen``.
        ``field``: a mail id's field in that hash. Only where that hash shares the server
        (not on Cluster: it lives in another slot); False, nothing changed, elsewhere."""
        if not self.reads_together:
            return False
        self._schedule = (payloads_key, field)
        return True

    def parked(self, mail_id: str) -> bool:
        """``mail_id`` is parked (the schedule holds its payload): its claim, given back by
        the run that parked it, goes with the first run's ``first_seen`` (the payload carries
        it). Only once :meth:`recognise_parked` is in force (a first run's late copy then ends
        at its begin); else nothing (False). True when a claim was deleted."""
        if self._schedule is None:
            return False
        return bool(self._parked(self._keys(mail_id)[:1], []))

    @property
    def reads_together(self) -> bool:
        """Whether :meth:`begin_riding` may read keys other than the mail's (not on Cluster:
        they live in other slots)."""
        return not is_cluster(self._redis.url)

    @property
    def client(self) -> Any:
        """The redis-py client (other stores on the ledger's Redis share it)."""
        return self._redis.client

    def _keys(self, mail_id: str) -> list[str]:
        """The claim, the sent marker, the hand-off count and the turn of ``mail_id`` (one
        slot)."""
        tag = f"{{{mail_id}}}"
        ns = self._ns
        names = ("claim", "sent", "runs", "turn")
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
        keys, args = self._begin_call(
            mail_id, owner, lease, takeover=takeover, first_seen=first_seen, turn=turn
        )
        return _begun(self._begin(keys, args))

    def begin_riding(
        self,
        mail_id: str,
        owner: str,
        lease: float,
        *,
        takeover: str | None = None,
        first_seen: float | None = None,
        turn: Turn | None = None,
        reads: Sequence[str] = (),
        ride: Ride | None = None,
    ) -> tuple[Begun, list[Any], Any]:
        """:meth:`begin`, with the values at ``reads`` (keys on this ledger's server, read in
        the same ``MGET``) and, with ``ride``, a limiter's decision made in the same script
        call when it is the one the caller would ask for next (:mod:`.ride`: the claim taken
        by a run that is not a first run's copy, every key of ``reads`` empty): ``(begun,
        values at reads, the decision's raw reply or None)``. Not on Redis Cluster (the keys
        of one call span slots)."""
        keys, args = self._begin_call(
            mail_id, owner, lease, takeover=takeover, first_seen=first_seen, turn=turn
        )
        keys += reads
        if ride is None:
            answer = self._begin(keys, args)
            return _begun(answer), list(answer[2 : 2 + len(reads)]), None
        keys.append(ride.key)
        args += [len(reads), *ride.args]
        answer = self._composed(ride.source)(keys, args)
        raws = list(answer[2 : 2 + len(reads)])
        decided = answer[2 + len(reads)] if answer[0] == 1 else None
        return _begun(answer), raws, decided

    def _composed(self, decision: str) -> Script:
        """The script of begin with ``decision`` riding on it, registered once."""
        run = self._rides.get(decision)
        if run is None:
            run = self._rides[decision] = self._redis.script(compose(BEGIN_SCRIPT, decision)[0])
        return run

    def _begin_call(
        self,
        mail_id: str,
        owner: str,
        lease: float,
        *,
        takeover: str | None,
        first_seen: float | None,
        turn: Turn | None,
    ) -> tuple[list[str], list[Any]]:
        claim, sent, _, kept = self._keys(mail_id)
        remember = "" if first_seen is None else repr(float(first_seen))
        number, parent = ("", "") if turn is None else (str(int(turn.number)), turn.parent)
        args: list[Any] = [owner, int(lease * 1000), takeover or "", remember, FIRST_SEEN_TTL]
        field: str | bytes = ""
        schedule = claim
        if self._schedule is not None and number == "0" and turn is not None and turn.copy:
            schedule, field = self._schedule[0], self._schedule[1](mail_id)
        args += [number, parent, TURN_TTL, field]
        return [claim, sent, kept, schedule], args

    def unclaim(self, mail_id: str, owner: str) -> None:
        claim, _, runs, _ = self._keys(mail_id)
        self._unclaim([claim, runs], [owner])

    def record(self, outcome: Outcome) -> None:
        """The sent marker and the mail's other keys dropped in one round trip, no script:
        ``SET`` then ``DEL`` written at once (:func:`send_together`). Not atomic, and need not
        be: every ``begin`` reads the marker first, so a claim or turn left by a
        connection lost between the two answers nothing and expires (``record.lua``, the same
        in one script, is what :meth:`record_command` gives a caller that pipelines it with its
        own, and what runs on Cluster, whose pipelines send no multi-key ``DEL``)."""
        if not self.reads_together:  # a Cluster pipeline sends no multi-key DEL: the script
            self._record(self._keys(outcome.mail_id), [json.dumps(outcome.as_dict()), SENT_TTL])
            return
        claim, sent, runs, kept = self._keys(outcome.mail_id)
        marker = ("SET", sent, json.dumps(outcome.as_dict()), "EX", SENT_TTL)
        self._redis.call(send_together, self._redis.client, [marker, ("DEL", claim, runs, kept)])

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


def _begun(answer: list[Any]) -> Begun:
    """What begin's reply (``begin.lua``: status, value, ...) says."""
    status = int(answer[0])
    if status == 2:
        return Outcome.from_dict(json.loads(answer[1]))
    if status == -1:
        return Superseded(int(answer[1]))
    if status == 1 and answer[1] is not None:
        return Claimed(float(answer[1]))
    return status == 1


def send_together(client: Any, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
    """``commands`` written at once on one connection of ``client``'s pool, their replies read
    in order: one round trip, like a pipeline without its bookkeeping (half its client time).
    An error reply raises (the connection is then dropped: its other replies go unread)."""
    pool = client.connection_pool
    connection = pool.get_connection()
    try:
        connection.send_packed_command(connection.pack_commands(commands))
        return [connection.read_response() for _ in commands]
    except BaseException:
        connection.disconnect()
        raise
    finally:
        pool.release(connection)
