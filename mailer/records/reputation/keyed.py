"""The sender reputation as the guard, the webhooks and the CLI use it: senders by address,
Message-IDs hashed, the clock and the limits over a
:class:`~mailer.records.reputation.base.ReputationStore`; :func:`reputation_from_url` picks the
store by the URL's scheme."""

from __future__ import annotations

import base64
import hashlib
import logging
from typing import Any

from mailer.clock import Clock, system_clock
from mailer.records.reputation.base import (
    Counted,
    Limits,
    Pause,
    Standing,
    percent,
    sender_of,
)
from mailer.records.reputation.memory import MemoryReputationStore
from mailer.records.reputation.redis import COUNT_SCRIPT, RedisReputationStore, counted_of
from mailer.storage import client_from_url, is_memory

#: A script of another store and the client it runs on: text, keys, arguments, client.
Script = tuple[str, list[str], list[Any], Any]

log = logging.getLogger("mailguard")


class Reputation:
    """Count, judge, read and resume per sender (an address or ``Name <address>``). Thread-safe.
    Raises :class:`~mailer.errors.BackendUnavailable` when the ledger's Redis is down. Logs an
    ERROR line when a count pauses a sender (which rate crossed which threshold), a WARNING when
    a pause lifts, a WARNING when a complaint leaves the complaint rate at or over the warning
    rate (:attr:`Limits.warning`, 0.1 %) without a pause."""

    def __init__(
        self, store: Any, limits: Limits, *, clock: Clock | None = None, default_sender: str = ""
    ) -> None:
        self.store = store
        self.limits = limits
        self._clock = clock or system_clock
        #: Whom a webhook's event counts against when its Message-ID is not found.
        self.default_sender = sender_of(default_sender) if default_sender else ""

    def count_sent(self, sender: str, kind: str, message_id: str | None) -> Counted:
        """One mail of ``kind`` sent by ``sender`` with ``message_id`` (marked for the window,
        so that a webhook's later event is attributed to it)."""
        mark = None if not message_id else (mark_of(message_id), kind)
        return self._count(sender, "s", mark)

    def count_sent_after(
        self, first: Script, sender: str, kind: str, message_id: str | None
    ) -> tuple[Any, Counted | None] | None:
        """:meth:`count_sent`, riding on ``first`` (``(script, keys, args)`` of another store on
        the same Redis client: the ledger's record), in one round trip: ``first``'s reply (an
        error as its exception) and the count (None when it failed, logged). None when the
        store is in memory or on another client than ``client`` (do them apart)."""
        if not isinstance(self.store, RedisReputationStore) or self.store.client is not first[3]:
            return None
        address = sender_of(sender)
        mark = None if not message_id else (mark_of(message_id), kind)
        keys, args = self.store.count_command(
            sid_of(address), address, "s", now=self._clock(), limits=self.limits, mark=mark
        )
        script = (first[0], first[1], first[2])
        replies = self.store.run_together([script, (COUNT_SCRIPT, keys, args)])
        if isinstance(replies[1], Exception):
            log.warning("mail not counted for %s: %s", address, replies[1])
            return replies[0], None
        counted = counted_of(address, replies[1])
        _log_transition(counted, self.limits)
        return replies[0], counted

    def count_bounce(self, sender: str, *, sent: bool = False) -> Counted:
        """A hard bounce of ``sender``'s mail; ``sent``: the mail was refused during the send
        (an SMTP reply), so it counts as a mail sent too."""
        return self._count(sender, "sb" if sent else "b", None)

    def count_event(self, event: str, message_id: str | None) -> Counted | None:
        """A webhook's ``bounced`` or ``complained`` for the mail sent with ``message_id``
        (attributed to its sender; to ``default_sender`` when not found); None for other events
        or when nobody can be named."""
        code = {"bounced": "b", "complained": "c"}.get(event)
        if code is None:
            return None
        found = None
        if message_id:
            found = self.store.attribute(mark_of(message_id), self._clock(), self.limits)
        sender = found[0] if found is not None else self.default_sender
        if not sender:
            return None
        if found is None:
            log.info(
                "%s event of a Message-ID not marked in the window: counted for %s", event, sender
            )
        return self._count(sender, code, None)

    def check(self, sender: str) -> Standing:
        """``sender``'s standing now: old buckets dropped, the rates judged (a pause whose rate
        fell back lifts here)."""
        return self._count(sender, "", None).standing

    def resume(self, sender: str, by: str) -> Standing:
        """Lift ``sender``'s pause by hand (``by``: who), forgiving the window's bounces and
        complaints; recorded with who and when."""
        address = sender_of(sender)
        standing = self.store.resume(sid_of(address), address, by, self._clock(), self.limits)
        log.warning("sender %s resumed by %s", address, by, extra={"sender": address})
        return standing  # type: ignore[no-any-return]

    def standings(self) -> list[Standing]:
        """Every sender counted, judged now (sorted by address)."""
        return sorted((self.check(name) for _, name in self.store.senders()), key=_by_sender)

    def pause_read(self, sender: str) -> tuple[Any, str] | None:
        """The client and key of ``sender``'s pause record, for one ``MGET`` with other reads;
        None in memory."""
        return self.store.state_read(sid_of(sender_of(sender)))  # type: ignore[no-any-return]

    def pause_of(self, sender: str) -> Pause | None:
        return self.store.pause_of(sid_of(sender_of(sender)))  # type: ignore[no-any-return]

    def _count(self, sender: str, events: str, mark: tuple[str, str] | None) -> Counted:
        address = sender_of(sender)
        counted: Counted = self.store.count(
            sid_of(address), address, events, now=self._clock(), limits=self.limits, mark=mark
        )
        _log_transition(counted, self.limits)
        if "c" in events:
            _warn_complaints(counted.standing, self.limits)
        return counted


