"""Property tests of long shared backlogs: a newsletter booked ahead, then code mails, bulk
mails, releases and µs edges, on memory, Redis and Cluster; with the brute-force model.

The shared scopes keep hints of where nothing fits (:mod:`mailer.limits.shared_log`); these
traces make them matter: dozens of bookings ahead, searches that start inside a hint, releases
in the middle of a backlog that cut a hint short, admissions now among booked slots.
"""

from __future__ import annotations

import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devservers.redis_servers import RedisClusterServers, RedisServer
from mailer import Limiter, ManualClock, Policy
from tests.limits.test_scoped_properties import START_US, _replay

#: Sliding shared tiers: checked against the model (its cost grows fast with the backlog).
MODELLED = [
    "recipient: 1/1s; sender: 3/1s",
    "sender: 4/2s, 7/5s; domain: 2/1s",
    "recipient: 1/300ms; sender: 3/1s; tenant: 2/2s",
]
#: Gcra shared tiers, and sliding with gcra: checked across the stores (never over, same answers).
UNMODELLED = [
    "sender: 3/1s gcra",
    "sender: 4/1s, 6/2s gcra; tenant: 3/1s",
    "recipient: 1/1s; sender: 14/1s",
]
RECIPIENTS = [f"r{i}@{d}" for i in range(6) for d in ("a.example", "b.example")]
SETTINGS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,
)


def backlog_traces(policies: list[str], bulk: tuple[int, int]) -> st.SearchStrategy[object]:
    """A policy and a trace: ``bulk`` bookings of share 0.5 ahead, then mixed operations."""

    @st.composite
    def build(draw: st.DrawFn) -> tuple[str, list[tuple[object, ...]]]:
        text = draw(st.sampled_from(policies))
        policy = Policy.parse(text)
        windows = sorted({t.window_ms for _, tiers in policy.scope_tiers() for t in tiers})
        ops: list[tuple[object, ...]] = []
        count = draw(st.integers(*bulk))
        for i in range(count):  # the newsletter: distinct readers, half the sender's rate
            ops.append(("acquire", f"n{i}@news.example", 100 + i, 3_600_000, None, 0.5))
            if draw(st.integers(0, 9)) == 0:
                ops.append(("advance", draw(st.integers(0, 3000))))
        edges = [w * 1000 + d for w in windows for d in (-1001, -1, 0, 1, 999)]
        for _ in range(draw(st.integers(5, 30))):
            kind = draw(st.sampled_from(["advance", "acquire", "acquire", "release", "drop"]))
            if kind == "advance":
                step = st.one_of(st.integers(0, 2_000_000), st.sampled_from(edges))
                ops.append(("advance", draw(step)))
            elif kind == "acquire":
                recipient = draw(st.sampled_from(RECIPIENTS))
                ident = draw(st.integers(0, 8))
                tenant = draw(st.sampled_from([None, "acme"]))
                share = draw(st.sampled_from([1.0, 0.5]))
                wait = draw(st.sampled_from([0, 2_000, 3_600_000]))
                ops.append(("acquire", recipient, ident, wait, tenant, share))
            elif kind == "release":
                ops.append(("release", draw(st.sampled_from(RECIPIENTS)), draw(st.integers(0, 8))))
            else:  # a newsletter mail given back: a hole in the middle of the backlog
                i = draw(st.integers(0, count - 1))
                ops.append(("release", f"n{i}@news.example", 100 + i))
        return text, ops

    return build()


def _limiters(url: str, policy: Policy, clock: ManualClock) -> list[Limiter]:
    namespace = f"backlog-{uuid.uuid4().hex[:12]}"
    return [
        Limiter.from_url("memory://", policy, clock=clock, secret="s"),
        Limiter.from_url(url, policy, clock=clock, secret="s", namespace=namespace),
    ]


@SETTINGS
@given(trace=backlog_traces(MODELLED, (10, 40)))
def test_long_sliding_backlogs_match_the_model_on_memory_and_redis(
    redis_server: RedisServer, trace: tuple[str, list[tuple[object, ...]]]
) -> None:
    """A newsletter booked ahead, then code mails, bulk mails and releases: memory, Redis and
    the brute-force model give the same decisions; never over, never early."""
    text, ops = trace
    policy = Policy.parse(text)
    clock = ManualClock(START_US / 1_000_000)
    limiters = _limiters(redis_server.url, policy, clock)
    try:
        _replay(limiters, policy, clock, ops)
    finally:
        limiters[1].close()


@SETTINGS
@given(trace=backlog_traces(UNMODELLED, (40, 120)))
def test_long_gcra_backlogs_agree_on_memory_and_redis(
    redis_server: RedisServer, trace: tuple[str, list[tuple[object, ...]]]
) -> None:
    """Longer backlogs, gcra tiers: memory and Redis give the same decisions and the admitted
    real times never break a tier (the model's never-over check, without its search)."""
    text, ops = trace
    policy = Policy.parse(text)
    clock = ManualClock(START_US / 1_000_000)
    limiters = _limiters(redis_server.url, policy, clock)
    try:
        _replay(limiters, policy, clock, ops, with_model=False)
    finally:
        limiters[1].close()


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,
)
@given(trace=backlog_traces([*MODELLED[:1], *UNMODELLED], (20, 60)))
def test_long_backlogs_on_a_cluster_decide_as_memory_does(
    cluster: RedisClusterServers, trace: tuple[str, list[tuple[object, ...]]]
) -> None:
    """On a Cluster, scope by scope: the same decisions as memory on long backlogs."""
    text, ops = trace
    policy = Policy.parse(text)
    clock = ManualClock(START_US / 1_000_000)
    limiters = _limiters(cluster.url, policy, clock)
    try:
        _replay(limiters, policy, clock, ops, exact_binding=False, with_model=False)
    finally:
        limiters[1].close()


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,
)
@given(trace=backlog_traces(UNMODELLED[:2], (300, 700)))
def test_gcra_backlogs_of_many_pages_agree_on_memory_and_redis(
    redis_server: RedisServer, trace: tuple[str, list[tuple[object, ...]]]
) -> None:
    """Backlogs of hundreds of gcra bookings, which Redis keeps in many pages and groups (cut as
    they grow, emptied by releases and by time): the same decisions as memory's linear search."""
    text, ops = trace
    policy = Policy.parse(text)
    clock = ManualClock(START_US / 1_000_000)
    limiters = _limiters(redis_server.url, policy, clock)
    try:
        _replay(limiters, policy, clock, ops, with_model=False)
    finally:
        limiters[1].close()
