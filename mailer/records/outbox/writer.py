"""Writes to Redis that nobody waits for: the outbox's puts at ``send_mail.delay``.

A put is written to one connection of its own and the caller goes on (to the broker's publish)
without waiting for Redis's answer: the answers are read later, all at once, when
:data:`MAX_UNREAD` are left unread or when :meth:`LaterWriter.settle` is asked (before a
write that must come after them, such as a discard). So ``send_mail.delay`` pays the write's
system call, not a round trip to the ledger's Redis: on a loaded machine a round trip is a
scheduling delay of the Redis server, not microseconds.

Not for a write whose failure the caller must see at once: an error (the server gone) is raised
by a later call. Redis applies one connection's commands in order, so a write sent before the
publish is applied before anything a worker does after receiving the message.

A write the server refused for want of its script (``SCRIPT FLUSH`` on a live connection) is
run again when its answer is read, if it was sent at most :data:`RERUN_WITHIN` seconds before;
answers are read by the first write more than :data:`READ_AFTER` seconds after the oldest
unread one. An older refused write is dropped with a warning: a put run late would name a mail
its worker has long received, which the watchdog would then publish again for nothing.

A writer built with ``keep_unconfirmed`` (the receipts' clears) keeps the writes whose answers
were lost with their connection (:meth:`LaterWriter.unconfirmed`): applied or not, the caller
makes them again.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import redis.exceptions

from mailer.storage import RedisStore, Script

log = logging.getLogger("mailguard")

#: Answers left unread at most; at this many, a write first reads them all.
MAX_UNREAD = 256
#: Seconds: a write first reads every answer when the oldest unread was sent this long ago
#: (its answers are there: the read does not wait).
READ_AFTER = 1.0
#: Seconds: a write refused for want of its script is run again only if sent this recently.
RERUN_WITHIN = 10.0


class LaterWriter:
    """Runs one script (its ``source``; through ``script``, which loads it again, for a write
    the server refused for want of it) with writes whose answers are read later. Thread-safe;
    a forked child opens its own connection, and each new connection loads the script first.
    ``keep_unconfirmed``: keep the writes whose answers a lost connection took with it."""

    def __init__(
        self, store: RedisStore, source: str, script: Script, *, keep_unconfirmed: bool = False
    ) -> None:
        self._store = store
        self._source = source
        self._sha = hashlib.sha1(source.encode()).hexdigest()  # noqa: S324 # Redis's naming
        self._script = script
        self._lock = threading.Lock()
        self._connection: Any = None
        self._pid = 0
        #: Writes sent whose answers are unread: keys, arguments, when sent (monotonic).
        self._unread: deque[tuple[Sequence[Any], Sequence[Any], float]] = deque()
        self._keep = keep_unconfirmed
        self._unconfirmed: list[tuple[Sequence[Any], Sequence[Any]]] = []

    def write(self, keys: Sequence[Any], args: Sequence[Any]) -> None:
        """Send one call of the script; raises :class:`~mailer.errors.BackendUnavailable` when
        Redis is down (now, or for an earlier write whose answer said so)."""
        with self._lock:
            connection = self._connected()
            try:
                now = time.monotonic()
                if self._unread and (
                    len(self._unread) >= MAX_UNREAD or now - self._unread[0][2] > READ_AFTER
                ):
                    self._read()
                command = ("EVALSHA", self._sha, len(keys), *keys, *args)
                self._store.call(connection.send_command, *command)
            except BaseException:
                self._drop()
                raise
            self._unread.append((keys, args, now))

    def settle(self) -> None:
        """Wait until every write sent was applied; raises as :meth:`write`."""
        with self._lock:
            if self._connection is None or self._pid != os.getpid():
                return
            try:
                self._read()
            except BaseException:
                self._drop()
                raise

    def unconfirmed(self) -> list[tuple[Sequence[Any], Sequence[Any]]]:
        """The writes (keys, arguments) sent on a connection lost before their answers were
        read, taken from the writer (each once); empty unless ``keep_unconfirmed``."""
        with self._lock:
            taken, self._unconfirmed = self._unconfirmed, []
            return taken

    def _connected(self) -> Any:
        if self._connection is None or self._pid != os.getpid():
            self._unread.clear()  # a forked child: the parent's answers are not its own
            self._connection = None
            pool = self._store.client.connection_pool
            connection = self._store.call(pool.make_connection)
            # Connected first: a connection's first command connects it without the Sentinel
            # lookup (redis-py 8), to its default host (localhost:6379), not to the master.
            self._store.call(connection.connect)
            # Loaded once per connection (a server restarted has none), so that a write is
            # not refused for want of it and run only when its answer is read, much later.
            self._store.call(connection.send_command, "SCRIPT", "LOAD", self._source)
            self._store.call(connection.read_response)
            self._connection, self._pid = connection, os.getpid()
        return self._connection

    def _read(self) -> None:
        """Read every answer left unread (they are there or on their way: one wait at most).
        A write the server could not run for want of its script runs again, if recent."""
        connection = self._connection
        while self._unread:
            keys, args, sent = self._unread.popleft()
            try:
                self._store.call(connection.read_response)
            except redis.exceptions.NoScriptError:  # the server lost it: load, run this one
                if time.monotonic() - sent <= RERUN_WITHIN:
                    self._script(keys, args)
                else:
                    log.warning(
                        "mailguard: a write sent %.0f s ago was refused for want of its script "
                        "(SCRIPT FLUSH?); dropped, too late to run",
                        time.monotonic() - sent,
                    )

    def _drop(self, *, lost: bool = True) -> None:
        """Close the connection after an error (its answers are out of step; ``lost``: the
        unread writes are kept when the writer keeps them); the next write opens another."""
        if self._connection is not None and self._pid == os.getpid():
            self._connection.disconnect()
            if self._keep and lost:
                self._unconfirmed.extend((keys, args) for keys, args, _ in self._unread)
                del self._unconfirmed[: -MAX_UNREAD * 4]  # bounded: the newest kept
        self._connection = None
        self._unread.clear()

    def close(self) -> None:
        """Close the connection (unread answers are dropped: their writes were sent)."""
        with self._lock:
            self._drop(lost=False)
