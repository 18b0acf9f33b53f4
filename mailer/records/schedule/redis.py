"""The schedule in Redis (the ledger's): one script call per change, keys under one hash tag.

One schedule per queue (``<q>``, ``MAILGUARD_QUEUE``): a promoter publishes to its own queue,
so workers of another queue on the same Redis (``mailguard demo --redis``) never take its mails.

- ``<ns>:{schedule:<q>}:due``: sorted set, mail id by due time (epoch milliseconds) while parked,
  by the end of its promotion lease (ms) while promoting: its first score says whether
  anything is due (:meth:`RedisSchedule.next_due`, one cheap command per poll)
- ``<ns>:{schedule:<q>}:promoting``: set of the mail ids being promoted
- ``<ns>:{schedule:<q>}:payloads``: hash, mail id -> payload (opaque bytes)
- ``<ns>:{schedule:<q>}:dead``: hash, mail id -> payload that could not be used

One hash tag, so one Cluster slot (every script touches several keys). Mail ids are the only
names stored in clear; addresses live inside payloads only as the workers encode them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from importlib import resources
from typing import Any

from mailer.clock import to_ms
from mailer.defaults import QUEUE
from mailer.errors import BackendUnavailable
from mailer.records.schedule.base import PROMOTE_LEASE, TAKE_AHEAD, TAKE_LIMIT, ScheduleStats, Taken
from mailer.storage import REDIS_DOWN


def _script(name: str) -> str:
    return resources.files("mailer.records.schedule").joinpath(f"lua/{name}.lua").read_text()


PARK_SCRIPT = _script("park")
TAKE_SCRIPT = _script("take")
DONE_SCRIPT = _script("done")
BURY_SCRIPT = _script("bury")
CANCEL_SCRIPT = _script("cancel")


class RedisSchedule:
    """:class:`~mailer.records.schedule.base.Schedule` in Redis; raises
    :class:`~mailer.errors.BackendUnavailable` (``backend="ledger"``) when Redis is down."""

    def __init__(
        self, client: Any, url: str, namespace: str = "mailguard", queue: str = QUEUE
    ) -> None:
        self._client = client
        self._url = url
        tag = "".join(c for c in queue if c not in "{}")
        prefix = f"{namespace}:{{schedule:{tag}}}"
        self.due_key, self.promoting_key = f"{prefix}:due", f"{prefix}:promoting"
        self.payloads_key, self.dead_key = f"{prefix}:payloads", f"{prefix}:dead"
        self._park = client.register_script(PARK_SCRIPT)
        self._take = client.register_script(TAKE_SCRIPT)
        self._done = client.register_script(DONE_SCRIPT)
        self._bury = client.register_script(BURY_SCRIPT)
        self._cancel = client.register_script(CANCEL_SCRIPT)

    @property
    def client(self) -> Any:
        return self._client

    def _down(self, exc: BaseException) -> BackendUnavailable:
        return BackendUnavailable(self._url, exc, backend="ledger")

    def park(self, mail_id: str, due: float, payload: bytes) -> None:
        keys = [self.due_key, self.promoting_key, self.payloads_key]
        try:
            self._park(keys=keys, args=[mail_id, to_ms(due), payload])
        except REDIS_DOWN as exc:
            raise self._down(exc) from exc

    def take_due(
        self, limit: int = TAKE_LIMIT, lease: float = PROMOTE_LEASE, ahead: float = TAKE_AHEAD
    ) -> list[Taken]:
        keys = [self.due_key, self.promoting_key, self.payloads_key]
        args = [max(int(limit), 1), int(lease * 1000), int(ahead * 1000)]
        try:
            flat = self._take(keys=keys, args=args)
        except REDIS_DOWN as exc:
            raise self._down(exc) from exc
        return [
            Taken(_text(flat[i]), flat[i + 1] if flat[i + 1] else None)
            for i in range(0, len(flat), 2)
        ]

    def next_due(self) -> float | None:
        try:
            first = self._client.zrange(self.due_key, 0, 0, withscores=True)
        except REDIS_DOWN as exc:
            raise self._down(exc) from exc
        return float(first[0][1]) / 1000 if first else None

    def done(self, mail_ids: Sequence[str]) -> int:
        if not mail_ids:
            return 0
        keys = [self.due_key, self.promoting_key, self.payloads_key]
        try:
            return int(self._done(keys=keys, args=mail_ids))
        except REDIS_DOWN as exc:
            raise self._down(exc) from exc

    def bury(self, mail_id: str) -> None:
        keys = [self.due_key, self.promoting_key, self.payloads_key, self.dead_key]
        try:
            self._bury(keys=keys, args=[mail_id])
        except REDIS_DOWN as exc:
            raise self._down(exc) from exc

    def cancel(self, mail_id: str) -> bytes | None:
        keys = [self.due_key, self.promoting_key, self.payloads_key]
        try:
            payload = self._cancel(keys=keys, args=[mail_id])
        except REDIS_DOWN as exc:
            raise self._down(exc) from exc
        return bytes(payload) if payload is not None else None

    def payload(self, mail_id: str) -> bytes | None:
        try:
            raw = self._client.hget(self.payloads_key, mail_id)
        except REDIS_DOWN as exc:
            raise self._down(exc) from exc
        return bytes(raw) if raw is not None else None

    def stats(self) -> ScheduleStats:
        try:
            pipe = self._client.pipeline(transaction=False)
            pipe.zcard(self.due_key)
            pipe.scard(self.promoting_key)
            pipe.hlen(self.dead_key)
            pipe.zrange(self.due_key, 0, 0, withscores=True)
            waiting, promoting, dead, first = pipe.execute()
        except REDIS_DOWN as exc:
            raise self._down(exc) from exc
        # The first score may be a promoting entry's lease end: then the earliest the schedule
        # will hand out anything (an ended lease is overdue: it must be published again).
        earliest = first[0][1] / 1000 if first else None
        parked = int(waiting) - int(promoting)
        return ScheduleStats(parked, int(promoting), int(dead), earliest if waiting else None)

    def scan(self) -> Iterator[tuple[str, float | None, bytes]]:
        try:
            for raw_id, payload in self._client.hscan_iter(self.payloads_key, count=1000):
                mail_id = _text(raw_id)
                score = self._client.zscore(self.due_key, mail_id)
                if score is None or self._client.sismember(self.promoting_key, mail_id):
                    score = None
                yield mail_id, None if score is None else score / 1000, bytes(payload)
        except REDIS_DOWN as exc:
            raise self._down(exc) from exc

    def dead_letters(self, limit: int = 100) -> list[tuple[str, bytes]]:
        rows: list[tuple[str, bytes]] = []
        try:
            for raw_id, payload in self._client.hscan_iter(self.dead_key, count=1000):
                rows.append((_text(raw_id), bytes(payload)))
                if len(rows) >= limit:
                    break
        except REDIS_DOWN as exc:
            raise self._down(exc) from exc
        return rows


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
