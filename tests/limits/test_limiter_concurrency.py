"""Concurrency: threads and processes hammer one key; an independent checker counts admissions.

The policy is time-compressed (1/0.2s, 5/1s, 10/5s) so that a few real seconds exercise every
tier. Admission times are the ones the limiter reports, on its own clock (the Redis server's
``TIME``); the checker recounts every window from what the threads and processes recorded and
shares no code with the limiter. How many mails a run admits depends on how fast the machine is,
so the tests assert invariants, never an exact count: no window is ever over its tier's limit,
every admission lies within the run on the limiter's clock, some mails were admitted and some
refused (the fleet really contended for the key).
"""

from __future__ import annotations

import multiprocessing
import threading
import time
import uuid
from collections.abc import Callable

import redis

from devservers.redis_servers import RedisServer
from mailer import Limiter, ManualClock, Policy

COMPRESSED = "1/0.2s, 5/1s, 10/5s"
HAMMER_SECONDS = 2.5  # each thread and process calls acquire for this long ...
MAX_CALLS = 5_000  # ... or this many times, whichever comes first
THREADS, PROCESSES = 8, 4

Answer = tuple[bool, bool, int]  # allowed, booked, at_ms as the limiter reported them


def over_windows(times_ms: list[int], policy: Policy) -> list[tuple[str, int, int]]:
    """Windows (t - W, t] ending at a recorded time that hold more than L times: (tier, t, n).

    A window holding the most times always can be slid to end at one of them, so checking the
    windows that end at each recorded time checks them all.
    """
    times = sorted(times_ms)
    over = []
    for tier in policy.tiers:
        for end in times:
            inside = sum(1 for t in times if end - tier.window_ms < t <= end)
            if inside > tier.limit:
                over.append((str(tier), end, inside))
    return over


def test_the_checker_finds_a_window_over_its_limit() -> None:
    """The checker itself flags 2 admissions 199 ms apart (1/0.2s) and 11 within 5 s (10/5s)."""
    policy = Policy.parse(COMPRESSED)
    first, _, third = (str(tier) for tier in policy.tiers)
    assert over_windows([1_000, 1_200, 1_400, 2_000, 2_200, 6_200], policy) == []
    assert over_windows([1_000, 1_199], policy) == [(first, 1_199, 2)]
    eleven_in_four_seconds = [1_000 + 400 * n for n in range(11)]
    assert over_windows(eleven_in_four_seconds, policy) == [(third, 5_000, 11)]


def server_ms(url: str) -> int:
    """The Redis server's clock in epoch milliseconds: the limiter's clock on that server."""
    client = redis.Redis.from_url(url)
    try:
        seconds, micros = client.time()
    finally:
        client.close()
    return int(seconds) * 1000 + int(micros) // 1000


def _hammer(url: str, namespace: str, mail_prefix: str, max_wait: float) -> list[Answer]:
    limiter = Limiter.from_url(url, Policy.parse(COMPRESSED), namespace=namespace, secret="c")
    answers = []
    deadline = time.monotonic() + HAMMER_SECONDS
    try:
        while time.monotonic() < deadline and len(answers) < MAX_CALLS:
            d = limiter.acquire(
                "hot@example.com", mail_id=f"{mail_prefix}-{len(answers)}", max_wait=max_wait
            )
            answers.append((d.allowed, d.booked, d.at_ms))
    finally:
        limiter.close()
    return answers


def _process_worker(args: tuple[str, str, str, float]) -> list[Answer]:
    return _hammer(*args)


def _run_fleet(url: str, max_wait: float) -> list[list[Answer]]:
    """Run the threads and processes at once; return each one's answers, all of them finished."""
    namespace = f"conc-{uuid.uuid4().hex[:8]}"
    per_worker: list[list[Answer]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def thread_main(n: int) -> None:
        try:
            got = _hammer(url, namespace, f"t{n}", max_wait)
        except BaseException as exc:  # reported by the test, not lost in the thread
            with lock:
                errors.append(exc)
            return
        with lock:
            per_worker.append(got)

    threads = [threading.Thread(target=thread_main, args=(n,)) for n in range(THREADS)]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(PROCESSES) as pool:
        pending = pool.map_async(
            _process_worker, [(url, namespace, f"p{n}", max_wait) for n in range(PROCESSES)]
        )
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        per_worker.extend(pending.get(timeout=60))
    assert errors == [], errors
    assert not any(t.is_alive() for t in threads), "a thread did not finish"
    assert len(per_worker) == THREADS + PROCESSES
    return per_worker


def test_threads_and_processes_never_over_admit_on_redis(redis_server: RedisServer) -> None:
    """8 threads + 4 processes at once: no window over any tier, some admitted, some refused."""
    started = server_ms(redis_server.url)
    per_worker = _run_fleet(redis_server.url, max_wait=0.0)
    finished = server_ms(redis_server.url)
    answers = [answer for got in per_worker for answer in got]
    admitted = [at for allowed, _, at in answers if allowed]

    assert all(got for got in per_worker), "every thread and process called acquire"
    assert not any(booked for _, booked, _ in answers), "max_wait=0 never books"
    assert over_windows(admitted, Policy.parse(COMPRESSED)) == []
    assert admitted, "at least some mails were admitted"
    assert len(admitted) < len(answers), "some were refused: the fleet really contended"
    assert all(started <= at <= finished for at in admitted), "admitted during the run"


def test_concurrent_reservations_are_distinct_and_never_over(redis_server: RedisServer) -> None:
    """With reservations, every admitted or booked slot across the fleet respects every tier."""
    max_wait = 12.0
    started = server_ms(redis_server.url)
    per_worker = _run_fleet(redis_server.url, max_wait=max_wait)
    finished = server_ms(redis_server.url)
    answers = [answer for got in per_worker for answer in got]
    slots = [at for allowed, booked, at in answers if allowed or booked]

    assert all(got for got in per_worker), "every thread and process called acquire"
    assert over_windows(slots, Policy.parse(COMPRESSED)) == []
    assert len(set(slots)) == len(slots), "no two mails share a slot"
    assert any(allowed for allowed, _, _ in answers), "at least some mails were admitted"
    assert any(booked for _, booked, _ in answers), "and some were booked for later"
    assert len(slots) < len(answers), "some were refused: max_wait ran out"
    assert all(started <= at <= finished + max_wait * 1000 for at in slots)


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
