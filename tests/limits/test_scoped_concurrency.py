"""Concurrency of the scoped limiter: 8 threads and 4 processes, many recipients, one sender,
on one Redis and on a Redis Cluster.

Every mail goes to a recipient of its own, so only the sender scope binds. Each caller books
with a long ``max_wait`` on the Redis server's clock, so slots spread into the future without
any test sleeping through a window. An independent checker recounts the reported slots: no
sender window is ever over its limit, in any tier kind.
"""

from __future__ import annotations

import multiprocessing
import threading
import uuid

from devservers.redis_servers import RedisClusterServers, RedisServer
from mailer import Contended, Limiter, Policy

POLICY = "sender: 5/1s, 8/1s gcra, 40/1h fixed"
THREADS, PROCESSES, MAILS = 8, 4, 5


def _sender_over(slots_ms: list[int]) -> list[str]:
    times = sorted(slots_ms)
    over = []
    for end in times:
        if sum(1 for t in times if end - 1000 < t <= end) > 5:
            over.append(f"5/1s over at {end}")
    for i, a in enumerate(times):  # gcra 8/1s: any span [a, b] holds at most 8 + (b - a) / 125 ms
        for j in range(i, len(times)):
            if (j - i + 1 - 8) * 125 > times[j] - a:
                over.append(f"8/1s gcra over in [{a}, {times[j]}]")
    hours: dict[int, int] = {}
    for t in times:
        hours[t // 3_600_000] = hours.get(t // 3_600_000, 0) + 1
    over += [f"40/1h fixed over in hour {h}" for h, n in hours.items() if n > 40]
    return over


def _caller(url: str, namespace: str, name: str, out: list[tuple[bool, bool, int]]) -> None:
    limiter = Limiter.from_url(url, Policy.parse(POLICY), secret="s", namespace=namespace)
    try:
        for i in range(MAILS):
            try:
                d = limiter.acquire(f"{name}-{i}@example.com", mail_id=f"{name}-{i}", max_wait=60)
            except Contended:  # no common slot in the rounds allowed: nothing held, a valid answer
                out.append((False, False, 0))
                continue
            out.append((d.allowed, d.booked, d.at_ms))
    finally:
        limiter.close()


def _process(url: str, namespace: str, name: str, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    out: list[tuple[bool, bool, int]] = []
    _caller(url, namespace, name, out)
    queue.put(out)


def test_threads_and_processes_never_exceed_the_sender_quota(redis_server: RedisServer) -> None:
    """60 mails from 8 threads and 4 processes to 60 recipients: the sender is never over."""
    _never_over(redis_server.url)


def test_on_a_redis_cluster_the_sender_quota_is_never_exceeded_either(
    cluster: RedisClusterServers,
) -> None:
    """The same on a 3-node Redis Cluster, where each recipient's slot and the sender's differ
    and the decision runs scope by scope with rollbacks (mailer.limits.stores.scoped_cluster)."""
    _never_over(cluster.url)


def _never_over(url: str) -> None:
    namespace = f"conc-{uuid.uuid4().hex[:10]}"
    answers: list[tuple[bool, bool, int]] = []
    threads = [
        threading.Thread(target=_caller, args=(url, namespace, f"t{i}", answers))
        for i in range(THREADS)
    ]
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    processes = [
        context.Process(target=_process, args=(url, namespace, f"p{i}", queue))
        for i in range(PROCESSES)
    ]
    for worker in [*threads, *processes]:
        worker.start()
    for _ in processes:
        answers += queue.get(timeout=60)
    for worker in [*threads, *processes]:
        worker.join(timeout=60)
    assert len(answers) == (THREADS + PROCESSES) * MAILS
    slots = [at for allowed, booked, at in answers if allowed or booked]
    assert len(slots) > 5, "the fleet should have admitted or booked mails"
    assert any(booked for _, booked, _ in answers), "the sender quota should have made mails wait"
    assert _sender_over(slots) == []
