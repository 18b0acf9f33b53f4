"""The live policy's versions in this process: for tests and a single-process tool."""

from __future__ import annotations

import threading


class MemoryPolicyStore:
    """:class:`~mailer.records.policy.base.PolicyStore` in a list (one process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: list[str | bytes] = []

    def version(self) -> int:
        with self._lock:
            return len(self._values)

    def get(self, version: int) -> str | bytes | None:
        with self._lock:
            return self._values[version - 1] if 0 < version <= len(self._values) else None

    def put(self, value: str) -> int:
        with self._lock:
            self._values.append(value)
            return len(self._values)

    def history(self) -> list[tuple[int, str | bytes]]:
        with self._lock:
            return list(enumerate(self._values, start=1))
