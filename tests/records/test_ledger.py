"""The ledger stores apart from their contract (tests/records/test_contract_ledger.py): the memory
ledger's own clock, the Redis ledger's keys, scripts and outage."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest

from devservers.redis_servers import RedisServer
from mailer import BackendUnavailable, ManualClock
from mailer.records.ledger import SENT_TTL, MemoryLedger, RedisLedger
from mailer.records.ledger import redis as redis_ledger
from mailer.storage import client_from_url
from tests.records.test_contract_ledger import LONG, sent


def test_memory_forgets_an_outcome_after_sent_ttl() -> None:
    """The memory ledger keeps an outcome SENT_TTL seconds by its clock, then claims anew."""
    clock = ManualClock()
    ledger = MemoryLedger(clock)
    ledger.record(sent("m"))
    clock.advance(SENT_TTL - 1)
    assert ledger.begin("m", "w1", LONG) == sent("m")
    clock.advance(1)
    assert ledger.recorded("m") is None
    assert ledger.begin("m", "w1", LONG) is True


@pytest.mark.redis
def test_redis_keys_and_their_expiry(redis_url: str) -> None:
    """Keys are <ns>:claim:{id} (owner, PX lease) and <ns>:sent:{id} (JSON, EX SENT_TTL)."""
    client = client_from_url(redis_url)
    ledger = RedisLedger(client, redis_url, namespace="ns")
    assert ledger.begin("m-1", "w1", 30) is True
    assert client.get("ns:claim:{m-1}") == b"w1"
    assert 29_000 < client.pttl("ns:claim:{m-1}") <= 30_000
    ledger.record(sent("m-1"))
    assert client.exists("ns:claim:{m-1}") == 0
    assert json.loads(client.get("ns:sent:{m-1}")) == sent("m-1").as_dict()
    assert SENT_TTL - 60 < client.ttl("ns:sent:{m-1}") <= SENT_TTL
    assert sorted(client.keys("*")) == [b"ns:sent:{m-1}"]
    assert RedisLedger(client, redis_url).begin("m-1", "w2", 30) is True, "namespaces are apart"
    client.close()


@pytest.mark.redis
def test_redis_reloads_its_scripts_after_a_flush(redis_url: str) -> None:
    """Scripts dropped from the server's cache (SCRIPT FLUSH, a restart) are loaded again."""
    client = client_from_url(redis_url)
    ledger = RedisLedger(client, redis_url)
    assert ledger.begin("m", "w1", LONG) is True
    client.script_flush()
    assert ledger.begin("m", "w2", LONG) is False
    client.script_flush()
    ledger.unclaim("m", "w1")
    client.script_flush()
    ledger.record(sent("m"))
    assert ledger.begin("m", "w2", LONG) == sent("m")
    client.close()


@pytest.mark.redis
def test_redis_outage_raises_backend_unavailable_naming_the_ledger(own_redis: RedisServer) -> None:
    """A stopped server makes every method raise BackendUnavailable for the ledger, URL masked."""
    url = f"redis://:hunter2@127.0.0.1:{own_redis.port}/0"
    admin = client_from_url(own_redis.url)
    admin.config_set("requirepass", "hunter2")
    admin.close()
    client = client_from_url(url)
    ledger = RedisLedger(client, url)
    assert ledger.begin("m", "w1", LONG) is True
    own_redis.stop()
    calls: list[Callable[[], object]] = [
        lambda: ledger.begin("m", "w1", LONG),
        lambda: ledger.unclaim("m", "w1"),
        lambda: ledger.record(sent("m")),
        lambda: ledger.recorded("m"),
    ]
    for call in calls:
        with pytest.raises(BackendUnavailable) as raised:
            call()
        assert raised.value.backend == "ledger"
        message = str(raised.value)
        assert message.startswith(f"ledger backend redis://:***@127.0.0.1:{own_redis.port}/0 ")
        assert "hunter2" not in message
    own_redis.start()
    admin = client_from_url(own_redis.url)
    admin.config_set("requirepass", "hunter2")
    admin.close()
    assert ledger.begin("m", "w2", LONG) is True, "the restarted server is empty; it reconnects"
    client.close()


@pytest.mark.parametrize(
    "script", [redis_ledger.BEGIN_SCRIPT, redis_ledger.UNCLAIM_SCRIPT, redis_ledger.RECORD_SCRIPT]
)
def test_each_script_header_names_every_key_and_argument_it_uses(script: str) -> None:
    """A script's opening comment documents each KEYS[i] and ARGV[i] its code reads."""
    assert script.startswith("--[[\nmailguard ledger, ")
    header, _, code = script.partition("]]")
    used = set(re.findall(r"(?:KEYS|ARGV)\[\d\]", code))
    assert used, "the code reads its keys and arguments"
    for name in sorted(used):
        assert re.search(rf"^{re.escape(name)} ", header, re.MULTILINE), f"{name} is undocumented"
