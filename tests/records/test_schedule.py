"""The schedule apart from its contract (tests/records/test_contract_schedule.py): when a
deferral is parked, and the schedule's gauges."""

from __future__ import annotations

from mailer import ManualClock
from mailer.outcomes import Outcome
from mailer.records.schedule import MemorySchedule
from mailer.records.schedule.park import parked_until
from mailer.steps import Later, Progress


def _later(reason: str, countdown: float, due: float | None) -> Later:
    return Later(
        countdown,
        Outcome(status="deferred", mail_id="m", kind="default", reason=reason, due=due),
        Progress(),
    )


def test_parked_until_parks_long_bookings_at_their_slot() -> None:
    """A booking further than ``park_after`` is parked until its slot (not the hop's
    countdown); a short one keeps its countdown; ``None`` turns parking off."""
    assert parked_until(_later("booked", 600, 3600.0), 0.0, 30.0) == 3600.0
    assert parked_until(_later("booked", 20, 20.0), 0.0, 30.0) is None
    assert parked_until(_later("booked", 600, 3600.0), 0.0, None) is None
    assert parked_until(_later("smtp_transient", 120, None), 100.0, 30.0) == 220.0


def test_the_schedule_gauges_count_parked_mails_and_the_oldest_overdue_age(
    clock: ManualClock,
) -> None:
    """``mailguard_parked_mails`` counts parked mails; ``mailguard_parked_overdue_seconds`` is
    how long ago the earliest was due (0 while none is overdue)."""
    from prometheus_client import CollectorRegistry  # noqa: PLC0415

    from mailer.metrics import ScheduleCollector  # noqa: PLC0415

    schedule = MemorySchedule(clock)
    registry = CollectorRegistry()
    registry.register(ScheduleCollector(schedule.stats, clock))
    schedule.park("a", clock.now + 60, b"x")
    schedule.park("b", clock.now + 120, b"x")
    assert registry.get_sample_value("mailguard_parked_mails") == 2
    assert registry.get_sample_value("mailguard_parked_overdue_seconds") == 0
    clock.advance(75)
    assert registry.get_sample_value("mailguard_parked_overdue_seconds") == 15
