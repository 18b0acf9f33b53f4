"""The ledger stores apart from their contract (tests/records/test_contract_ledger.py): the memory
ledger's own clock, the Redis ledger's keys, scripts and outage."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest

from devservers.redis_servers import RedisServer
from mailer import BackendUnavailable, ManualClock
from mailer.records.ledger import SENT_TTL, Claimed, MemoryLedger, RedisLedger, Superseded, Turn
from mailer.records.ledger import redis as redis_ledger
from mailer.records.ledger.base import FIRST_SEEN_TTL
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
    """Keys are <ns>:claim:{id} (lease end, first_seen, owner; PX lease, or a day with a
    first_seen kept) and <ns>:sent:{id} (JSON, EX SENT_TTL)."""
    client = client_from_url(redis_url)
    ledger = RedisLedger(client, redis_url, namespace="ns")
    assert ledger.begin("m-1", "w1", 30) is True
    until, first, owner = (client.get("ns:claim:{m-1}") or b"").split(b":", 2)
    now_ms = int(client.time()[0]) * 1000
    assert (first, owner) == (b"", b"w1") and 29_000 < int(until) - now_ms <= 31_000
    assert 29_000 < client.pttl("ns:claim:{m-1}") <= 30_000
    assert ledger.begin("m-1", "w1", 30, first_seen=12.5) == Claimed(12.5)
    assert (client.get("ns:claim:{m-1}") or b"").split(b":", 2)[1:] == [b"12.5", b"w1"]
    assert FIRST_SEEN_TTL - 60 < client.ttl("ns:claim:{m-1}") <= FIRST_SEEN_TTL
    ledger.unclaim("m-1", "w1")
    assert client.get("ns:claim:{m-1}") == b"0:12.5:", "given back, first_seen kept"
    assert ledger.begin("m-1", "w2", 30, first_seen=99.0) == Claimed(12.5)
    ledger.record(sent("m-1"))
    assert client.exists("ns:claim:{m-1}") == 0
    assert json.loads(client.get("ns:sent:{m-1}")) == sent("m-1").as_dict()
    assert SENT_TTL - 60 < client.ttl("ns:sent:{m-1}") <= SENT_TTL
    assert sorted(client.keys("*")) == [b"ns:sent:{m-1}"]
    assert RedisLedger(client, redis_url).begin("m-1", "w2", 30) is True, "namespaces are apart"
    client.close()


@pytest.mark.redis
def test_redis_reads_the_claims_0_1_0_wrote(redis_url: str) -> None:
    """A claim as 0.1.0 wrote it (the owner alone, PX lease) is held while it lives (begin
    refuses another owner, the hand-off counts nothing, its owner gives it back); then a run
    claims the mail with its own first_seen, and the record leaves only the sent marker."""
    client = client_from_url(redis_url)
    ledger = RedisLedger(client, redis_url, namespace="old")
    client.set("old:claim:{m}", "w1", px=30_000)
    assert ledger.begin("m", "w2", 30) is False
    assert ledger.handoff("m") == 0
    ledger.unclaim("m", "w2")
    assert client.get("old:claim:{m}") == b"w1", "not w2's to give back"
    ledger.unclaim("m", "w1")
    assert client.exists("old:claim:{m}") == 0
    assert ledger.begin("m", "w2", 30, first_seen=99.0) == Claimed(99.0)
    ledger.record(sent("m"))
    assert sorted(client.keys("old:*")) == [b"old:sent:{m}"]
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


@pytest.mark.redis
def test_redis_a_parked_first_turn_leaves_the_ledger_nothing(redis_url: str) -> None:
    """With the schedule's payloads hash known (one server): a first run's claim, given back,
    goes once its mail is parked (the payload carries first_seen); a late copy of the first
    message (turn 0, delivered again: ``Turn.copy``) then ends at its begin, a stale copy, and
    leaves nothing either; the next run (turn 1) claims as usual, and a first message whose
    mail has no entry too. A first message not flagged as a copy looks in no schedule (one
    command fewer for every first delivery): it claims as a first run."""
    client = client_from_url(redis_url)
    ledger = RedisLedger(client, redis_url, namespace="ns")
    assert ledger.parked("m-1") is False, "not wired: nothing dropped"
    assert ledger.recognise_parked("ns:{schedule:mail}:payloads")
    first = Turn(0)
    assert ledger.begin("m-1", "w1", 30, first_seen=12.5, turn=first) == Claimed(12.5)
    ledger.unclaim("m-1", "w1")
    client.hset("ns:{schedule:mail}:payloads", "m-1", b"[4,...]")  # parked
    assert ledger.parked("m-1") is True
    assert client.keys("ns:*{m-1}*") == []
    copy = Turn(0, copy=True)
    assert ledger.begin("m-1", "w9", 30, first_seen=40.0, turn=copy) == Superseded(1)
    assert client.keys("ns:*{m-1}*") == [], "the stale copy left no trace"
    assert ledger.begin("m-1", "w2", 30, turn=Turn(1, "w1")) is True, "the parked mail's run"
    assert ledger.begin("m-2", "w3", 30, first_seen=41.0, turn=copy) == Claimed(41.0)
    client.hset("ns:{schedule:mail}:payloads", "m-3", b"[4,...]")
    assert ledger.begin("m-3", "w4", 30, first_seen=42.0, turn=first) == Claimed(42.0)
    client.close()


@pytest.mark.redis
def test_redis_parked_keeps_a_claim_a_run_holds(redis_url: str) -> None:
    """``parked`` deletes a given-back claim only: one a run holds (a copy that took it since)
    stays, and so does a claim as 0.1.0 wrote it (the owner alone)."""
    client = client_from_url(redis_url)
    ledger = RedisLedger(client, redis_url, namespace="ns")
    assert ledger.recognise_parked("ns:{schedule:mail}:payloads")
    assert ledger.begin("m-1", "w1", 30, first_seen=12.5) == Claimed(12.5)
    assert ledger.parked("m-1") is False and client.exists("ns:claim:{m-1}") == 1
    client.set("ns:claim:{m-2}", "w-old", px=30_000)
    assert ledger.parked("m-2") is False and client.exists("ns:claim:{m-2}") == 1
    assert ledger.parked("m-3") is False, "no claim"
    client.close()


def test_memory_parked_keeps_first_seen() -> None:
    """The memory ledger reads no schedule: a parked mail keeps its first_seen there."""
    ledger = MemoryLedger()
    assert ledger.begin("m", "w1", LONG, first_seen=12.5) == Claimed(12.5)
    ledger.unclaim("m", "w1")
    assert ledger.parked("m") is False
    assert ledger.begin("m", "w2", LONG, first_seen=40.0) == Claimed(12.5)


@pytest.mark.parametrize(
    "script",
    [
        redis_ledger.BEGIN_SCRIPT,
        redis_ledger.UNCLAIM_SCRIPT,
        redis_ledger.RECORD_SCRIPT,
        redis_ledger.PARKED_SCRIPT,
    ],
)
def test_each_script_header_names_every_key_and_argument_it_uses(script: str) -> None:
    """A script's opening comment documents each KEYS[i] and ARGV[i] its code reads."""
    assert script.startswith("--[[\nmailguard ledger, ")
    header, _, code = script.partition("]]")
    used = set(re.findall(r"(?:KEYS|ARGV)\[\d\]", code))
    assert used, "the code reads its keys and arguments"
    for name in sorted(used):
        assert re.search(rf"^{re.escape(name)} ", header, re.MULTILINE), f"{name} is undocumented"
