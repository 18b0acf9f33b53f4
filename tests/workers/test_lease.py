"""The fleet lease (:mod:`workers.polling.lease`) on a real redis-server, its clock injected: one
holder at a time, what each look costs, the holder's renewal, a takeover once the holder's key is
gone, a holder that finds its lease in another's hands; and the promoter of a worker that does not
hold it reads nothing of the schedule or the outbox."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest
import redis

from devservers.celery_worker import client_app, worker_env
from mailer.errors import BackendUnavailable
from mailer.records.schedule import RedisSchedule
from mailer.settings import Settings
from tests.waiting import poll
from workers.polling.lease import Lease
from workers.polling.promoter import Promoter

pytestmark = [pytest.mark.redis]


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def _calls(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}


def _spent(client: redis.Redis, before: dict[str, int]) -> dict[str, int]:
    """Commands run since ``before`` (the ``INFO`` that read them out)."""
    after = _calls(client)
    spent = {k: v - before.get(k, 0) for k, v in after.items() if k != "info"}
    return {k: v for k, v in spent.items() if v}


def _expire_now(client: redis.Redis, key: str) -> None:
    """The lease's ttl ends (its holder died): the key expires within a millisecond."""
    client.pexpire(key, 1)
    poll(lambda: not client.exists(key), 5, "the lease's key to expire")


def test_one_holder_and_one_command_a_look(redis_url: str, client: redis.Redis) -> None:
    """Of three workers' leases one holds; a look within a renewal asks Redis nothing; the
    holder's renewal is one ``GETEX`` that restores the ttl, another's try one ``SET``."""
    clock = Clock()
    leases = [Lease(client, redis_url, "promoter:mail", clock=clock) for _ in range(3)]
    assert [lease.held() for lease in leases] == [True, False, False]
    holder, other = leases[0], leases[1]
    assert client.get(holder.key) == holder.token.encode()
    assert "{lease:promoter:mail}" in holder.key

    before = _calls(client)
    assert holder.held() and not other.held()  # within the renewal and the retry
    assert _spent(client, before) == {}

    client.pexpire(holder.key, 500)  # the ttl runs low ...
    clock.now += holder.ttl / 3
    before = _calls(client)
    assert holder.held()  # ... and the renewal restores it
    assert _spent(client, before) == {"getex": 1}
    assert client.pttl(holder.key) > 2_000

    clock.now += other.retry
    before = _calls(client)
    assert not other.held()
    assert _spent(client, before) == {"set": 1}


def test_a_dead_holders_lease_is_taken_at_the_next_try(redis_url: str, client: redis.Redis) -> None:
    """The holder stops renewing (killed): once its key expires, the next worker to try takes
    it; the old holder, back, finds it in another's hands and stops at its next look."""
    clock = Clock()
    first, second = (Lease(client, redis_url, "promoter:mail", clock=clock) for _ in range(2))
    assert first.held() and not second.held()
    _expire_now(client, first.key)
    assert not second.held(), "not before its retry"
    clock.now += second.retry
    assert second.held()
    assert client.get(second.key) == second.token.encode()
    clock.now += first.ttl / 3
    assert not first.held()
    assert not first.holding
    assert client.get(second.key) == second.token.encode(), "the new holder keeps it"


def test_a_holder_of_this_host_that_no_longer_runs_is_not_waited_for(
    redis_url: str, client: redis.Redis
) -> None:
    """A worker killed and started again on the same host: its old token names a process that
    is gone, so the lease is taken at the first try, its ttl not waited out. A holder of this
    host that runs, or of another host, keeps it until its key expires."""
    clock = Clock()
    key = Lease(client, redis_url, "promoter:mail", clock=clock).key
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, check=True, text=True)  # fmt: skip
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    host = socket.gethostname()
    try:
        for token, taken in (
            (f"{host}:{alive.pid}:0000", False),
            (f"elsewhere:{int(ended.stdout)}:0000", False),
            (f"{host}:{int(ended.stdout)}:0000", True),
        ):
            client.set(key, token, px=60_000)
            lease = Lease(client, redis_url, "promoter:mail", clock=clock)
            assert lease.held() is taken, token
            assert client.get(key) == (lease.token if taken else token).encode()
    finally:
        alive.kill()
        alive.wait()


