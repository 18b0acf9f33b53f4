"""What only the Redis backend must do: hashed keys, TTLs, the server's clock, NOSCRIPT, outages."""

from __future__ import annotations

import time

import pytest
import redis

from devservers.redis_servers import RedisServer
from mailer import BackendUnavailable, Limiter, ManualClock, Policy
from mailer.limits.stores.redis import SlidingRedisStore

ADA = "ada@example.com"
REFERENCE = Policy.parse("1/60s, 5/1h, 10/24h", name="recipient")


def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url)


def test_stored_keys_are_keyed_hashes_with_a_hash_tag(redis_url: str) -> None:
    """Redis holds `mailguard:{hash}` keys; neither key nor value contains the address."""
    limiter = Limiter.from_url(redis_url, REFERENCE, secret="k1")
    limiter.acquire(ADA, mail_id="m1")
    client = _client(redis_url)
    keys = client.keys("*")
    assert keys == [limiter.storage_key("recipient", ADA).encode()]
    assert keys[0].startswith(b"mailguard:{") and keys[0].endswith(b"}")
    assert b"ada" not in keys[0] and b"ada" not in client.get(keys[0])
    other = Limiter.from_url(redis_url, REFERENCE, secret="k2")
    assert other.storage_key("recipient", ADA) != limiter.storage_key("recipient", ADA), (
        "the secret keys the hash"
    )
    limiter.close()
    other.close()
    client.close()


def test_every_key_expires_when_its_newest_entry_leaves_the_longest_window(redis_url: str) -> None:
    """The TTL runs to the newest entry (a booking included) plus the longest window."""
    clock = ManualClock(1_700_000_000.0)
    limiter = Limiter.from_url(redis_url, REFERENCE, clock=clock, secret="s")
    limiter.acquire(ADA, mail_id="now")
    client = _client(redis_url)
    key = limiter.storage_key("recipient", ADA)
    slack = 3_600_000  # a simulated clock adds an hour to every TTL
    assert 86_399_000 + slack < client.pttl(key) <= 86_400_000 + slack
    limiter.acquire(ADA, mail_id="later", max_wait=3600)  # booked at +60 s
    assert 86_459_000 + slack < client.pttl(key) <= 86_460_000 + slack
    limiter.release(ADA, "later")
    limiter.release(ADA, "now")
    assert client.exists(key) == 0, "an empty log is deleted, not kept"
    limiter.close()
    client.close()


def test_full_reference_log_fits_in_200_bytes(redis_url: str) -> None:
    """A key with ten admissions of the reference policy costs at most 200 bytes (MEMORY USAGE)."""
    clock = ManualClock(1_700_000_000.0)
    limiter = Limiter.from_url(redis_url, REFERENCE, clock=clock, secret="s")
    for i in range(10):
        assert limiter.acquire(ADA, mail_id=f"00000000-0000-4000-8000-{i:012d}").allowed
        clock.advance(3_600)
    client = _client(redis_url)
    assert len(client.get(limiter.storage_key("recipient", ADA))) == 106
    assert client.memory_usage(limiter.storage_key("recipient", ADA)) <= 200
    limiter.close()
    client.close()


def test_server_clock_decides_not_the_clients(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without an injected clock, a client whose clock runs an hour fast still gets server time."""
    client = _client(redis_url)
    seconds, micros = client.time()
    server_ms = seconds * 1000 + micros // 1000
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + 3_600)  # the edge: this host's clock
    limiter = Limiter.from_url(redis_url, REFERENCE, secret="s")
    first = limiter.acquire(ADA)
    second = limiter.acquire(ADA)
    assert first.allowed and abs(first.at_ms - server_ms) < 5_000
    # The first admission is stored at server time rounded up to the ms (never early): +1 ms.
    assert second.refused and 55_000 < second.wait_ms <= 60_001
    assert 86_390_000 < client.pttl(limiter.storage_key("recipient", ADA)) <= 86_400_001, (
        "no slack in production"
    )
    limiter.close()
    client.close()


def test_script_is_reloaded_after_script_flush(redis_url: str) -> None:
    """After SCRIPT FLUSH (or a restart) the next decision loads the script again and succeeds."""
    limiter = Limiter.from_url(redis_url, REFERENCE, secret="s")
    assert isinstance(limiter.store, SlidingRedisStore)
    sha = limiter.store.script_sha
    client = _client(redis_url)
    assert limiter.acquire(ADA).allowed
    client.script_flush()
    assert client.script_exists(sha) == [False]
    assert limiter.acquire(ADA).refused
    client.script_flush()
    decisions = limiter.acquire_many([ADA, "bob@example.com"])
    assert [d.allowed for d in decisions] == [False, True]
    assert client.script_exists(sha) == [True]
    limiter.close()
    client.close()


def test_outage_raises_backend_unavailable_then_recovers(own_redis: RedisServer) -> None:
    """A stopped server raises BackendUnavailable naming the URL; after restart it just works."""
    url = f"redis://:hunter2@127.0.0.1:{own_redis.port}/0"
    _client(own_redis.url).config_set("requirepass", "hunter2")
    limiter = Limiter.from_url(url, REFERENCE, secret="s")
    assert limiter.acquire(ADA).allowed
    own_redis.stop()
    for call in (
        lambda: limiter.acquire(ADA),
        lambda: limiter.peek(ADA),
        lambda: limiter.release(ADA, "m"),
        lambda: limiter.reset(ADA),
        lambda: limiter.acquire_many([ADA]),
    ):
        with pytest.raises(BackendUnavailable) as raised:
            call()
        assert raised.value.backend == "limiter"
        assert str(raised.value).startswith("limiter backend redis://:***@127.0.0.1:")
        assert f"127.0.0.1:{own_redis.port}" in str(raised.value)
        assert "hunter2" not in str(raised.value)
    own_redis.start()
    _client(own_redis.url).config_set("requirepass", "hunter2")
    assert limiter.acquire(ADA).allowed, "the restarted server is empty; the limiter reconnects"
    limiter.close()


def test_unreachable_url_fails_fast(own_redis: RedisServer) -> None:
    """A URL where nothing listens raises BackendUnavailable within the connect timeout."""
    own_redis.stop()
    limiter = Limiter.from_url(own_redis.url, REFERENCE, secret="s")
    started = time.monotonic()
    with pytest.raises(BackendUnavailable, match="unavailable"):
        limiter.acquire(ADA)
    assert time.monotonic() - started < 10
    limiter.close()
