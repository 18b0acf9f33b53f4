"""A master without replicas is not waited on: its scripts do not stall on ``WAIT 1``.

After a failover that promoted the only replica, the new master has none. A ``WAIT 1`` there
blocks its whole timeout (:data:`mailer.replica_ack.WAIT_MS`) for nothing, so
:class:`mailer.replica_ack.AcknowledgedRedis` counts the replicas (``INFO``, which does not
block) rather than wait, and waits again once one is back. The ``WAIT`` commands are counted
on the server (``INFO commandstats``), not timed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from devservers.redis_servers import RedisServer
from mailer import replica_ack
from mailer.replica_ack import AcknowledgedRedis
from tests.waiting import poll

pytestmark = [pytest.mark.redis]

SCRIPT = "return redis.call('INCR', KEYS[1])"


@pytest.fixture
def master() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.cleanup()


def waits(client: redis.Redis) -> int:
    """How many ``WAIT`` commands the server has run."""
    return int(client.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))


def test_a_master_alone_is_counted_not_waited_on(
    master: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replica_ack, "ALONE_RECHECK", 0.0)  # counted again before every write
    client = AcknowledgedRedis(port=master.port)
    plain = redis.Redis(port=master.port)
    assert client.eval(SCRIPT, 1, "n") == 1  # the first write finds out (one WAIT)
    assert waits(plain) == 1
    for n in range(2, 12):
        assert client.eval(SCRIPT, 1, "n") == n
    assert waits(plain) == 1, "a master without replicas was waited on again"

    replica = RedisServer(extra_args=("--replicaof", "127.0.0.1", str(master.port))).start()
    try:
        poll(
            lambda: plain.info("replication").get("slave0", {}).get("state") == "online",
            30,
            "the replica connected and in sync",
        )
        assert client.eval(SCRIPT, 1, "n") == 12
        assert waits(plain) == 2, "a master with a replica again was not waited on"
    finally:
        replica.cleanup()
        client.close()
        plain.close()
