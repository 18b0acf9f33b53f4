"""Waiting for real servers and workers, bounded: the one polling helper the tests share."""

from __future__ import annotations

import time
from collections.abc import Callable


def poll(check: Callable[[], object], timeout: float, what: str) -> None:
    """Wait until ``check()`` is true, at most ``timeout`` seconds; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
