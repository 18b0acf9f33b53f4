"""The Redis backend on Redis Cluster and behind Sentinel, selected by URL."""

from __future__ import annotations

import pytest
import redis

from devservers.redis_servers import RedisClusterServers, RedisSentinel, RedisServer
from mailer import Limiter, Policy

POLICY = Policy.parse("1/60s, 5/1h, 10/24h", name="recipient")


def test_cluster_decides_for_keys_on_every_node(cluster: RedisClusterServers) -> None:
    """On a Cluster, keys spread over all nodes and every operation works (hash tags, scripts)."""
    limiter = Limiter.from_url(cluster.url, POLICY, secret="s")
    keys = [f"user{i}@example.com" for i in range(30)]
    assert all(limiter.acquire(k, mail_id=f"m-{k}").allowed for k in keys)
    assert all(d.refused for d in limiter.acquire_many(keys))
    booked = limiter.acquire(keys[0], mail_id="later", max_wait=3600)
    assert booked.booked and booked.wait_ms > 59_000
    assert limiter.release(keys[0], "later") and limiter.peek(keys[1]).refused
    limiter.reset(keys[1])
    assert limiter.peek(keys[1]).allowed
    holders = []
    for node in cluster.nodes:
        client = redis.Redis(port=node.port)
        holders.append(client.dbsize())
        client.close()
    assert all(count > 0 for count in holders), f"keys spread over every node: {holders}"
    limiter.close()
    # A recipient-only scoped policy (fixed and gcra tiers) keeps one hash tag: fine on a Cluster.
    scoped = Limiter.from_url(cluster.url, Policy.parse("2/1h gcra, 3/1d fixed"), secret="s")
    assert all(scoped.acquire(k).allowed for k in keys[:10])
    assert all(scoped.acquire(k).allowed for k in keys[:10])
    assert all(scoped.acquire(k).refused for k in keys[:10])
    scoped.close()


def test_sentinel_url_finds_the_master() -> None:
    """A redis+sentinel:// URL asks the sentinel for the master and limits there."""
    master = RedisServer().start()
    sentinel = RedisSentinel(master).start()
    try:
        limiter = Limiter.from_url(sentinel.url, POLICY, secret="s")
        assert limiter.acquire("ada@example.com").allowed
        assert limiter.acquire("ada@example.com").refused
        client = redis.Redis(port=master.port)
        assert client.exists(limiter.storage_key("recipient", "ada@example.com")) == 1
        client.close()
        limiter.close()
        scoped = Limiter.from_url(
            sentinel.url,
            Policy.parse("recipient: 1/60s; sender: 2/1h gcra; tenant: 3/1d fixed"),
            secret="s",
        )
        assert scoped.acquire("ada@example.com", tenant="acme").allowed
        assert scoped.acquire("bob@example.com", tenant="acme").allowed
        third = scoped.acquire("cy@example.com", tenant="acme")
        assert third.refused and third.scope == "sender"
        scoped.close()
    finally:
        sentinel.cleanup()
        master.cleanup()


@pytest.mark.parametrize(
    "url",
    ["redis+sentinel://127.0.0.1:1", "redis+sentinel://nohost/svc", "redis+sentinel://:x@h:z/s"],
)
def test_bad_sentinel_urls_are_refused(url: str) -> None:
    """A sentinel URL without a service or with a bad address raises ValueError."""
    with pytest.raises(ValueError, match="sentinel"):
        Limiter.from_url(url, POLICY, secret="s")
