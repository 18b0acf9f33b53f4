"""The warm-up gauges as a scrape reads them: day, allowance, used and waiting per plan's
sender (memory store, a :class:`ManualClock`); no allowance sample past the plan; a store that
fails yields no sample rather than failing the scrape."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from mailer import ManualClock
from mailer.records.warmup import DAY, parse_plans, warmup_from_url
from mailer.records.warmup.gauges import WarmupCollector


def test_the_gauges_follow_the_plans() -> None:
    clock = ManualClock(1_700_000_000.0)
    warmup = warmup_from_url("memory://", parse_plans("example.org: 2; a@b.org: 5"), clock=clock)
    for n in range(3):
        warmup.take("news@example.org", f"m{n}")
    registry = CollectorRegistry()
    registry.register(WarmupCollector(warmup.standings))

    def value(name: str, sender: str) -> float | None:
        return registry.get_sample_value(name, {"sender": sender})

    assert value("mailguard_warmup_day", "example.org") == 1
    assert value("mailguard_warmup_allowance", "example.org") == 2
    assert value("mailguard_warmup_used", "example.org") == 2
    assert value("mailguard_warmup_waiting", "example.org") == 1
    assert value("mailguard_warmup_day", "a@b.org") == 0
    assert value("mailguard_warmup_allowance", "a@b.org") == 5
    clock.advance(DAY)
    assert value("mailguard_warmup_day", "example.org") == 2
    assert value("mailguard_warmup_allowance", "example.org") is None


def test_a_store_that_fails_yields_no_sample() -> None:
    def broken() -> list[object]:
        raise ConnectionError("down")

    registry = CollectorRegistry()
    registry.register(WarmupCollector(broken))  # type: ignore[arg-type]
    assert registry.get_sample_value("mailguard_warmup_day", {"sender": "x"}) is None
