"""A shared scope's backlog: bounded by ``MAILGUARD_MAX_BOOKINGS``, refused when its keys hold
foreign data, expired when nothing is booked, kept across a Redis restart (AOF)."""

from __future__ import annotations

import struct

import pytest
import redis

from devservers.redis_servers import RedisClusterServers, RedisServer
from mailer import Kinds, Limiter, ManualClock, Policy
from mailer.errors import CorruptState
from mailer.factory import memory_guard
from mailer.guard import GuardConfig, MailRequest
from mailer.limits.decision import backlog_full
from mailer.limits.stores.gcra_backlog import write_gcra_backlog
from mailer.mail.transports import MemoryTransport
from mailer.records.ledger import MemoryLedger
from mailer.settings import Settings

START = 1_700_000_000.0
WEEK = 7 * 86_400.0


@pytest.mark.parametrize(
    "text", ["recipient: 1/60s; sender: 2/1s", "recipient: 1/60s; sender: 2/1s gcra"]
)
@pytest.mark.parametrize("where", ["memory", "redis", "cluster"])
def test_a_full_sender_scope_refuses_the_next_booking_naming_the_scope(
    text: str, where: str, redis_url: str, cluster: RedisClusterServers
) -> None:
    """With max_bookings=6 the sender scope keeps 6 entries: the 7th mail is refused (scope
    sender, no tier), the same on memory, Redis and Cluster; a release makes room again."""
    clock = ManualClock(START)
    url = {"memory": "memory://", "redis": redis_url, "cluster": cluster.url}[where]
    limiter = Limiter.from_url(
        url,
        Policy.parse(text),
        clock=clock,
        secret="s",
        namespace=f"bound-{where}-{len(text)}",
        max_bookings=6,
    )
    try:
        answers = [
            limiter.acquire(f"r{i}@example.com", mail_id=f"m{i}", max_wait=WEEK) for i in range(9)
        ]
        # sliding keeps admissions and bookings (6); gcra lists bookings only (2 admitted now)
        kept = 8 if "gcra" in text else 6
        assert all(d.allowed or d.booked for d in answers[:kept])
        refused = answers[kept]
        assert refused.refused and backlog_full(refused), refused
        assert refused.scope == "sender" and refused.tier is None
        assert refused.wait_ms == refused.at_ms - round(START * 1000) > 0
        assert limiter.peek("r99@example.com").wait > 0  # peeking is never refused
        assert limiter.release("r5@example.com", "m5")
        again = limiter.acquire(f"r{kept}@example.com", mail_id=f"m{kept}", max_wait=WEEK)
        assert again.booked and not backlog_full(again)
    finally:
        limiter.close() if where != "memory" else None


def test_the_guard_drops_a_mail_the_full_scope_refuses_naming_the_variable(
    clock: ManualClock,
) -> None:
    """The guard records ``dropped`` / ``rate_limited`` with a detail naming
    MAILGUARD_MAX_BOOKINGS, never a crash."""
    policy = Policy.parse("recipient: 1/60s; sender: 1/1s", name="recipient")
    limiter = Limiter.from_url("memory://", policy, clock=clock, max_bookings=3)
    guard = memory_guard(
        limiter,
        MemoryLedger(clock),
        MemoryTransport(),
        kinds=Kinds.defaults(),
        config=GuardConfig(),
        clock=clock,
    )
    outcomes = [
        guard.process(
            MailRequest(to=f"u{i}@example.com", mail_id=f"g{i}", subject="Hi", body="x")
        ).outcome
        for i in range(4)
    ]
    assert [o.status for o in outcomes] == ["sent", "deferred", "deferred", "dropped"]
    last = outcomes[3]
    assert last.reason == "rate_limited"
    assert last.detail is not None and "MAILGUARD_MAX_BOOKINGS" in last.detail
    assert "sender" in last.detail


def test_max_bookings_is_a_setting_with_a_floor() -> None:
    """MAILGUARD_MAX_BOOKINGS is read from the environment; below 1000 it is refused naming
    the variable."""
    assert Settings.from_env({}).max_bookings == 1_000_000
    assert Settings.from_env({"MAILGUARD_MAX_BOOKINGS": "200000"}).max_bookings == 200_000
    with pytest.raises(ValueError, match="MAILGUARD_MAX_BOOKINGS"):
        Settings.from_env({"MAILGUARD_MAX_BOOKINGS": "10"})
    with pytest.raises(ValueError, match="MAILGUARD_MAX_BOOKINGS"):
        Settings.from_env({"MAILGUARD_MAX_BOOKINGS": "many"})


