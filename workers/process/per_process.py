"""What one process keeps for itself: its stores, its guard, whether its promoter runs here.

A prefork worker's pool processes are forked from the main process and inherit its memory: a
Redis client built before the fork would share its sockets with every child, and an in-process
(``memory://``) store would look shared where it is a copy. A :class:`PerProcess` value is
built on first use in each process and forgotten in a forked child right after the fork
(:func:`os.register_at_fork`), so no cache needs the process id in its keys and nothing built
in a parent reaches a child. Use it for what a process builds for itself; not for what must
be the same in every process (settings: :mod:`workers.process.settings`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

#: Every per-process cache, forgotten together after a fork.
_everything: list[PerProcess[object, object]] = []


class PerProcess(Generic[K, V]):
    """A thread-safe cache of this process's values by key, empty again in a forked child."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[K, V] = {}
        _everything.append(self)  # type: ignore[arg-type]

    def get(self, key: K) -> V | None:
        """The value kept for ``key`` in this process (a dict read: no lock)."""
        return self._values.get(key)

    def built(self, key: K, build: Callable[[], V]) -> V:
        """The value for ``key``, built by ``build()`` once in this process."""
        with self._lock:
            if key not in self._values:
                self._values[key] = build()
            return self._values[key]

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._values[key] = value

    def discard(self, key: K) -> None:
        with self._lock:
            self._values.pop(key, None)

    def values(self) -> Iterator[V]:
        """A snapshot of this process's values."""
        with self._lock:
            return iter(list(self._values.values()))

    def clear(self) -> None:
        with self._lock:
            self._values.clear()

    def _forget(self) -> None:
        """In a forked child: a new lock (the parent's may have been held) and no values."""
        self._lock = threading.Lock()
        self._values = {}


def _forget_everything() -> None:
    for cache in _everything:
        cache._forget()


os.register_at_fork(after_in_child=_forget_everything)
