"""Counting round trips to Redis in a test: what a call's Redis clients write."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest
import redis

T = TypeVar("T")


def round_trips(monkeypatch: pytest.MonkeyPatch, run: Callable[[], T]) -> tuple[int, T]:
    """How many times ``run()``'s Redis clients wrote to a connection (one round trip each: a
    pipeline writes its commands at once), and what ``run()`` answered. Counted around
    redis-py's own send; the commands still go to the real server."""
    writes = [0]
    send = redis.connection.AbstractConnection.send_packed_command

    def counted(self: Any, command: Any, check_health: bool = True) -> None:
        writes[0] += 1
        send(self, command, check_health)

    with monkeypatch.context() as patch:
        patch.setattr(redis.connection.AbstractConnection, "send_packed_command", counted)
        answer = run()
    return writes[0], answer
