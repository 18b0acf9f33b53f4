"""Property tests of the scoped limiter: random traces against a brute-force model, µs clock.

Proves, on every generated trace (several scopes, all three tier kinds, shares, bookings,
releases, times at window edges to the microsecond): the same decisions as the model; never over
any tier of any scope in real time; never early (an admission's real time keeps every tier).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devservers.redis_servers import RedisClusterServers, RedisServer
from mailer import Limiter, ManualClock, Policy
from mailer.limits.decision import Decision
from tests.limits.scoped_model import Admission, Answer, ScopedModel

POLICIES = [
    "recipient: 1/1s, 3/5s; sender: 3/1s gcra, 5/10s fixed",
    "recipient: 2/300ms; domain: 3/1s; tenant: 4/2s fixed",
    "sender: 4/2s; tenant: 3/1s gcra",
    "recipient: 1/200ms; sender: 2/1s, 6/1d fixed",
    "domain: 2/500ms gcra; sender: 3/1s fixed, 5/3s",
    "recipient: 1/300ms; sender: 3/1s gcra; tenant: 2/1s gcra",
    "recipient: 1/300ms; provider: 2/1s fixed; provider google: 3/1s gcra, 4/2s",
    "domain: 2/1s; provider: 3/1s; tenant: 2/1s fixed",
]
RECIPIENTS = ["r0@a.example", "r1@a.example", "r2@b.example", "r3@c.example"]
#: Each domain's provider (a.example and c.example at Google, b.example its own).
PROVIDERS = {"a.example": "google", "b.example": "b.example", "c.example": "google"}


class _Providers:
    """A finder answering :data:`PROVIDERS` (the DNS is tested in tests/providers/)."""

    @dataclass(frozen=True)
    class Found:
        name: str

    def provider_of(self, domain: str) -> _Providers.Found:
        return self.Found(PROVIDERS.get(domain, domain))


def _subjects(policy: Policy, recipient: str, tenant: str | None) -> dict[str, str]:
    """A mail's subject in each scope ("": none), providers as the limiter finds them."""
    domain = recipient.rpartition("@")[2]
    provider = PROVIDERS.get(domain, domain)
    named = {scope for scope, _ in policy.scopes if scope.startswith("provider ")}
    subjects = {"recipient": recipient, "domain": domain, "sender": "sender"}
    subjects["tenant"] = tenant or ""
    subjects["provider"] = "" if f"provider {provider}" in named else provider
    for scope in named:
        subjects[scope] = provider if scope == f"provider {provider}" else ""
    return subjects


START_US = 1_700_006_399_000_000  # 1 s before a UTC midnight


@st.composite
def traces(draw: st.DrawFn) -> tuple[str, list[tuple[object, ...]]]:
    text = draw(st.sampled_from(POLICIES))
    policy = Policy.parse(text)
    windows = sorted({t.window_ms for _, tiers in policy.scope_tiers() for t in tiers})
    advance = st.one_of(
        st.integers(0, 400_000),
        st.sampled_from([w * 1000 + d for w in windows for d in (-1001, -1, 0, 1, 999)]),
        st.integers(0, 1000),
    )
    max_wait = st.sampled_from([0, 1, 500, 5_000, 100_000])
    ops: list[tuple[object, ...]] = []
    for _ in range(draw(st.integers(1, 24))):
        kind = draw(st.sampled_from(["advance", "acquire", "acquire", "acquire", "release"]))
        recipient = draw(st.sampled_from(RECIPIENTS))
        if kind == "advance":
            ops.append(("advance", draw(advance)))
        elif kind == "acquire":
            ident = draw(st.one_of(st.none(), st.integers(0, 6)))
            tenant = draw(st.sampled_from([None, "acme", "zeta"]))
            share = draw(st.sampled_from([1.0, 1.0, 0.5]))
            ops.append(("acquire", recipient, ident, draw(max_wait), tenant, share))
        else:
            ops.append(("release", recipient, draw(st.integers(0, 6))))
    return text, ops


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,
)
@given(trace=traces())
def test_memory_and_redis_match_the_model_and_are_never_over_nor_early(
    redis_server: RedisServer, trace: tuple[str, list[tuple[object, ...]]]
) -> None:
    """Memory, Redis and the model agree on every decision; real times never break a tier."""
    text, ops = trace
    policy = Policy.parse(text)
    clock = ManualClock(START_US / 1_000_000)
    namespace = f"scoped-{uuid.uuid4().hex[:12]}"
    limiters = [
        Limiter.from_url("memory://", policy, clock=clock, secret="s", providers=_Providers()),
        Limiter.from_url(
            redis_server.url,
            policy,
            clock=clock,
            secret="s",
            namespace=namespace,
            providers=_Providers(),
        ),
    ]
    try:
        _replay(limiters, policy, clock, ops)
    finally:
        limiters[1].close()


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,
)
@given(trace=traces())
def test_redis_cluster_decides_scope_by_scope_as_one_redis_does(
    cluster: RedisClusterServers, trace: tuple[str, list[tuple[object, ...]]]
) -> None:
    """On a Cluster each scope lives in its own slot and is decided by its own script call
    (mailer.limits.stores.scoped_cluster): without concurrency, the same decisions as memory and
    the model, never over, never early."""
    text, ops = trace
    policy = Policy.parse(text)
    clock = ManualClock(START_US / 1_000_000)
    namespace = f"scoped-{uuid.uuid4().hex[:12]}"
    limiters = [
        Limiter.from_url("memory://", policy, clock=clock, secret="s", providers=_Providers()),
        Limiter.from_url(
            cluster.url,
            policy,
            clock=clock,
            secret="s",
            namespace=namespace,
            providers=_Providers(),
        ),
    ]
    try:
        _replay(limiters, policy, clock, ops, exact_binding=False)
    finally:
        limiters[1].close()