def test_a_released_lease_is_free_at_once(redis_url: str, client: redis.Redis) -> None:
    """A worker that stops gives its lease up: the next try takes it, no ttl waited out; a
    release by a worker that lost the lease leaves the new holder's alone."""
    clock = Clock()
    first, second = (Lease(client, redis_url, "promoter:mail", clock=clock) for _ in range(2))
    assert first.held()
    first.release()
    assert not client.exists(first.key)
    assert second.held()
    first.release()  # not the holder: nothing
    assert client.get(second.key) == second.token.encode()


def test_leases_of_two_queues_are_apart(redis_url: str, client: redis.Redis) -> None:
    clock = Clock()
    mail = Lease(client, redis_url, "promoter:mail", clock=clock)
    bulk = Lease(client, redis_url, "promoter:bulk", clock=clock)
    assert mail.held() and bulk.held()


def test_a_lease_on_a_redis_that_is_down_is_not_held(client: redis.Redis) -> None:
    """Redis unreachable: ``BackendUnavailable`` names the ledger, and the lease is not held."""
    down = redis.Redis(port=1, socket_connect_timeout=0.2)
    lease = Lease(down, "redis://127.0.0.1:1/0", "promoter:mail")
    with pytest.raises(BackendUnavailable):
        lease.held()
    assert not lease.holding


def test_bad_lease_times_are_refused(client: redis.Redis) -> None:
    with pytest.raises(ValueError, match="positive ttl"):
        Lease(client, "redis://127.0.0.1:1/0", "x", ttl=0)


def test_a_promoter_without_the_lease_reads_nothing_of_the_schedule(
    redis_url: str, client: redis.Redis
) -> None:
    """Two promoters of one queue: the one that does not hold the lease spends one ``SET`` a
    retry and reads neither the schedule nor the outbox; once the holder's lease ends, it
    takes the lease and polls."""
    env = worker_env(redis_url, "memory://")
    url = env["MAILGUARD_LIMITER_URL"]
    app = client_app(env)
    ledger = redis.Redis.from_url(url)
    clock = Clock()
    holder = Lease(ledger, url, "promoter:mail", clock=clock)
    assert holder.held()
    promoter = Promoter(app, RedisSchedule(ledger, url), Settings.from_env(env))
    promoter.fleet_lease = Lease(ledger, url, "promoter:mail", retry=0.05)
    try:
        before = _calls(client)
        promoter.start()
        poll(lambda: _spent(client, before).get("set", 0) >= 3, 10, "three tries of the lease")
        promoter.stop()
        spent = _spent(client, before)
        assert set(spent) <= {"set", "del", "get"}, spent  # tries; the stop's release look
        _expire_now(client, holder.key)
        promoter = Promoter(app, RedisSchedule(ledger, url), Settings.from_env(env))
        promoter.fleet_lease = Lease(ledger, url, "promoter:mail", retry=0.05)
        before = _calls(client)
        promoter.start()
        poll(lambda: _spent(client, before).get("zrange", 0) >= 1, 10, "a look at the schedule")
        assert client.get(holder.key) == promoter.fleet_lease.token.encode()
    finally:
        promoter.stop()
        app.close()
        ledger.close()


def test_a_redis_without_getex_renews_in_one_round_trip(
    redis_url: str, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a Redis that does not know ``GETEX`` (before 6.2) the holder renews with a
    ``PEXPIRE`` and a ``GET`` in one pipeline, and keeps its lease."""
    clock = Clock()
    lease = Lease(client, redis_url, "promoter:mail", clock=clock)
    assert lease.held()

    def unknown(*_: object, **__: object) -> None:
        raise redis.ResponseError("unknown command 'GETEX'")

    monkeypatch.setattr(client, "getex", unknown)
    client.pexpire(lease.key, 500)
    clock.now += lease.ttl / 3
    before = _calls(client)
    assert lease.held()
    assert _spent(client, before) == {"pexpire": 1, "get": 1}
    assert client.pttl(lease.key) > 2_000
