"""Concurrency: threads and processes hammer one key; an independent checker counts admissions.

The policy is time-compressed (1/0.2s, 5/1s, 10/5s) so that a few real seconds exercise every
tier. Admission times are the ones the limiter reports (the Redis server's clock); the checker
recounts every window from them and shares no code with the limiter.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
import uuid
from collections.abc import Callable

from devservers.redis_servers import RedisServer
from mailer import Limiter, ManualClock, Policy

COMPRESSED = "1/0.2s, 5/1s, 10/5s"
HAMMER_SECONDS = 2.5


def over_admissions(times_ms: list[int], policy: Policy) -> int:
    """Count windows (t - W, t] ending at an admission that hold more than L admissions."""
    times = sorted(times_ms)
    bad = 0
    for tier in policy.tiers:
        for end in times:
            if sum(1 for t in times if end - tier.window_ms < t <= end) > tier.limit:
                bad += 1
    return bad


def _hammer(
    url: str, namespace: str, seconds: float, mail_prefix: str, max_wait: float
) -> list[tuple[bool, bool, int]]:
    limiter = Limiter.from_url(url, Policy.parse(COMPRESSED), namespace=namespace, secret="c")
    answers = []
    deadline = time.monotonic() + seconds
    i = 0
    while time.monotonic() < deadline:
        d = limiter.acquire("hot@example.com", mail_id=f"{mail_prefix}-{i}", max_wait=max_wait)
        answers.append((d.allowed, d.booked, d.at_ms))
        i += 1
    limiter.close()
    return answers


def _process_worker(args: tuple[str, str, float, str, float]) -> list[tuple[bool, bool, int]]:
    return _hammer(*args)


def _run_fleet(url: str, max_wait: float) -> list[tuple[bool, bool, int]]:
    namespace = f"conc-{uuid.uuid4().hex[:8]}"
    results: list[tuple[bool, bool, int]] = []
    lock = threading.Lock()

    def thread_main(n: int) -> None:
        got = _hammer(url, namespace, HAMMER_SECONDS, f"t{n}", max_wait)
        with lock:
            results.extend(got)

    threads = [threading.Thread(target=thread_main, args=(n,)) for n in range(8)]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        pending = pool.map_async(
            _process_worker,
            [(url, namespace, HAMMER_SECONDS, f"p{n}", max_wait) for n in range(4)],
        )
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        for got in pending.get(timeout=60):
            results.extend(got)
    return results


def test_threads_and_processes_never_over_admit_on_redis(redis_server: RedisServer) -> None:
    """8 threads + 4 processes for 2.5 s: exactly 10 admissions (the 10/5s tier), none over."""
    results = _run_fleet(redis_server.url, max_wait=0.0)
    admitted = [at for allowed, _, at in results if allowed]
    assert len(results) > 1_000, "the fleet really hammered"
    assert over_admissions(admitted, Policy.parse(COMPRESSED)) == 0
    assert len(admitted) == 10, "every slot the policy offers in 2.5 s was used, none more"


def test_concurrent_reservations_are_distinct_and_never_over(redis_server: RedisServer) -> None:
    """With reservations, every admitted or booked slot across the fleet respects every tier."""
    results = _run_fleet(redis_server.url, max_wait=12.0)
    slots = [at for allowed, booked, at in results if allowed or booked]
    assert over_admissions(slots, Policy.parse(COMPRESSED)) == 0
    # 10 per 5 s: slots can reach at most 12 s ahead of a run of 2.5 s.
    assert 25 <= len(slots) <= 40


def test_hundred_threads_limit_five_admits_exactly_five() -> None:
    """On the memory backend, 100 threads racing for a 5-per-hour key get exactly 5 admissions."""
    limiter = Limiter.from_url("memory://", Policy.parse("5/1h"), clock=ManualClock())
    barrier = threading.Barrier(100)
    admitted: list[bool] = []
    append: Callable[[bool], None] = admitted.append

    def race() -> None:
        barrier.wait()
        append(limiter.acquire("k").allowed)

    threads = [threading.Thread(target=race) for _ in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert admitted.count(True) == 5
    assert len(admitted) == 100
