"""The warm-up plans as Prometheus gauges, read when scraped (:mod:`mailer.metrics` holds the
other collectors): per sender on a plan, ``mailguard_warmup_day`` (0: not started),
``mailguard_warmup_allowance`` (no sample past the plan: warm), ``mailguard_warmup_used`` and
``mailguard_warmup_waiting`` (mails over the day's allowance, waiting for the next day)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from mailer.records.warmup.base import Standing


class WarmupCollector:
    """Each plan's standing as gauges, from :meth:`mailer.records.warmup.Warmup.standings`; a
    store that cannot be read yields no sample rather than failing the scrape."""

    def __init__(self, standings: Callable[[], list[Standing]]) -> None:
        self._standings = standings

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily  # noqa: PLC0415

        try:
            standings = self._standings()
        except Exception:  # the scrape goes on without the plans
            return
        day = GaugeMetricFamily(
            "mailguard_warmup_day",
            "The day of its warm-up plan a sender is on (1: the first; 0: not started).",
            labels=["sender"],
        )
        allowance = GaugeMetricFamily(
            "mailguard_warmup_allowance",
            "Mails a sender's plan allows today (no sample past the plan: warm).",
            labels=["sender"],
        )
        used = GaugeMetricFamily(
            "mailguard_warmup_used", "Mails counted today against the plan.", labels=["sender"]
        )
        waiting = GaugeMetricFamily(
            "mailguard_warmup_waiting",
            "Mails over today's allowance, waiting for the next day.",
            labels=["sender"],
        )
        for standing in standings:
            day.add_metric([standing.sender], standing.day)
            if standing.allowance is not None:
                allowance.add_metric([standing.sender], standing.allowance)
            used.add_metric([standing.sender], standing.used)
            waiting.add_metric([standing.sender], standing.waiting)
        yield from (day, allowance, used, waiting)
