"""What only the memory backend must do: bounded memory, and a loud warning when forked."""

from __future__ import annotations

import os
import warnings

from mailer import Limiter, ManualClock, Policy
from mailer.limits.stores.memory import SlidingMemoryStore

POLICY = Policy.parse("1/60s, 5/1h, 10/24h")


def test_idle_keys_are_evicted_so_memory_stays_bounded() -> None:
    """Keys idle for longer than the longest window are forgotten as new traffic flows."""
    clock = ManualClock(1_700_000_000.0)
    limiter = Limiter.from_url("memory://", POLICY, clock=clock)
    backend = limiter.store
    assert isinstance(backend, SlidingMemoryStore)
    for i in range(5_000):
        limiter.acquire(f"user{i}@example.com")
    assert len(backend) == 5_000
    clock.advance(86_400)  # every log now lies outside the day window
    for i in range(3_000):
        limiter.acquire(f"new{i}@example.com")
    assert len(backend) == 3_000, "every 32 calls evict up to 64 idle keys"
    assert limiter.acquire("user1@example.com").allowed, "an evicted key starts afresh"


def test_refused_first_contact_leaves_no_empty_log() -> None:
    """Peeking at or releasing unknown keys creates nothing."""
    limiter = Limiter.from_url("memory://", POLICY, clock=ManualClock())
    assert limiter.peek("a@example.com").allowed
    assert limiter.release("a@example.com", "m") is False
    assert isinstance(limiter.store, SlidingMemoryStore)
    assert len(limiter.store) == 0


def test_use_after_fork_warns() -> None:
    """A memory limiter used in a forked child warns that limits are no longer shared."""
    limiter = Limiter.from_url("memory://", POLICY, clock=ManualClock())
    limiter.acquire("a@example.com")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report whether the warning fired, then leave at once
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            limiter.acquire("b@example.com")
        os.write(write_end, b"1" if any("forked" in str(w.message) for w in caught) else b"0")
        os._exit(0)
    os.close(write_end)
    answer = os.read(read_end, 1)
    os.waitpid(pid, 0)
    os.close(read_end)
    assert answer == b"1"