def _sender_key(limiter: Limiter) -> str:
    return limiter.storage_key("sender", "sender")


@pytest.mark.parametrize(
    ("suffix", "value", "why"),
    [
        (":g1", b"12ab", "is not a gcra bucket"),
        (":g1", b"5|" + b"\x00" * 13, "is not a gcra bucket"),
        (":f1", b"lots", "is not a count"),
    ],
)
def test_foreign_data_in_a_shared_key_is_refused_with_a_clear_error(
    redis_url: str, suffix: str, value: bytes, why: str
) -> None:
    """Bytes mailguard did not write in a sender key: CorruptState naming the scope and the
    hashed key, never the recipient, and nothing decoded or overwritten."""
    tier = {":g1": "2/1s gcra", ":f1": "2/1d fixed"}[suffix]
    limiter = Limiter.from_url(
        redis_url,
        Policy.parse(f"sender: {tier}"),
        clock=ManualClock(START),
        secret="s",
        max_bookings=8,
    )
    client = redis.Redis.from_url(redis_url)
    key = _sender_key(limiter) + suffix
    if suffix == ":f1":
        key += ":1699920000000"  # the 1d window holding START (UTC midnight)
    client.set(key, value)
    with pytest.raises(CorruptState, match=why) as caught:
        limiter.acquire("secret-reader@example.com", max_wait=60)
    message = str(caught.value)
    assert "sender scope" in message and "secret-reader" not in message
    assert "\n" not in message
    assert client.get(key) == value  # left as it was, for the operator to look at
    client.close()
    limiter.close()


def test_foreign_bytes_in_the_recipients_log_are_refused(redis_url: str) -> None:
    """The recipient's log (``:l``) holding bytes that are no packed log: CorruptState naming
    the recipient scope, never the address, and the key left as it was."""
    limiter = Limiter.from_url(
        redis_url,
        Policy.parse("recipient: 2/1s; sender: 2/1s gcra"),
        clock=ManualClock(START),
        secret="s",
    )
    client = redis.Redis.from_url(redis_url)
    key = limiter.storage_key("recipient", "secret-reader@example.com") + ":l"
    client.set(key, b"\x00\x01\x02")
    with pytest.raises(CorruptState, match="is not a packed log") as caught:
        limiter.acquire("secret-reader@example.com", max_wait=60)
    assert "recipient scope" in str(caught.value) and "secret-reader" not in str(caught.value)
    assert client.get(key) == b"\x00\x01\x02"
    client.close()
    limiter.close()


@pytest.mark.parametrize(
    ("suffix", "write", "why"),
    [
        (":z", lambda c, k: c.hset(k, "x", "1"), "is not a sorted set"),
        (":z", lambda c, k: c.zadd(k, {"junk": 1_700_000_000_500}), "holds a slot"),
        (":z", lambda c, k: c.zadd(k, {"1700000000500:99999999": 1_700_000_000_500}), "slot"),
        (":h", lambda c, k: c.set(k, "x"), "is not a hash"),
        (":h", lambda c, k: c.hset(k, "n", "many"), "holds a count"),
        (":h", lambda c, k: c.hset(k, "n", "999999999"), "more than MAILGUARD_MAX_BOOKINGS"),
        (":h", lambda c, k: c.hset(k, "9:3", "1,2"), "holds a field"),
        (":h", lambda c, k: c.hset(k, "1:3", "soon"), "holds a field"),
        (":g1", lambda c, k: c.hset(k, "x", "1"), "is not a string"),
        (":G1", lambda c, k: c.set(k, "x"), "is not a hash"),
        (":G1", lambda c, k: c.hset(k, "h", "soon"), "is not a gcra bucket"),
        (
            ":G1",
            lambda c, k: c.hset(k, mapping={"h": "0,0,1,2;2", "i": "x", "j": ""}),
            "a gcra bucket",
        ),
        (
            ":G1",
            lambda c, k: c.hset(k, mapping={"h": "0,0,99,2;2", "i": "", "j": ""}),
            "a gcra bucket",
        ),
        (
            ":G1",
            lambda c, k: c.hset(k, mapping={"h": "0,0,999999999,2;2", "i": "", "j": ""}),
            "MAX",
        ),
    ],
)
def test_a_shared_key_mailguard_did_not_write_is_refused(
    redis_url: str, suffix: str, write: object, why: str
) -> None:
    """Another type, or members and fields mailguard never writes, in the sender scope's keys
    (the log's sorted set and hash, a gcra tier's floor string or its hash): refused naming the
    scope, not overwritten."""
    tier = "2/1s gcra" if suffix in {":g1", ":G1"} else "2/1s"
    limiter = Limiter.from_url(
        redis_url, Policy.parse(f"sender: {tier}"), clock=ManualClock(START), secret="s"
    )
    client = redis.Redis.from_url(redis_url)
    key = _sender_key(limiter) + suffix
    write(client, key)  # type: ignore[operator]
    before = client.dump(key)
    with pytest.raises(CorruptState, match=why) as caught:
        limiter.acquire("ada@example.com", max_wait=60)
    assert "sender scope" in str(caught.value) and "ada" not in str(caught.value)
    assert str(caught.value).endswith("(the scope then starts empty)"), "one clean line"
    assert client.dump(key) == before
    client.close()
    limiter.close()


