"""Publisher confirms for the promoter and the watchdog on RabbitMQ: a batch is forgotten only
once the broker holds every message of it.

An AMQP ``basic.publish`` returns before the broker has the message: RabbitMQ killed a moment
later (before it wrote a persistent message to disk) loses it, and nothing tells the publisher.
The promoter forgets a parked or watched mail once it is published (the schedule keeps no copy),
so on an AMQP broker it publishes on a connection of its own whose channel is in confirm mode,
and when a batch ends it waits, once for the whole batch, until the broker acknowledged every
message of it (for a durable queue: written to disk). A refusal (``basic.nack``), a lost
connection or no answer within :data:`CONFIRM_TIMEOUT` raises: the promoter puts the batch back
in the schedule, due again shortly, and the ledger keeps a copy that did arrive from sending
twice.

A Redis broker needs none of this: the ``LPUSH``'s reply is its confirmation.
Not for a caller's ``send_mail.delay``: the outbox covers a first message, and a confirm per
publish would cost a round trip each.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from workers.brokers.priority import AMQP_SCHEMES, broker_scheme

#: Seconds a batch waits at most for the broker's acknowledgements.
CONFIRM_TIMEOUT = 10.0


def confirms_needed(broker_url: str) -> bool:
    """True for a broker whose publish returns before the broker has the message (AMQP)."""
    return broker_scheme(broker_url) in AMQP_SCHEMES


class Unconfirmed(ConnectionError):
    """The broker refused a message of the batch, or did not acknowledge it in time."""


class _Confirms:
    """A channel in confirm mode: the delivery tags published and not yet acknowledged."""

    def __init__(self, channel: Any) -> None:
        channel.confirm_select()
        channel.events["basic_ack"].add(self._ack)
        channel.events["basic_nack"].add(self._nack)
        self.published = 0
        self.pending: set[int] = set()
        self.refused = 0
        publish = channel.basic_publish

        def counted(*args: Any, **kwargs: Any) -> Any:
            result = publish(*args, **kwargs)
            self.published += 1  # the broker numbers a confirm channel's publishes from 1
            self.pending.add(self.published)
            return result

        channel.basic_publish = counted

    def _ack(self, tag: int, multiple: bool) -> None:
        self._settle(tag, multiple)

    def _nack(self, tag: int, multiple: bool) -> None:
        self.refused += len(self._settle(tag, multiple))

    def _settle(self, tag: int, multiple: bool) -> set[int]:
        done = {t for t in self.pending if t <= tag} if multiple else {tag} & self.pending
        self.pending -= done
        return done


class ConfirmedPublisher:
    """One producer on a connection of its own (``app``'s broker, no heartbeats: it may sit
    idle for hours) whose publishes :meth:`batch` confirms. One thread's (the promoter's)."""

    def __init__(self, app: Any, timeout: float = CONFIRM_TIMEOUT) -> None:
        self._app = app
        self._timeout = timeout
        self._connection: Any = None
        self._producer: Any = None
        self._confirms: _Confirms | None = None

    @contextlib.contextmanager
    def batch(self) -> Iterator[Any]:
        """A producer whose publishes inside the block are all acknowledged by the broker when
        the block ends; raises :class:`Unconfirmed` (or the connection's error) otherwise, and
        the connection is opened again for the next batch."""
        try:
            producer, confirms = self._open()
            yield producer
            self._wait(confirms)
        except BaseException:
            self.close()
            raise

    def _open(self) -> tuple[Any, _Confirms]:
        if self._producer is None or self._confirms is None:
            self.close()
            # Its own confirms, batched: not py-amqp's wait per publish (``confirm_publish``,
            # on for quorum queues), which would take the acknowledgements counted here.
            self._connection = self._app.connection_for_write(
                heartbeat=0, transport_options={"confirm_publish": False}
            )
            channel = self._connection.default_channel
            self._confirms = _Confirms(channel)
            self._producer = self._connection.Producer(channel)
        return self._producer, self._confirms

    def _wait(self, confirms: _Confirms) -> None:
        deadline = time.monotonic() + self._timeout
        while confirms.pending and not confirms.refused:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Unconfirmed(f"{len(confirms.pending)} message(s) not acknowledged in time")
            with contextlib.suppress(TimeoutError):
                self._connection.drain_events(timeout=left)
        if confirms.refused:
            raise Unconfirmed(f"the broker refused {confirms.refused} message(s)")

    def close(self) -> None:
        """Close the connection without the closing handshake (a broker that does not answer
        would hold it); the next batch opens another."""
        connection, self._connection = self._connection, None
        self._producer = self._confirms = None
        if connection is not None:
            with contextlib.suppress(Exception):
                connection.collect()
