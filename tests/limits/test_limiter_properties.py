"""Property tests: random traces through both backends and a brute-force model, with a clock.

Proves, on every generated trace: never over any tier in any window; never refused when every
tier has room (the earliest admissible time is the model's brute-force minimum); the wait
exact; all-or-nothing; idempotent mail ids; reservations in order; memory and Redis identical.
"""

from __future__ import annotations

import uuid
from dataclasses import astuple

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devservers.redis_servers import RedisServer
from mailer import Decision, Limiter, ManualClock, Policy
from mailer.clock import to_ms
from tests.limits.reference_model import Model, ModelAnswer

POLICIES = ["1/1s, 3/5s, 5/20s", "2/300ms, 4/2s", "1/60s, 5/1h, 10/24h", "3/1s", "4/1s, 2/10s"]
KEYS = ["k0", "k1"]


def _as_model(limiter: Limiter, d: Decision) -> ModelAnswer:
    tiers = limiter.policy.tiers
    index = tiers.index(d.tier) + 1 if d.tier is not None else 0
    return ModelAnswer(d.allowed, d.booked, d.at_ms, d.wait_ms, index, d.remaining)


@st.composite
def traces(draw: st.DrawFn) -> tuple[str, list[tuple[object, ...]]]:
    text = draw(st.sampled_from(POLICIES))
    policy = Policy.parse(text)
    windows = [t.window_ms for t in policy.tiers]
    small = min(windows)
    advance = st.one_of(
        st.integers(0, 2 * small),
        st.sampled_from([w + d for w in windows for d in (-1, 0, 1)]),
        st.integers(0, max(windows)),
    )
    max_wait = st.sampled_from([0, 1, small, max(windows), 3 * max(windows)])
    ops: list[tuple[object, ...]] = []
    for _ in range(draw(st.integers(1, 40))):
        kind = draw(
            st.sampled_from(["advance", "acquire", "acquire", "acquire", "peek", "release"])
        )
        key = draw(st.sampled_from(KEYS))
        if kind == "advance":
            ops.append(("advance", draw(advance)))
        elif kind == "acquire":
            ident = draw(st.one_of(st.none(), st.just("new"), st.integers(0, 8)))
            ops.append(("acquire", key, ident, draw(max_wait)))
        elif kind == "release":
            ops.append(("release", key, draw(st.integers(0, 8))))
        else:
            ops.append(("peek", key))
    return text, ops


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(trace=traces())
def test_backends_match_brute_force_model(  # noqa: PLR0912 - one branch per operation
    redis_server: RedisServer, trace: tuple[str, list[tuple[object, ...]]]
) -> None:
    """Memory, Redis and the brute-force model give identical answers on every random trace."""
    text, ops = trace
    policy = Policy.parse(text, name="prop")
    clock = ManualClock(1_700_000_000.0)
    namespace = f"prop-{uuid.uuid4().hex[:12]}"
    limiters = [
        Limiter.from_url("memory://", policy, clock=clock, secret="s"),
        Limiter.from_url(redis_server.url, policy, clock=clock, secret="s", namespace=namespace),
    ]
    model = Model(policy)
    used_ids: list[str] = []
    try:
        for op in ops:
            now = to_ms(clock())
            if op[0] == "advance":
                clock.advance(int(op[1]) / 1000)  # type: ignore[call-overload]
                continue
            key = str(op[1])
            if op[0] == "acquire":
                ident, max_wait = op[2], int(op[3])  # type: ignore[call-overload]
                mail_id: str | None = None
                if ident == "new" or (isinstance(ident, int) and ident >= len(used_ids)):
                    used_ids.append(f"mail-{len(used_ids)}")
                    mail_id = used_ids[-1]
                elif isinstance(ident, int):
                    mail_id = used_ids[ident]
                expected = model.acquire(key, now, mail_id, max_wait)
                for limiter in limiters:
                    got = limiter.acquire(key, mail_id=mail_id, max_wait=max_wait / 1000)
                    assert astuple(_as_model(limiter, got)) == astuple(expected), (op, limiter)
            elif op[0] == "peek":
                expected = model.peek(key, now)
                for limiter in limiters:
                    got = limiter.peek(key)
                    assert astuple(_as_model(limiter, got)) == astuple(expected), (op, limiter)
            else:
                index = int(op[2])  # type: ignore[call-overload]
                mail_id = used_ids[index] if index < len(used_ids) else "unknown"
                expected_released = model.release(key, now, mail_id)
                for limiter in limiters:
                    assert limiter.release(key, mail_id) is expected_released
            # The independent check: every key's admissions and bookings respect every tier.
            for entries in model.entries.values():
                times = [e.at_ms for e in entries]
                assert times == sorted(times), "mails to one recipient keep their order"
                assert model.never_over(times)
    finally:
        for limiter in limiters:
            limiter.close()


@settings(max_examples=60, deadline=None)
@given(
    policy_text=st.sampled_from(POLICIES),
    gaps=st.lists(st.integers(0, 5_000), min_size=1, max_size=25),
    probe=st.integers(1, 10_000_000),
)
def test_retry_after_is_exact(policy_text: str, gaps: list[int], probe: int) -> None:
    """After any history, a refused attempt is admitted at now + wait and not 1 ms sooner."""
    clock = ManualClock(1_700_000_000.0)
    limiter = Limiter.from_url("memory://", Policy.parse(policy_text), clock=clock)
    for gap in gaps:
        clock.advance(gap / 1000)
        limiter.acquire("k")
    clock.advance(probe / 1_000_000)  # sub-millisecond offsets too
    decision = limiter.peek("k")
    if decision.allowed:
        assert decision.wait_ms == 0
        return
    start = clock.now
    clock.set(start + (decision.wait_ms - 1) / 1000)
    assert not limiter.peek("k").allowed
    clock.set(start + decision.wait_ms / 1000)
    assert limiter.acquire("k").allowed
