"""The holds' gauges, read from the holds at each scrape (:mod:`mailer.metrics` lists every
metric and re-exports these): ``mailguard_sender_hold_seconds``, ``mailguard_transport_held``
and ``mailguard_provider_hold_seconds{provider}`` (:class:`HoldCollector`),
``mailguard_sender_pace_rate`` (:class:`PaceCollector`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mailer.clock import Clock, system_clock

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from prometheus_client.metrics_core import Metric

    from mailer.records.holds import Hold

__all__ = ["HoldCollector", "PaceCollector"]


class HoldCollector:
    """The sender's hold and the transport's as gauges, read when scraped (one ``GET`` each).

    ``sender`` is :meth:`mailer.records.holds.Holds.sender`, ``transport`` (optional)
    :meth:`mailer.records.holds.TransportHold.held`, ``providers`` (optional, with provider
    holds on) :meth:`mailer.records.holds.Holds.provider_holds`: one sample per ruled provider
    (``google``, ``microsoft``, ``yahoo``), 0 when not held. Holds that cannot be read yield no
    sample rather than failing the scrape.
    """

    def __init__(
        self,
        sender: Callable[[], Hold | None],
        clock: Clock = system_clock,
        *,
        transport: Callable[[], list[Hold]] | None = None,
        providers: Callable[[], dict[str, Hold]] | None = None,
    ) -> None:
        self._sender, self._transport, self._providers = sender, transport, providers
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily  # noqa: PLC0415

        try:
            hold = self._sender()
            transport = self._transport() if self._transport is not None else []
            providers = self._providers() if self._providers is not None else {}
        except Exception:  # the scrape goes on without the holds
            return
        left = GaugeMetricFamily(
            "mailguard_sender_hold_seconds",
            "Seconds left on the sender's hold (0: no hold in force): no worker sends until then.",
        )
        left.add_metric([], 0.0 if hold is None else max(hold.until - self._clock(), 0.0))
        yield left
        if self._transport is not None:
            held = GaugeMetricFamily(
                "mailguard_transport_held",
                "Transport holds in force: the relay refuses our own side (credentials, "
                "certificate: 1; or a sender, one each).",
            )
            held.add_metric([], float(len(transport)))
            yield held
        if self._providers is not None:
            yield self._provider_gauge(providers)

    def _provider_gauge(self, providers: dict[str, Hold]) -> Metric:
        from prometheus_client.core import GaugeMetricFamily  # noqa: PLC0415

        from mailer.mail.replies import RULED_PROVIDERS  # noqa: PLC0415

        gauge = GaugeMetricFamily(
            "mailguard_provider_hold_seconds",
            "Seconds left on the sender's hold at one provider (0: none): its mail alone waits.",
            labels=["provider"],
        )
        now = self._clock()
        for name in RULED_PROVIDERS:
            hold = providers.get(name)
            gauge.add_metric([name], 0.0 if hold is None else max(hold.until - now, 0.0))
        return gauge


class PaceCollector:
    """The sender's learned rate after a hold as a gauge, read when scraped (one ``GET``).

    ``rate`` is :meth:`mailer.records.holds.pace.SenderPace.rate_now`; a pace that cannot be
    read yields no sample rather than failing the scrape.
    """

    def __init__(self, rate: Callable[[], float]) -> None:
        self._rate = rate

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily  # noqa: PLC0415

        try:
            rate = self._rate()
        except Exception:  # the scrape goes on without the pace
            return
        gauge = GaugeMetricFamily(
            "mailguard_sender_pace_rate",
            "The sender's learned rate after a hold, mails/s (0: no pace in force).",
        )
        gauge.add_metric([], rate)
        yield gauge
