"""Property test of late runs: random traces of new mails, time passing and runs that come
back at any moment after their countdown (on time, a little late, hours late), through the
guard on the memory limiter with a manual clock.

Checked by an independent counter over the times the transport really sent at: never more
than ``L`` sends in any ``W - tolerance`` of any tier (a run within the tolerance of its slot
keeps it), never a deferred mail before its slot, and a re-booking never moves another
mail's slot (the mails booked behind a late one keep their order).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mailer import Kinds, Limiter, ManualClock, Policy
from mailer.factory import memory_guard
from mailer.guard import Finish, GuardConfig, Later
from mailer.mail.transports import MemoryTransport
from mailer.records.ledger import MemoryLedger
from tests.guard.test_guard import req

POLICY = "1/60s, 3/10m, 5/1h"
TOLERANCE = 1.0

#: ``("new",)``, ``("advance", seconds)`` or ``("run", index)`` of a waiting mail.
ops = st.lists(
    st.one_of(
        st.tuples(st.just("new")),
        st.tuples(st.just("advance"), st.sampled_from([0.5, 1.5, 30, 59, 61, 200, 601, 3700])),
        st.tuples(st.just("run"), st.integers(0, 50)),
    ),
    min_size=5,
    max_size=60,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=ops)
def test_late_runs_never_over_admit_never_go_early_and_keep_the_others_slots(
    trace: list[tuple[object, ...]],
) -> None:
    """Whatever the lateness of each run, the mails that leave respect every tier."""
    clock = ManualClock(1_700_000_000.0)
    policy = Policy.parse(POLICY, name="recipient")
    transport = MemoryTransport()
    guard = memory_guard(
        Limiter.from_url("memory://", policy, clock=clock),
        MemoryLedger(clock),
        transport,
        kinds=Kinds.defaults(),
        config=GuardConfig(late_tolerance=TOLERANCE),
        clock=clock,
    )
    waiting: dict[str, tuple[Later, float]] = {}  # mail id -> its step, when it may run
    sent_at: dict[str, float] = {}
    count = 0

    def run(mail_id: str, step: Later | None) -> None:
        result = guard.process(req(mail_id), step.progress if step else None)
        if isinstance(result, Later):
            waiting[mail_id] = (result, clock.now + result.wait)
            return
        waiting.pop(mail_id, None)
        assert isinstance(result, Finish)
        if result.outcome.status == "sent":
            sent_at[mail_id] = clock.now
            if step is not None and result.outcome.due is not None:
                assert clock.now >= result.outcome.due, "never before its slot"

    for op in trace:
        if op[0] == "new":
            count += 1
            run(f"m{count}", None)
        elif op[0] == "advance":
            clock.advance(float(op[1]))  # type: ignore[arg-type]
        else:
            runnable = sorted(m for m, (_, at) in waiting.items() if at <= clock.now)
            if runnable:
                mail_id = runnable[int(op[1]) % len(runnable)]  # type: ignore[call-overload]
                others = {m: s.outcome.due for m, (s, _) in waiting.items() if m != mail_id}
                run(mail_id, waiting[mail_id][0])
                after = {m: s.outcome.due for m, (s, _) in waiting.items() if m in others}
                assert after == {m: others[m] for m in after}, "another mail's slot moved"
    while waiting:  # the rest run on time, one by one
        mail_id, (step, at) = min(waiting.items(), key=lambda item: item[1][1])
        clock.now = max(clock.now, at)
        run(mail_id, step)

    times = sorted(sent_at.values())
    assert len(transport.sent) == len(sent_at)
    for tier in policy.tiers:
        window = tier.window_ms / 1000
        for first, last in zip(times, times[tier.limit :], strict=False):
            assert last - first >= window - TOLERANCE, (
                f"{tier.limit + 1} sends within {last - first:.1f} s under {tier}"
            )