@pytest.mark.parametrize("tier", ["14/1s", "14/1s gcra"])
def test_the_sender_keys_expire_when_nothing_is_booked(redis_url: str, tier: str) -> None:
    """Released to the last booking, the sender scope keeps no key; booked, its keys expire
    once the last booking has left every window (plus the given clock's hour of slack)."""
    clock = ManualClock(START)
    limiter = Limiter.from_url(
        redis_url, Policy.parse(f"recipient: 1/60s; sender: {tier}"), clock=clock, secret="s"
    )
    client = redis.Redis.from_url(redis_url)
    base = _sender_key(limiter)
    for i in range(30):
        assert limiter.acquire(f"r{i}@example.com", mail_id=f"m{i}", max_wait=60).booked or i < 14
    keys = client.keys(base + ":*")
    assert keys and all(0 < client.pttl(k) <= 3_600_000 + 3_000 for k in keys)
    for i in range(30):
        assert limiter.release(f"r{i}@example.com", f"m{i}")
    leftover = [k for k in client.keys(base + ":*") if client.pttl(k) > 3_600_000 + 2_000]
    assert leftover == []
    client.close()
    limiter.close()


@pytest.mark.parametrize("tier", ["2/1s", "2/1s gcra"])
def test_bookings_survive_a_redis_restart_with_aof(tier: str) -> None:
    """A redis-server with appendonly (fsync always) killed and started again keeps every
    booking of the sender scope: the same mail gets its slot back, the next is booked after."""
    server = RedisServer(extra_args=("--appendonly", "yes", "--appendfsync", "always")).start()
    try:
        clock = ManualClock(START)
        policy = Policy.parse(f"recipient: 1/60s; sender: {tier}")
        limiter = Limiter.from_url(server.url, policy, clock=clock, secret="s")
        slots = [
            limiter.acquire(f"r{i}@example.com", mail_id=f"m{i}", max_wait=WEEK).at_ms
            for i in range(40)
        ]
        limiter.close()
        server.restart()
        again = Limiter.from_url(server.url, policy, clock=clock, secret="s")
        assert [
            again.acquire(f"r{i}@example.com", mail_id=f"m{i}", max_wait=WEEK).at_ms
            for i in range(40)
        ] == slots
        after = again.acquire("new@example.com", mail_id="n", max_wait=WEEK)
        assert after.booked and after.at_ms > slots[-1]
        again.close()
    finally:
        server.cleanup()