def _warn_complaints(standing: Standing, limits: Limits) -> None:
    """A WARNING for a complaint that leaves an unpaused sender at or over the warning rate
    (Gmail's 0.1 %), with at least the minimum volume sent: one line per such complaint."""
    rate = standing.rate("complaint")
    warning = limits.warning
    if warning is None or standing.paused or standing.sent < max(limits.minimum, 1):
        return
    if rate >= warning:
        log.warning(
            "sender %s: complaint rate %s at or over the warning %s (%d complaints, %d mails "
            "sent in the window); its bulk kinds pause at %s",
            standing.sender,
            percent(rate),
            percent(warning),
            standing.complained,
            standing.sent,
            percent(limits.thresholds.complaint) if limits.thresholds.complaint else "no rate",
            extra={"sender": standing.sender},
        )


def _by_sender(standing: Standing) -> str:
    return standing.sender


def _log_transition(counted: Counted, limits: Limits) -> None:
    standing, pause = counted.standing, counted.standing.pause
    if counted.transition == "paused" and pause is not None:
        log.error(
            "sender %s paused: %s rate %s crossed the threshold %s (%d bounces, %d complaints, "
            "%d mails sent in the window); its bulk kinds are deferred until the rate falls back "
            "or `mailguard reputation resume %s`",
            standing.sender,
            pause.rate,
            percent(pause.value),
            percent(pause.threshold),
            standing.bounced,
            standing.complained,
            standing.sent,
            standing.sender,
            extra={"sender": standing.sender},
        )
    elif counted.transition == "lifted":
        log.warning(
            "sender %s: pause lifted, every rate below its threshold (%s)",
            standing.sender,
            limits.thresholds,
            extra={"sender": standing.sender},
        )


def sid_of(address: str) -> str:
    """A sender's short hash in storage keys (16 hex characters)."""
    return hashlib.blake2b(address.encode(), digest_size=8).hexdigest()


def mark_of(message_id: str) -> str:
    """A Message-ID's hash as marked at send (``<id@host>`` and ``id@host`` are one)."""
    bare = message_id.strip().strip("<>").strip()
    digest = hashlib.blake2b(bare.encode("utf-8", "surrogatepass"), digest_size=9).digest()
    return base64.urlsafe_b64encode(digest).decode()


def reputation_from_url(
    url: str,
    limits: Limits,
    *,
    clock: Clock | None = None,
    client: Any = None,
    namespace: str = "mailguard",
    default_sender: str = "",
) -> Reputation:
    """The reputation on ``memory://`` or a Redis URL (the ledger's); ``client`` reuses a
    redis-py client. Times are ``clock``'s (epoch seconds) on both."""
    store: Any
    if is_memory(url):
        store = MemoryReputationStore()
    else:
        redis = client if client is not None else client_from_url(url)
        store = RedisReputationStore(redis, url, namespace)
    return Reputation(store, limits, clock=clock, default_sender=default_sender)
