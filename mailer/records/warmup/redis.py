"""The warm-up record in Redis (the limiter's): ``lua/take.lua`` per mail (one ``EVALSHA``: the
day, the count and the allowance are one atomic step across workers).

Keys, all with the hash tag ``{warmup}`` (one Cluster slot), three per sender, named by the
sender's hash (never its address): ``<ns>:{warmup}:state:<hash>`` and the mails of the last
two days, ``<ns>:{warmup}:mails0:<hash>`` / ``mails1:<hash>`` (hashed mail ids).
"""

from __future__ import annotations

from typing import Any

from mailer.records.warmup.base import Taken
from mailer.storage import RedisStore, lua_source

TAKE_SCRIPT = lua_source("mailer.records.warmup", "take")


class RedisWarmupStore:
    """:class:`~mailer.records.warmup.base.WarmupStore` in Redis; raises
    :class:`~mailer.errors.BackendUnavailable` (``backend="limiter"``) when Redis is down."""

    def __init__(self, client: Any, url: str, namespace: str = "mailguard") -> None:
        self._redis = RedisStore(client, url, backend="limiter")
        self._prefix = f"{namespace}:{{warmup}}"
        self._take = self._redis.script(TAKE_SCRIPT)

    @property
    def client(self) -> Any:
        """The redis-py client (to share a connection, or one ``MGET`` with other stores)."""
        return self._redis.client

    def keys(self, sid: str) -> list[str]:
        """The sender's three keys (state, even days' mails, odd days' mails)."""
        return [f"{self._prefix}:{name}:{sid}" for name in ("state", "mails0", "mails1")]

    def take(
        self,
        sid: str,
        mail: str,
        *,
        now: float,
        allowances: tuple[int, ...],
        day_length: float,
        idle: float,
        force: bool,
    ) -> Taken:
        args = [repr(now), repr(day_length), repr(idle), mail, "1" if force else "0"]
        reply = self._take(self.keys(sid), [*args, *allowances])
        admitted, day, allowance, used, waiting, start, position = reply
        return Taken(
            bool(admitted),
            int(day),
            None if int(allowance) < 0 else int(allowance),
            int(used),
            int(waiting),
            float(start),
            day_length,
            int(position),
        )

    def state(self, sid: str) -> tuple[float, float, int, int, int] | None:
        client = self._redis.client
        found = self._redis.call(
            client.hmget, self.keys(sid)[0], "start", "last", "day", "used", "waiting"
        )
        if found[0] is None:
            return None
        start, last, day, used, waiting = found
        return float(start), float(last), int(day), int(used), int(waiting)