def _replay(
    limiters: list[Limiter],
    policy: Policy,
    clock: ManualClock,
    ops: list[tuple[object, ...]],
    *,
    exact_binding: bool = True,
    with_model: bool = True,
) -> None:
    """Replay ``ops`` on every limiter and the model. ``exact_binding=False`` (Cluster): when
    several scopes delay a mail to the same slot, any of them may be named as binding.
    ``with_model=False`` (long traces): the limiters agree with the first one, and the model
    only records what they admitted, for its never-over check."""
    now_us = START_US
    model = ScopedModel(policy)
    tenants: dict[tuple[str, str], str | None] = {}  # the tenant each held slot was taken in
    for op in ops:
        if op[0] == "advance":
            now_us += int(op[1])  # type: ignore[call-overload]
            clock.set(now_us / 1_000_000)
            continue
        recipient = str(op[1])
        if op[0] == "release":
            given = f"m{op[2]}"
            expected_release = model.release(now_us, recipient, given)
            held_in = tenants.pop((recipient, given), None)
            for limiter in limiters:
                got = limiter.release(recipient, given, tenant=held_in)
                assert got == expected_release, (op, limiter.url)
            continue
        _, _, ident, max_wait_ms, given_tenant, share = op
        tenant = None if given_tenant is None else str(given_tenant)
        mail_id = None if ident is None else f"m{ident}"
        subjects = _subjects(policy, recipient, tenant)
        expected = (
            model.acquire(now_us, subjects, mail_id, int(max_wait_ms), float(share))  # type: ignore[call-overload, arg-type]
            if with_model
            else None
        )
        answers = []
        for limiter in limiters:
            d = limiter.acquire(
                recipient,
                tenant=tenant,
                mail_id=mail_id,
                max_wait=int(max_wait_ms) / 1000,  # type: ignore[call-overload]
                share=float(share),  # type: ignore[arg-type]
            )
            answer = Answer(d.allowed, d.booked, d.at_ms, d.wait_ms)
            if expected is None:  # the first limiter (memory) is the reference
                expected = answer
                if d.allowed or d.booked:
                    _record(model, d, now_us, mail_id, subjects)
            assert answer == expected, (op, limiter.url)
            answers.append(d)
        if exact_binding:
            assert answers[0] == answers[1], op
        else:
            assert answers[0]._replace(tier=None, scope=None) == answers[1]._replace(
                tier=None, scope=None
            ), op
            if answers[1].tier is not None:
                named = dict(policy.scope_tiers())[answers[1].scope or "recipient"]
                assert answers[1].tier in named, op
        if mail_id is not None and (d.allowed or d.booked):
            tenants.setdefault((recipient, mail_id), tenant)
    assert model.never_over() == []


def _record(
    model: ScopedModel, d: Decision, now_us: int, mail_id: str | None, subjects: dict[str, str]
) -> None:
    """Record in ``model`` what a limiter admitted or booked, as the model's own acquire would
    (a mail asked again for its slot records nothing)."""
    now = now_us // 1000
    keep = max(t.window_ms for _, tiers in model.policy.scope_tiers() for t in tiers)
    if mail_id is not None:
        for a in model.admissions:
            same = a.subjects["recipient"] == subjects["recipient"] and a.mail_id == mail_id
            if same and a.stored_ms > now - keep:
                return
    if d.allowed:
        model.admissions.append(Admission(-(-now_us // 1000), now_us, now, mail_id, subjects))
    else:
        model.admissions.append(Admission(d.at_ms, d.at_ms * 1000, d.at_ms, mail_id, subjects))
