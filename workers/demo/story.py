"""What the demo plays: its recipients, its script of mails, its policy, kinds and settings.

**How the demo's settings reach the task.** ``send_mail`` is registered on ``workers.app.app``,
the app built from the environment when :mod:`workers.app` is imported. The demo does not build
a second app with a second copy of the task: :func:`configure` points that same app at the
demo's broker, result backend and queue (the values :func:`workers.app.create_app` derives from
the demo's :class:`~mailer.settings.Settings`, so the safe defaults have one source), and calls
:func:`workers.process.settings.use_settings` so the guard is built from the demo's settings
(policy, kinds, limiter, SMTP URL). ``workers.app.settings`` keeps the environment's values: the
worker-start hooks read it (the prefork check, which a threads pool does not trip, the opt-in
metrics port and the log format), so those follow the environment as for any worker. The demo
command runs in a process of its own, so nothing else uses the app meanwhile; call
:func:`configure` before the app has sent or received anything.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from celery import Celery

from mailer import Kinds, Policy, Tier
from mailer.settings import Settings
from workers.app import create_app
from workers.process.settings import use_settings

#: The demo's policy per recipient, before ``--speed``.
POLICY = "1/1s, 5/10s, 10/30s"
#: How long each kind may wait for its slot, in seconds, before ``--speed``.
MAX_WAIT = {"code": 3.75, "default": 60.0, "notice": 60.0}
#: How late a run may start and keep its slot, in seconds, before ``--speed``: the default (1 s)
#: compressed like the policy (``1/60s`` is ``1/1s`` here), or late mails would crowd.
LATE_TOLERANCE = 0.1
#: The worker's pause in the story, before ``--speed``: at ``t+AT`` s its pool is kept busy for
#: ``FOR`` s (one long task per thread). Mails whose slot comes meanwhile run late and re-book.
OUTAGE_AT, OUTAGE_FOR = 9.0, 3.0
#: The newsletter burst, before ``--speed``: at ``t+AT`` s, ``SIZE`` notices to as many readers
#: are queued at once, and right behind them a code mail for dee, which overtakes them (kind
#: priority 9 over 5): the burst is not compressed by ``--speed``, so it always takes a while.
BURST_AT, BURST_SIZE = 14.0, 200
#: The memory broker's polling interval: a deferred mail is picked up well before its slot.
MEMORY_POLLING = 0.05
#: The Celery settings :func:`configure` copies from the app built for the demo's settings.
CONFIGURED = (
    "broker_url",
    "broker_transport",
    "result_backend",
    "task_queues",
    "task_default_queue",
    "task_default_routing_key",
    "broker_transport_options",
)


class DemoError(Exception):
    """The demo could not run or did not finish (one line for the user)."""


class DemoInterrupted(Exception):
    """Ctrl-C: the worker and the SMTP server have been stopped."""


@dataclass(frozen=True)
class Recipient:
    """A fictitious recipient: its short name in the table, its address, its part in the story."""

    name: str
    address: str
    role: str


RECIPIENTS = {
    r.name: r
    for r in (
        Recipient("ada", "ada@example.com", "4 mails, mixed kinds"),
        Recipient("bob", "bob@example.com", "11 notices at once"),
        Recipient("cy", "cy@example.com", "two mails far apart"),
        Recipient("mallory", "mallory@example.com", "abused: codes nonstop"),
        Recipient("dee", "dee@example.com", "a code behind a newsletter"),
    )
}


@dataclass(frozen=True)
class Planned:
    """One mail of the script: ``at`` seconds after the start (before ``--speed``)."""

    at: float
    to: str
    kind: str
    subject: str | None = None
    body: str | None = None
    context: Mapping[str, str] | None = None


def script() -> list[Planned]:
    """The demo's mails, in order of their time."""
    mails = [
        Planned(0.0, "ada", "code", context={"code": "482 193"}),
        Planned(0.3, "ada", "default", "Welcome, Ada", "Your account is ready."),
        Planned(0.6, "ada", "notice", "Your invoice", "Invoice 2041 is attached."),
        Planned(2.0, "cy", "default", "Welcome, Cy", "Your account is ready."),
        Planned(5.0, "ada", "code", context={"code": "730 021"}),
        Planned(8.0, "cy", "code", context={"code": "118 406"}),
        Planned(BURST_AT, "dee", "code", context={"code": "905 417"}),  # queued after the burst
    ]
    mails += [
        Planned(1.0 + 0.1 * i, "bob", "notice", f"Digest {i + 1} of 11", "News you follow.")
        for i in range(11)
    ]
    mails += [
        Planned(3.0 + 0.5 * i, "mallory", "code", context={"code": f"{100_000 + 7919 * i}"})
        for i in range(15)
    ]
    return sorted(mails, key=lambda m: m.at)


def burst_addresses() -> list[str]:
    """The newsletter's readers: one mail each, so the policy holds none of them back."""
    return [f"reader{n}@example.com" for n in range(1, BURST_SIZE + 1)]


def demo_policy(speed: float = 1.0) -> Policy:
    """:data:`POLICY` with every window divided by ``speed`` (whole milliseconds)."""
    base = Policy.parse(POLICY, name="recipient")
    tiers = tuple(Tier(t.limit, max(1, round(t.window_ms / speed))) for t in base.tiers)
    return Policy(tiers, name=base.name)


def demo_kinds(speed: float = 1.0) -> Kinds:
    """The built-in kinds with the demo's tolerances (:data:`MAX_WAIT`) divided by ``speed``."""
    kinds = Kinds.defaults()
    for name, wait in MAX_WAIT.items():
        kinds = kinds.with_kind(replace(kinds[name], max_wait=round(wait / speed, 3)))
    return kinds


def demo_settings(
    smtp_url: str, *, speed: float = 1.0, redis_url: str | None = None, queue: str | None = None
) -> Settings:
    """The demo's settings: memory everything (or ``redis_url``), a random secret, its policy."""
    settings = Settings(
        smtp_url=smtp_url,
        policy=demo_policy(speed),
        kinds=demo_kinds(speed),
        secret=secrets.token_urlsafe(16),  # a fresh budget each run, even on a shared Redis
        sender="mailguard-demo@example.com",
        queue=queue or f"mailguard-demo-{secrets.token_hex(4)}",
        retry_backoff=1.0,
        smtp_attempts=2,
        late_tolerance=max(0.05, round(LATE_TOLERANCE / speed, 3)),
    )
    if redis_url:
        settings = replace(
            settings, broker_url=redis_url, result_backend=redis_url, limiter_url=redis_url
        )
    return settings


def configure(app: Celery, settings: Settings) -> None:
    """Point ``app`` (``workers.app.app``) and the guard at ``settings``; see the module doc."""
    template = create_app(settings).conf
    conf: dict[str, Any] = {key: template[key] for key in CONFIGURED}
    if settings.broker_url.startswith("memory:"):
        conf["broker_transport_options"] = {
            **conf["broker_transport_options"],
            "polling_interval": MEMORY_POLLING,
        }
    conf["result_expires"] = 600  # the demo's outcomes need not outlive it on a shared Redis
    app.conf.update(conf)
    use_settings(settings)