def _commands(client: redis.Redis) -> dict[str, int]:
    """Redis's count of calls per command since the last reset (script calls included)."""
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def _fill_sender_log(client: redis.Redis, base: str, first_ms: int, count: int) -> None:
    """``count`` bookings of a newsletter under ``sender: 14/1s`` at share 0.5, as the limiter
    stores them: 7 entries a second, one slot each (``<base>:z``), and their number."""
    pipe = client.pipeline(transaction=False)
    for second in range(count // 7):
        ms = first_ms + 1000 * second
        pipe.zadd(f"{base}:z", {f"{ms}:7": ms})
    pipe.hset(f"{base}:h", "n", str(count // 7 * 7))
    pipe.pexpire(f"{base}:z", 86_400_000)
    pipe.pexpire(f"{base}:h", 86_400_000)
    pipe.execute()


def test_a_decision_after_50000_bookings_makes_as_many_redis_calls_as_after_10(
    redis_url: str,
) -> None:
    """Under sender: 14/1s a newsletter mail booked after 50 000 others (share 0.5) and a code
    mail that goes at once make the same number of Redis calls, and read the same slots, as
    with 10 bookings: what a decision touches does not grow with the backlog."""
    client = redis.Redis.from_url(redis_url)
    calls = {}
    for count in (14, 50_001):
        clock = ManualClock(START)
        limiter = Limiter.from_url(
            redis_url,
            Policy.parse("recipient: 1/60s; sender: 14/1s"),
            clock=clock,
            secret="s",
            namespace=f"flat-{count}",
        )
        base = _sender_key(limiter)
        _fill_sender_log(client, base, int(START * 1000) + 1, count)
        first = limiter.acquire("warm@example.com", max_wait=WEEK, share=0.5)  # finds the end
        assert first.booked and first.at_ms == int(START * 1000) + 1 + 1000 * (count // 7)
        client.config_resetstat()
        bulk = [limiter.acquire(f"b{i}@example.com", max_wait=WEEK, share=0.5) for i in range(20)]
        code = limiter.acquire("code@example.com", max_wait=WEEK)
        calls[count] = _commands(client)
        assert all(d.booked and d.at_ms >= first.at_ms for d in bulk)
        assert code.allowed, "a code mail goes at once before the bulk bookings"
        limiter.close()
    small, large = calls[14], calls[50_001]
    assert large["evalsha"] == small["evalsha"] == 21
    assert sum(large.values()) <= sum(small.values()) + 2, (small, large)
    assert large.get("zrangebyscore", 0) <= small.get("zrangebyscore", 0) + 2, (small, large)
    client.close()


def _fill_gcra_bucket(client: redis.Redis, base: str, first_ms: int, count: int) -> None:
    """``count`` bookings of a newsletter under ``sender: 14/1s gcra`` at share 0.5, one each
    share interval, written into the tier's hash as the limiter stores them."""
    step = -(-1_000_000 // 7)
    bookings = [(-(-(first_ms * 1000 + i * step) // 1000) * 1000, i + 1) for i in range(count)]
    write_gcra_backlog(client, f"{base}:G1", bookings, limit=14, window_ms=1000)


def test_a_gcra_decision_after_50000_bookings_makes_the_redis_calls_of_10(
    redis_url: str,
) -> None:
    """Under sender: 14/1s gcra, newsletter mails booked at the end of 50 000 others (the worst
    order: the share's bookings fill it, the tier's own view keeps room at the front) and a
    code mail that goes at once make the Redis calls they make after 10, but for the last
    page's appended bytes (read, dropped or appended to): the search skips the front group and
    the last page by their summaries (no more page reads, HGET, than after 10), so what a
    decision touches does not grow with the backlog."""
    client = redis.Redis.from_url(redis_url)
    calls = {}
    for count in (10, 50_000):
        clock = ManualClock(START)
        limiter = Limiter.from_url(
            redis_url,
            Policy.parse("recipient: 1/60s; sender: 14/1s gcra"),
            clock=clock,
            secret="s",
            namespace=f"flat-gcra-{count}",
        )
        base = _sender_key(limiter)
        _fill_gcra_bucket(client, base, int(START * 1000) + 1, count)
        warm = [limiter.acquire(f"w{i}@example.com", max_wait=WEEK, share=0.5) for i in range(8)]
        assert warm[-1].booked, "the room at the front is taken: bulk mails go to the end"
        client.config_resetstat()
        bulk = [limiter.acquire(f"b{i}@example.com", max_wait=WEEK, share=0.5) for i in range(20)]
        code = limiter.acquire("code@example.com", max_wait=WEEK)
        calls[count] = _commands(client)
        assert all(d.booked and d.at_ms > int(START * 1000) + count * 142 for d in bulk)
        assert code.allowed, "a code mail goes at once before the bulk bookings"
        limiter.close()
    small, large = calls[10], calls[50_000]
    assert large["evalsha"] == small["evalsha"] == 21
    assert large.get("hget", 0) <= small.get("hget", 0), (small, large)
    # the last page's bytes appended since it was written whole: read (GET) when the search
    # reads that page, then appended to (APPEND) or dropped (DEL, the page written whole)
    tail = ("get", "del", "append")
    for seen in (small, large):
        assert sum(seen.get(k, 0) for k in tail) <= 2 * 21, (small, large)
    others = {k: v for k, v in large.items() if k != "hget" and k not in tail}
    assert others == {k: v for k, v in small.items() if k != "hget" and k not in tail}, (
        small,
        large,
    )
    client.close()


def test_the_guard_defers_a_mail_whose_scope_key_holds_foreign_data(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Foreign data in the sender key: the mail is deferred (``limiter_unavailable``, the
    refusal in its detail and an ERROR line), never raised out of the guard nor sent; once the
    key is removed the next run sends it."""
    clock = ManualClock(START)
    limiter = Limiter.from_url(
        redis_url, Policy.parse("sender: 2/1s"), clock=clock, secret="s", namespace="corrupt"
    )
    client = redis.Redis.from_url(redis_url)
    key = _sender_key(limiter) + ":h"
    client.set(key, "not a hash")
    transport = MemoryTransport()
    guard = memory_guard(
        limiter, MemoryLedger(clock), transport, kinds=Kinds.defaults(), clock=clock
    )
    request = MailRequest(to="ann@example.com", mail_id="c1", subject="Hi", body="x")
    with caplog.at_level("ERROR", logger="mailguard"):
        step = guard.process(request)
    assert (step.outcome.status, step.outcome.reason) == ("deferred", "limiter_unavailable")
    assert step.outcome.detail is not None and "is not a hash" in step.outcome.detail
    assert any("is not a hash" in r.getMessage() for r in caplog.records)
    assert transport.sent == []
    client.delete(key)
    assert guard.process(request, step.progress).outcome.status == "sent"
    client.close()
    limiter.close()


@pytest.mark.parametrize(
    "text",
    [
        "recipient: 2/1s gcra; sender: 100/1s",
        "recipient: 2/1s gcra, 3/10s fixed; tenant: 50/1s gcra",
        "recipient: 1/1s, 2/5s gcra; sender: 3/1s gcra",
    ],
)
def test_bookings_in_a_recipient_gcra_tier_are_read_back(text: str, redis_url: str) -> None:
    """A gcra tier of the recipient scope keeps its bookings in its hash, whose string is gone:
    the next decisions read them (the one EXISTS for missing keys covers every scope's gcra
    hash, not only the shared ones), with the memory store's answers."""
    answers = {}
    for where, url in (("memory", "memory://"), ("redis", redis_url)):
        clock = ManualClock(START)
        limiter = Limiter.from_url(
            url, Policy.parse(text), clock=clock, secret="s", namespace=f"rg-{len(text)}"
        )
        got = []
        for i in range(12):
            to = "a@example.com" if i % 3 else "b@example.com"
            d = limiter.acquire(to, tenant="t", mail_id=f"m{i}", max_wait=60.0)
            got.append((d.allowed, d.booked, d.at, d.remaining))
            if i == 6:
                assert limiter.release(to, mail_id=f"m{i}", tenant="t")
            clock.advance(0.15)
        answers[where] = got
        limiter.close()
    assert answers["redis"] == answers["memory"]


#: Policies of the common call's quick decision (no shared sliding log): with a gcra tier (a
#: booking makes it keep bookings, so later mails take the full decision) and without.
FAST = [
    "recipient: 5/1s, 20/1h; sender: 100/1s gcra; tenant: 100/1d fixed",
    "recipient: 5/1s, 20/1h; tenant: 100/1d fixed",
]


def _both(redis_url: str, text: str, steps: object) -> dict[str, list[tuple[object, ...]]]:
    """Run ``steps(limiter, clock)`` on the memory store and on Redis; their answers."""
    out = {}
    for where, url in (("memory", "memory://"), ("redis", redis_url)):
        clock = ManualClock(START)
        limiter = Limiter.from_url(
            url, Policy.parse(text), clock=clock, secret="s", namespace=f"fast-{where}{len(text)}"
        )
        out[where] = steps(limiter, clock)  # type: ignore[operator]
        limiter.close()
    return out


@pytest.mark.parametrize("text", FAST)
def test_a_mail_after_the_recipients_booking_ahead_is_booked_behind_it(
    text: str, redis_url: str
) -> None:
    """Every tier admits now, but the recipient's last entry is ahead (a hold's booking, even
    1 ms ahead): the next mail goes behind it, not now (the common call's quick decision
    leaves such a mail to the full one)."""

    def steps(limiter: Limiter, clock: ManualClock) -> list[tuple[object, ...]]:
        got = []
        for ahead in (0.001, 0.5):
            to = f"r{ahead}@example.com"
            first = limiter.acquire(
                to, tenant="t", mail_id=f"a{ahead}", max_wait=60.0, not_before=clock() + ahead
            )
            second = limiter.acquire(to, tenant="t", mail_id=f"b{ahead}", max_wait=60.0)
            third = limiter.acquire(to, tenant="t")
            assert first.booked and second.booked and second.at >= first.at, (first, second)
            assert third.refused
            got += [(d.allowed, d.booked, d.at, d.remaining) for d in (first, second, third)]
        return got

    answers = _both(redis_url, text, steps)
    assert answers["redis"] == answers["memory"]


@pytest.mark.parametrize("text", FAST)
def test_the_same_mail_asked_again_holds_its_slot_and_takes_no_more(
    text: str, redis_url: str
) -> None:
    """A mail admitted now and asked again under its id gets the same slot and consumes nothing
    in any scope (its tag is the last entry of the recipient's log)."""

    def steps(limiter: Limiter, clock: ManualClock) -> list[tuple[object, ...]]:
        got = []
        for i in range(3):
            first = limiter.acquire("same@example.com", tenant="t", mail_id=f"m{i}")
            again = limiter.acquire("same@example.com", tenant="t", mail_id=f"m{i}")
            assert first.allowed and again.allowed and again.at == first.at
            assert again.remaining == first.remaining, (first, again)
            got += [(d.allowed, d.at, d.remaining) for d in (first, again)]
            clock.advance(0.25)
        return got

    answers = _both(redis_url, text, steps)
    assert answers["redis"] == answers["memory"]


def test_gcra_pages_are_small_where_mails_go_into_them(redis_url: str) -> None:
    """A page a booking goes into, not after the last one, is cut in pages of an eighth of the
    cap: in a half-rate backlog of 20 000 in full pages and groups (about 4·n^(1/3) bookings
    and n^(1/3) pages: 108 and 26), the mails booked into the room at the front each read,
    walk and rewrite a page of at most 13 bookings there."""
    client = redis.Redis.from_url(redis_url)
    limiter = Limiter.from_url(
        redis_url,
        Policy.parse("recipient: 1/60s; sender: 14/1s gcra"),
        clock=ManualClock(START),
        secret="s",
        namespace="front-pages",
    )
    base = _sender_key(limiter)
    _fill_gcra_bucket(client, base, int(START * 1000) + 1, 20_000)
    for i in range(13):  # the bucket's burst at now
        assert limiter.acquire(f"w{i}@example.com", max_wait=WEEK).allowed
    key = f"{base}:G1"
    per = 5 + 3  # a group record: id, first, last, bookings, pages, then b, g, theta
    index = client.hget(key, "i") + client.hget(key, "j")
    groups = [
        struct.unpack(f">{per}d", index[k : k + 8 * per]) for k in range(0, len(index), 8 * per)
    ]
    assert len(groups) == -(-20_000 // (108 * 26)), "full groups, as written"
    assert [int(g[3]) for g in groups[:-1]] == [108 * 26] * (len(groups) - 1)
    booked = [limiter.acquire(f"b{i}@example.com", max_wait=WEEK) for i in range(30)]
    last_ms = int(START * 1000) + 1 + -(-19_999 * -(-1_000_000 // 7) // 1000)
    assert all(d.booked and d.at_ms < last_ms for d in booked)
    first = struct.unpack(f">{per}d", client.hget(key, "i")[: 8 * per])
    gid = int(first[0])
    raw = client.hget(key, f"i{gid}") + (client.hget(key, f"k{gid}") or b"")
    pages = [struct.unpack(">7d", raw[k : k + 56]) for k in range(0, len(raw), 56)]
    for d in booked:
        holding = [p for p in pages if p[1] <= d.at_ms * 1000 <= p[2]]
        assert holding and all(p[3] <= 108 // 8 for p in holding), (d.at_ms, holding)
    limiter.close()
    client.close()
