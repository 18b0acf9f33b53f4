"""A write behind Sentinel that a failover cannot lose: the script, then ``WAIT 1``.

Redis replicates asynchronously: a write the master acknowledged can be missing from the
replica the sentinels promote when the master dies. For the writes a promise rests on (a
limiter booking: the mail is then sent in its slot; a ledger claim or record: the mail is then
sent, or known sent), :class:`AcknowledgedRedis` sends each script with ``WAIT 1 <ms>`` on one
connection (a pipeline), so the answer comes back only once a replica holds the write.

- One replica acknowledged: the write survives the promotion of that replica.
- None within :data:`WAIT_MS`, while the master has a replica: :class:`NotReplicated` (a
  ``redis.ConnectionError``, so the stores report their backend unavailable and the guard
  defers the mail, fail-closed). The write stays on the master: a booking then holds a slot no
  mail uses (the safe side), a claim expires with its lease.
- A master without any replica (``INFO replication``: ``connected_slaves:0``, as after a
  failover that promoted the only one): nothing can be promoted, so nothing is waited for. Its
  replicas are counted again (``INFO``, which does not block) every :data:`ALONE_RECHECK`
  seconds, and writes are waited for again once one is back: a write never stalls on a ``WAIT``
  that no replica can answer.

:func:`mailer.storage.client_from_url` builds one for every ``redis+sentinel://`` URL. Not
for writes whose answer nobody waits for (the outbox's puts, sent in a pipeline of their own)
nor for plain commands (a suppression's ``SET``): they stay asynchronous. A script that only
reads waits too, for nothing: ``WAIT`` answers at once when the connection wrote nothing new.
"""

from __future__ import annotations

import time
from typing import Any

import redis
import redis.exceptions

#: Milliseconds a write behind Sentinel waits for one replica to acknowledge it.
WAIT_MS = 1000
#: Seconds a master seen without a replica is not waited on before it is looked at again.
ALONE_RECHECK = 1.0


class NotReplicated(redis.exceptions.ConnectionError):
    """No replica acknowledged a write within :data:`WAIT_MS`: a failover could lose it."""


class ReplicaWait:
    """Whether a write must wait for a replica, and the verdict on ``WAIT``'s answer, for one
    client (or one kombu channel): a master seen without any replica is not waited on for
    :data:`ALONE_RECHECK` seconds."""

    def __init__(self) -> None:
        self.alone_since = 0.0  # monotonic seconds; 0: never seen alone

    def needed(self, client: Any) -> bool:
        """Whether to send ``WAIT 1`` :data:`WAIT_MS` after a write on ``client``: no for a master
        seen without replicas, whose replicas are counted again (``INFO``) once
        :data:`ALONE_RECHECK` seconds have passed."""
        if not self.alone_since:
            return True
        now = time.monotonic()
        if now - self.alone_since < ALONE_RECHECK:
            return False
        if _replicas(client) == 0:
            self.alone_since = now
            return False
        self.alone_since = 0.0
        return True

    def check(self, client: Any, acknowledged: Any) -> None:
        """``WAIT``'s answer judged: :class:`NotReplicated` when no replica took the write while
        the master (``client``) has one; a master without replicas is remembered as alone."""
        if isinstance(acknowledged, int) and acknowledged >= 1:
            return
        if _replicas(client) == 0:
            self.alone_since = time.monotonic()
            return
        raise NotReplicated(f"no replica acknowledged a write within {WAIT_MS} ms (WAIT 1)")


def _replicas(client: Any) -> int:
    """How many replicas the master behind ``client`` has connected (``INFO replication``)."""
    return int(client.info("replication").get("connected_slaves", 0))


class AcknowledgedRedis(redis.Redis):
    """The client of a Sentinel master (``redis_class`` of ``Sentinel.master_for``) whose
    scripts (``EVALSHA``, ``EVAL``, however sent) return once one replica holds their writes:
    each is sent with ``WAIT 1`` :data:`WAIT_MS` on one connection. Other commands, and the
    commands of its pipelines, are sent as they are."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.replica_wait = ReplicaWait()

    def execute_command(self, *args: Any, **options: Any) -> Any:
        name = str(args[0]).upper() if args else ""
        if name not in SCRIPTS or not self.replica_wait.needed(self):
            return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        pipe = self.pipeline(transaction=False)
        pipe.execute_command(*args, **options)  # type: ignore[no-untyped-call]
        pipe.execute_command("WAIT", 1, WAIT_MS)  # type: ignore[no-untyped-call]
        answer, acknowledged = pipe.execute(raise_on_error=False)
        if isinstance(answer, Exception):
            raise answer  # NoScriptError included: the script did not run
        self.replica_wait.check(self, acknowledged)
        return answer


#: The commands whose writes are waited for.
SCRIPTS = frozenset({"EVALSHA", "EVAL"})
