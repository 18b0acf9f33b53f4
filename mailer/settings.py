"""Settings from environment variables, all prefixed ``MAILGUARD_``; defaults need nothing installed.

With no environment at all everything runs inside one process: a memory broker with an
in-process worker, the memory limiter, the console transport. A deployment sets the URLs.

| variable | type | default | example | meaning |
|---|---|---|---|---|
| ``MAILGUARD_BROKER_URL`` | URL | ``memory://`` | ``redis://localhost:6379/1`` | Celery broker (``redis://…``, ``amqp://…``) |
| ``MAILGUARD_RESULT_BACKEND`` | URL | ``cache+memory://`` | ``redis://localhost:6379/2`` | where outcomes are stored (``redis://…``) |
| ``MAILGUARD_LIMITER_URL`` | URL | ``memory://`` | ``redis://localhost:6379/0`` | limiter storage (``redis://…`` for several processes) |
| ``MAILGUARD_LEDGER_URL`` | URL | the limiter URL | ``redis://ledger:6379/0`` | where sent-markers and send claims live |
| ``MAILGUARD_SMTP_URL`` | URL | ``console://`` | ``smtp://relay:587?starttls=1`` | ``smtp://host:port``, ``smtps://user:pass@host``, ``?starttls=1``; ``console://``, ``memory://`` |
| ``MAILGUARD_TRANSPORT`` | ``smtp``, ``django``, ``ses`` or ``anymail`` | ``smtp`` | ``ses`` | how mail leaves: ``smtp`` (``MAILGUARD_SMTP_URL``), ``django`` (the Django backend ``MAILGUARD_DJANGO_BACKEND``), ``ses`` (Amazon SES v2 API, raw MIME), ``anymail`` (the ESP ``MAILGUARD_ANYMAIL_ESP`` through Anymail, no Django project needed); see the transports guide |
| ``MAILGUARD_DJANGO_BACKEND`` | dotted path | ``django.core.mail.backends.smtp.EmailBackend`` | ``anymail.backends.postmark.EmailBackend`` | the Django email backend the ``django`` transport sends through (with Django's own settings: ``EMAIL_HOST``, ``ANYMAIL``...); needs ``DJANGO_SETTINGS_MODULE``; checked at start |
| ``MAILGUARD_SES_REGION`` | AWS region | none (required with ``ses``) | ``eu-west-1`` | the SES region of the ``ses`` transport (credentials: boto3's usual chain) |
| ``MAILGUARD_SES_ENDPOINT_URL`` | URL | SES's own | ``https://vpce-0a1b.email.eu-west-1.vpce.amazonaws.com`` | another SES endpoint (a VPC endpoint, a local test double) |
| ``MAILGUARD_SES_CONFIGURATION_SET`` | name | none | ``transactional`` | the SES configuration set each mail is sent with (event publishing, dedicated IPs) |
| ``MAILGUARD_ANYMAIL_ESP`` | an ESP Anymail ships | none (required with ``anymail``) | ``postmark`` | the ESP of the ``anymail`` transport (``postmark``, ``mailgun``, ``sendgrid``, ``brevo``...: a module of ``anymail.backends``), configured by Anymail's own variables (``ANYMAIL_POSTMARK_SERVER_TOKEN``...); checked at start |
| ``MAILGUARD_POLICY`` | policy | ``1/60s, 5/1h, 10/24h`` | ``recipient: 1/60s, 5/1h; sender: 14/1s gcra`` | tiers per recipient, or per scope (``recipient: …; domain: …; sender: …; tenant: …``) |
| ``MAILGUARD_SECRET`` | text | none | the output of ``openssl rand -hex 32`` | keys the hash of every stored address: set it, the same everywhere |
| ``MAILGUARD_SENDER`` | address | ``mailguard@localhost`` | ``orders@example.org`` | the From header: an address or ``Name <address>`` (checked at start) |
| ``MAILGUARD_FAIL_MODE`` | ``fail_closed`` or ``fail_open`` | ``fail_closed`` | ``fail_open`` | limiter down: ``fail_closed`` defers, ``fail_open`` sends unguarded |
| ``MAILGUARD_QUEUE`` | queue name | ``mail`` | ``mail-eu`` | the kombu queue of ``send_mail`` |
| ``MAILGUARD_MAX_COUNTDOWN`` | duration | ``10m`` | ``5m`` | longest single deferral; longer waits hop |
| ``MAILGUARD_PARK_AFTER`` | duration or ``off`` | ``30s`` | ``off`` | a deferral longer than this is parked in the schedule (:mod:`mailer.records.schedule`), not held by a worker; ``off`` holds every wait as a countdown |
| ``MAILGUARD_PROMOTE_LEASE`` | duration | ``30s`` | ``1m`` | how long a worker holds the parked mails it is promoting before another may take them again |
| ``MAILGUARD_WATCH_GRACE`` | duration | ``500ms`` | ``300ms`` | a booked mail held as a countdown whose run has not started this long after the countdown's end is published again from the schedule by the watchdog (``100ms``-``10m``; keep it and 0.3 s under ``LATE_TOLERANCE`` so the copy keeps its slot) |
| ``MAILGUARD_OUTBOX_GRACE`` | duration or ``off`` | ``10s`` | ``30s`` | each mail's first message is kept in the outbox beside the ledger from ``send_mail.delay`` until a worker receives it; one older than this whose message was popped from the broker and never received (a consumer killed between kombu's ``BRPOP`` and its unacked record) is published again by the watchdog (``1s``-``10m``); ``off``: no outbox |
| ``MAILGUARD_SEND_RETRIES`` | whole number | ``5`` | ``8`` | Celery-level retries after the transport gave up on a transient error |
| ``MAILGUARD_RETRY_BACKOFF`` | duration | ``30s`` | ``1m`` | first Celery-level retry delay, doubled each time, capped at ``MAX_COUNTDOWN`` |
| ``MAILGUARD_CLAIM_LEASE`` | duration | ``5m`` | ``10m`` | how long a worker's claim on sending one mail lasts |
| ``MAILGUARD_LATE_TOLERANCE`` | duration | ``1s`` | ``100ms`` | a run that starts later than its booked slot by more asks the limiter again |
| ``MAILGUARD_SMTP_ATTEMPTS`` | whole number | ``3`` | ``5`` | SMTP tries per Celery run (tenacity, random exponential backoff) |
| ``MAILGUARD_SUPPRESS_FOR`` | duration | ``30d`` | ``90d`` | how long a hard bounce (``550 5.1.1 user unknown``) suppresses the recipient |
| ``MAILGUARD_THROTTLE_HOLD`` | duration or ``off`` | ``5s`` | ``30s`` | a hold's first length when the reply states no delay: a rate or quota reply (``454 Throttling failure``, ``421 4.7.28``) holds the sender that long, ``450 4.2.1`` one recipient; ``off``: no holds and no greylisting delay, such replies are retried like any 4xx |
| ``MAILGUARD_THROTTLE_HOLD_MAX`` | duration | ``15m`` | ``1h`` | the longest a hold grows by doubling while the throttling continues (>= ``THROTTLE_HOLD``, at most ``1d``) |
| ``MAILGUARD_GREYLIST_DELAY`` | duration | ``60s`` | ``5m`` | how long a greylisted mail (``451 4.7.1 try again later``, Postgrey) waits before it is tried again when the reply states no delay; nobody else waits (> 0, at most ``1d``) |
| ``MAILGUARD_HOLD_EVIDENCE`` | ``count/window`` or ``off`` | ``3/10s`` | ``5/30s`` | temporary failures of this many distinct recipients within this window hold the sender (count 2-1000, window at most ``1h``); ``off``: only replies hold |
| ``MAILGUARD_MAX_BOOKINGS`` | whole number | ``1000000`` | ``200000`` | the most entries a shared scope (domain, sender, tenant) keeps per key, bookings included: a mail that would add one more is refused (``dropped`` / ``rate_limited``, the reason names this variable), so a runaway backlog cannot grow without bound (at least 1000) |
| ``MAILGUARD_PACE_START`` | mails per second or ``off`` | ``1`` | ``0.5`` | after a sender hold, the first rate of the slow start: mails resume this many a second (not all at the hold's end), the rate growing by ``PACE_STEP`` each second and halving at the next throttling reply, bounded by a ``sender:`` tier (``0.01``-``10000``); ``off``: held mails are booked at the hold's end |
| ``MAILGUARD_PACE_STEP`` | mails per second | ``0.5`` | ``2`` | the slow start's additive increase: mails per second the rate gains each second without a throttling reply (``0``-``10000``) |
| ``MAILGUARD_POISON_AFTER`` | whole number | ``3`` | ``5`` | redelivered copies of one mail handed to a worker's pool, none of whose runs ended, before the message is quarantined as ``dropped`` / ``poison`` |
| ``MAILGUARD_MAX_MESSAGE_BYTES`` | size | ``10MB`` | ``512KB`` | the largest ``send_mail`` call (its arguments as JSON), refused at enqueue beyond it: ``1048576``, ``512KB``, ``10MB`` |
| ``MAILGUARD_VISIBILITY_TIMEOUT`` | duration | ``2 * longest countdown + 5m`` | ``30s`` | Redis broker redelivery timeout; set lower only to test redelivery |
| ``MAILGUARD_RESTORE_INTERVAL`` | duration | kombu's (about 100 s) | ``10s`` | how often a worker sweeps the Redis broker for unacknowledged tasks past the visibility timeout |
| ``MAILGUARD_METRICS_PORT`` | port or host:port | none (no server) | ``127.0.0.1:9808`` | the worker serves Prometheus metrics on this port (``9808``, all interfaces) or ``host:port`` (``127.0.0.1:9808``) |
| ``MAILGUARD_TIMEZONE`` | IANA zone name | ``UTC`` | ``Europe/Paris`` | where ``fixed`` tiers' calendar windows start (``1d`` at local midnight): an IANA name such as ``Europe/Paris`` |
| ``MAILGUARD_LOG_FORMAT`` | ``text`` or ``json`` | ``text`` | ``json`` | the worker's log lines: ``text`` (Celery's format, times in UTC) or ``json`` (one object a line, with ``mail_id``, ``recipient`` hash, ``kind``, ``status``, ``reason``) |
| ``MAILGUARD_UNSUBSCRIBE_URL`` | URL | none | ``https://example.org/unsubscribe`` | the base of the one-click unsubscribe link (RFC 8058) each mail of a bulk kind carries, ``<URL>/<token>``; served by ``workers.unsubscribe``; required with a bulk kind (``https://``, ``http://`` only on localhost) |
| ``MAILGUARD_REPUTATION`` | rates or ``off`` | ``off`` | ``complaint 0.3%, bounce 5%`` | per sender (From address), the complaint and hard-bounce rates over the window at which the sender's bulk kinds pause (deferred / ``reputation``) until the rate falls back or ``mailguard reputation resume``; ``off``: nothing counted |
| ``MAILGUARD_REPUTATION_WINDOW`` | duration | ``24h`` | ``7d`` | the rolling window the reputation's rates are counted over (in 24 buckets), ``1m``-``30d`` |
| ``MAILGUARD_REPUTATION_MIN`` | whole number | ``100`` | ``1000`` | mails sent in the window below which no rate counts (a sender is never paused on a tiny volume) |
| ``MAILGUARD_KIND_<NAME>_MAX_WAIT`` / ``_PRIORITY`` / ``_SHARE`` / ``_SUBJECT`` / ``_BODY`` / ``_HTML`` / ``_UNSUBSCRIBE`` | per option: duration, 0-9, share (0, 1], template, ``1`` or ``0`` | built-ins | ``MAILGUARD_KIND_NEWSLETTER_UNSUBSCRIBE=1`` | kinds; ``_UNSUBSCRIBE=1`` makes a bulk kind (one-click unsubscribe, paused by a bad reputation) |

Durations are ``300``, ``500ms``, ``30s``, ``5m``, ``24h``, ``1d``. The longest countdown is
``min(MAX_COUNTDOWN, PARK_AFTER)`` (``MAX_COUNTDOWN`` with parking off): longer waits are parked.
The broker's ``visibility_timeout`` is derived: ``2 * longest countdown + 5m``, so no countdown ever outlives it
(a Redis broker hands a task out again once it has been unacknowledged that long). Setting it
lower makes redeliveries happen; the ledger still keeps them from sending twice.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from difflib import get_close_matches
from typing import Literal

from mailer import defaults
from mailer.errors import InvalidAddress
from mailer.guard import GuardConfig
from mailer.limits.checks import MAX_BOOKINGS
from mailer.limits.policy import REFERENCE_POLICY, Policy
from mailer.mail.address import check_sender
from mailer.mail.kinds import Kinds
from mailer.mail.transports import registry as transports
from mailer.records.holds.pace import PACE_START, PACE_STEP
from mailer.records.reputation.base import Thresholds
from mailer.settings_env import ALL_INTERFACES, PREFIX, TEST_ONLY, read_values

#: RabbitMQ's default ``consumer_timeout``: a message held unacknowledged longer closes its
#: channel. Countdown tasks are held by the worker until they run, so they must stay below it.
RABBITMQ_CONSUMER_TIMEOUT = 1800.0
_UNSUBSCRIBE_URL = re.compile(
    r"^(https://[^\s/?#]+|http://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?)(/[^\s?#]*)?$"
)
FailMode = Literal["fail_closed", "fail_open"]
LogFormat = Literal["text", "json"]

#: The variables :meth:`Settings.from_env` reads (besides ``MAILGUARD_KIND_*``).
KNOWN = frozenset(
    PREFIX + name
    for name in (
        "BROKER_URL",
        "RESULT_BACKEND",
        "LIMITER_URL",
        "LEDGER_URL",
        "SMTP_URL",
        "POLICY",
        "SECRET",
        "SENDER",
        "FAIL_MODE",
        "QUEUE",
        "MAX_COUNTDOWN",
        "SEND_RETRIES",
        "RETRY_BACKOFF",
        "CLAIM_LEASE",
        "SMTP_ATTEMPTS",
        "VISIBILITY_TIMEOUT",
        "RESTORE_INTERVAL",
        "METRICS_PORT",
        "LOG_FORMAT",
        "TIMEZONE",
        "MAX_MESSAGE_BYTES",
        "POISON_AFTER",
        "SUPPRESS_FOR",
        "LATE_TOLERANCE",
        "PARK_AFTER",
        "PROMOTE_LEASE",
        "WATCH_GRACE",
        "OUTBOX_GRACE",
        "THROTTLE_HOLD",
        "THROTTLE_HOLD_MAX",
        "GREYLIST_DELAY",
        "HOLD_EVIDENCE",
        "TRANSPORT",
        "DJANGO_BACKEND",
        "SES_REGION",
        "SES_ENDPOINT_URL",
        "SES_CONFIGURATION_SET",
        "ANYMAIL_ESP",
        "MAX_BOOKINGS",
        "PACE_START",
        "PACE_STEP",
        "UNSUBSCRIBE_URL",
        "REPUTATION",
        "REPUTATION_WINDOW",
        "REPUTATION_MIN",
    )
)


@dataclass(frozen=True)
class Settings:
    """Everything a mailguard worker is configured with. Durations in seconds."""

    broker_url: str = "memory://"
    result_backend: str = "cache+memory://"
    limiter_url: str = "memory://"
    ledger_url: str | None = None
    smtp_url: str = "console://"
    policy: Policy = field(default_factory=lambda: Policy.parse(REFERENCE_POLICY, name="recipient"))
    secret: str | None = None
    sender: str = defaults.SENDER
    fail_mode: FailMode = "fail_closed"
    queue: str = defaults.QUEUE
    max_countdown: float = defaults.MAX_COUNTDOWN
    send_retries: int = defaults.SEND_RETRIES
    retry_backoff: float = defaults.RETRY_BACKOFF
    claim_lease: float = defaults.CLAIM_LEASE
    smtp_attempts: int = defaults.SMTP_ATTEMPTS
    visibility_timeout_override: float | None = None
    restore_interval: float | None = None
    metrics_port: int | None = None
    metrics_host: str = ALL_INTERFACES
    log_format: LogFormat = "text"
    timezone: str = "UTC"
    max_message_bytes: int = defaults.MAX_MESSAGE_BYTES
    poison_after: int = defaults.POISON_AFTER
    suppress_for: float = defaults.SUPPRESS_FOR
    late_tolerance: float = defaults.LATE_TOLERANCE
    park_after: float | None = defaults.PARK_AFTER
    promote_lease: float = defaults.PROMOTE_LEASE
    watch_grace: float = defaults.WATCH_GRACE
    outbox_grace: float | None = defaults.OUTBOX_GRACE
    throttle_hold: float | None = defaults.THROTTLE_HOLD
    throttle_hold_max: float = defaults.THROTTLE_HOLD_MAX
    greylist_delay: float = defaults.GREYLIST_DELAY
    hold_evidence: tuple[int, float] | None = defaults.HOLD_EVIDENCE
    max_bookings: int = MAX_BOOKINGS
    pace_start: float | None = PACE_START
    pace_step: float = PACE_STEP
    kinds: Kinds = field(default_factory=Kinds.defaults)
    transport: str = transports.DEFAULT
    django_backend: str | None = None
    ses_region: str | None = None
    ses_endpoint_url: str | None = None
    ses_configuration_set: str | None = None
    anymail_esp: str | None = None
    unsubscribe_url: str | None = None
    reputation: Thresholds | None = None
    reputation_window: float = defaults.REPUTATION_WINDOW
    reputation_min: int = defaults.REPUTATION_MIN

    def __post_init__(self) -> None:
        for variable, bad, accepted in self._bounds():
            if bad:
                raise ValueError(f"{PREFIX}{variable} must be {accepted}")
        try:
            check_sender(self.sender)
        except InvalidAddress as exc:
            raise ValueError(
                f"{PREFIX}SENDER must be an address (noreply@example.com) or "
                f'"Name <noreply@example.com>": {exc}'
            ) from None
        self._check_holds()
        self._check_watch()
        self._check_transport()
        self._check_bulk()

    def _check_bulk(self) -> None:
        url = self.unsubscribe_url
        if url is not None and not _UNSUBSCRIBE_URL.match(url):
            raise ValueError(
                f"{PREFIX}UNSUBSCRIBE_URL must be https://host/path (http:// only on localhost), "
                f"got {url!r:.60}"
            )
        if not 60 <= self.reputation_window <= 30 * 86_400:
            raise ValueError(
                f"{PREFIX}REPUTATION_WINDOW must be 1m-30d, got {_s(self.reputation_window)}"
            )
        if self.reputation_min < 1:
            raise ValueError(f"{PREFIX}REPUTATION_MIN must be >= 1, got {self.reputation_min}")

    def _check_transport(self) -> None:
        if self.transport not in transports.names():
            known = ", ".join(transports.names())
            raise ValueError(
                f"{PREFIX}TRANSPORT must be one of {known}, got {self.transport!r:.40}"
            )
        if self.transport == "ses" and not self.ses_region:
            raise ValueError(f"{PREFIX}SES_REGION must be set with {PREFIX}TRANSPORT=ses")
        if self.transport == "anymail" and not self.anymail_esp:
            raise ValueError(
                f"{PREFIX}ANYMAIL_ESP must be set with {PREFIX}TRANSPORT=anymail (postmark, "
                "mailgun, sendgrid... : an ESP Anymail ships)"
            )

    def transport_options(self) -> transports.TransportOptions:
        """What the transport is built from (:mod:`mailer.mail.transports.registry`)."""
        return transports.TransportOptions(
            smtp_url=self.smtp_url,
            attempts=self.smtp_attempts,
            retry_holds=self.throttle_hold is None,  # with holds on, the guard holds instead
            hold_max=self.throttle_hold_max,
            django_backend=self.django_backend,
            ses_region=self.ses_region,
            ses_endpoint_url=self.ses_endpoint_url,
            ses_configuration_set=self.ses_configuration_set,
            anymail_esp=self.anymail_esp,
        )
        self._check_pace()

    def _check_pace(self) -> None:
        start = self.pace_start
        if start is not None and not 0.01 <= start <= 10_000:
            raise ValueError(f"{PREFIX}PACE_START must be 0.01-10000 mails/s or off, got {start:g}")
        if not 0 <= self.pace_step <= 10_000:
            raise ValueError(f"{PREFIX}PACE_STEP must be 0-10000 mails/s, got {self.pace_step:g}")

    def _check_watch(self) -> None:
        if not 0.1 <= self.watch_grace <= 600:
            raise ValueError(f"{PREFIX}WATCH_GRACE must be 100ms-10m, got {self.watch_grace:g} s")
        grace = self.outbox_grace
        if grace is not None and not 1 <= grace <= 600:
            raise ValueError(f"{PREFIX}OUTBOX_GRACE must be 1s-10m or off, got {grace:g} s")

    def _bounds(self) -> tuple[tuple[str, bool, str], ...]:
        """Each value's check: its variable (without the prefix), whether the value is out of
        bounds, and the accepted form with the value given."""
        restore = self.restore_interval
        return (
            (
                "FAIL_MODE",
                self.fail_mode not in ("fail_closed", "fail_open"),
                f"fail_closed or fail_open, got {self.fail_mode!r:.40}",
            ),
            ("MAX_COUNTDOWN", self.max_countdown < 1, f">= 1 s, got {_s(self.max_countdown)}"),
            ("RETRY_BACKOFF", self.retry_backoff <= 0, f"> 0 s, got {_s(self.retry_backoff)}"),
            ("CLAIM_LEASE", self.claim_lease < 1, f">= 1 s, got {_s(self.claim_lease)}"),
            ("RESTORE_INTERVAL", restore is not None and restore <= 0, f"> 0 s, got {_s(restore)}"),
            ("SEND_RETRIES", self.send_retries < 0, f">= 0, got {self.send_retries}"),
            ("SMTP_ATTEMPTS", self.smtp_attempts < 1, f">= 1, got {self.smtp_attempts}"),
            (
                "METRICS_PORT",
                self.metrics_port is not None and not 0 < self.metrics_port < 65536,
                f"1-65535, got {self.metrics_port}",
            ),
            (
                "LATE_TOLERANCE",
                not 0 <= self.late_tolerance <= 3600,
                f"0-1h, got {_s(self.late_tolerance)}",
            ),
            ("SUPPRESS_FOR", self.suppress_for <= 0, f"> 0 s, got {_s(self.suppress_for)}"),
            ("POISON_AFTER", self.poison_after < 1, f">= 1, got {self.poison_after}"),
            (
                "MAX_MESSAGE_BYTES",
                self.max_message_bytes < 1024,
                f">= 1024, got {self.max_message_bytes}",
            ),
            (
                "LOG_FORMAT",
                self.log_format not in ("text", "json"),
                f"text or json, got {self.log_format!r:.40}",
            ),
            (
                "PARK_AFTER",
                self.park_after is not None and self.park_after <= 0,
                f"> 0 s or off, got {_s(self.park_after)}",
            ),
            ("PROMOTE_LEASE", self.promote_lease < 1, f">= 1 s, got {_s(self.promote_lease)}"),
            ("MAX_BOOKINGS", self.max_bookings < 1000, f">= 1000, got {self.max_bookings}"),
        )

    def _check_holds(self) -> None:
        if self.throttle_hold is not None and not 0 < self.throttle_hold <= 86_400:
            raise ValueError(
                f"{PREFIX}THROTTLE_HOLD must be > 0 s and at most 1d, or off, got "
                f"{self.throttle_hold:g} s"
            )
        hold = self.throttle_hold or 0.0
        if not hold <= self.throttle_hold_max <= 86_400 or self.throttle_hold_max <= 0:
            raise ValueError(
                f"{PREFIX}THROTTLE_HOLD_MAX must be > 0 s, at least {PREFIX}THROTTLE_HOLD "
                f"({hold:g} s) and at most 1d, got {self.throttle_hold_max:g} s"
            )
        if not 0 < self.greylist_delay <= 86_400:
            raise ValueError(
                f"{PREFIX}GREYLIST_DELAY must be > 0 s and at most 1d, got "
                f"{self.greylist_delay:g} s"
            )
        if self.hold_evidence is not None:
            count, window = self.hold_evidence
            if not (2 <= count <= 1000 and 0 < window <= 3600):
                raise ValueError(
                    f"{PREFIX}HOLD_EVIDENCE must be count/window with a count of 2-1000 and a "
                    f"window > 0 s and at most 1h, or off, got {count}/{window:g}s"
                )

    @property
    def longest_countdown(self) -> float:
        """The longest countdown a worker holds, in seconds: longer waits are parked
        (``park_after``) or hop (``max_countdown``), whichever bound is shorter."""
        if self.park_after is None:
            return self.max_countdown
        return min(self.max_countdown, self.park_after)

    @property
    def visibility_timeout(self) -> float:
        """Seconds the Redis broker waits before handing an unacknowledged task out again."""
        if self.visibility_timeout_override is not None:
            return self.visibility_timeout_override
        return 2 * self.longest_countdown + defaults.VISIBILITY_MARGIN

    def problems(self) -> list[str]:
        """What makes these settings unfit for shared workers, one line each (empty: none).

        Checked when a worker starts and by the commands that touch shared storage; not at
        parse time, since tests and tools build such settings on purpose.
        """
        found = []
        shared = self.limiter_url.split(":", 1)[0].startswith(("redis", "rediss", "unix"))
        if shared and not self.secret:
            found.append(
                f"{PREFIX}SECRET is not set but {PREFIX}LIMITER_URL is shared storage: workers "
                "without the same secret keep separate budgets and the key hash protects "
                f"nothing; set {PREFIX}SECRET (e.g. openssl rand -hex 32), the same everywhere"
            )
        bulk = sorted(name.upper() for name, kind in self.kinds.items() if kind.unsubscribe)
        needs = [("UNSUBSCRIBE_URL", self.unsubscribe_url), ("SECRET", self.secret)]
        for variable in [name for name, value in needs if bulk and not value][:1]:
            found.append(
                f"{PREFIX}KIND_{bulk[0]}_UNSUBSCRIBE=1 makes a bulk kind, whose one-click "
                f"unsubscribe link needs {PREFIX}{variable} (https://example.org/unsubscribe; "
                "a secret to sign it)"
            )
        amqp = self.broker_url.split(":", 1)[0] in ("amqp", "amqps", "pyamqp")
        if amqp and self.longest_countdown >= RABBITMQ_CONSUMER_TIMEOUT:
            bound = (
                "MAX_COUNTDOWN" if self.longest_countdown == self.max_countdown else "PARK_AFTER"
            )
            found.append(
                f"{PREFIX}{bound} ({self.longest_countdown:g} s) reaches RabbitMQ's default "
                f"consumer_timeout ({RABBITMQ_CONSUMER_TIMEOUT:g} s), which would close the "
                "channel of a waiting mail; use at most 20m"
            )
        return found

    def guard_config(self) -> GuardConfig:
        """The guard's knobs from these settings."""
        return GuardConfig(
            sender=self.sender,
            fail_open=self.fail_mode == "fail_open",
            max_backoff=self.max_countdown,
            send_retries=self.send_retries,
            retry_backoff=self.retry_backoff,
            claim_lease=self.claim_lease,
            suppress_for=self.suppress_for,
            late_tolerance=self.late_tolerance,
            throttle_hold=self.throttle_hold,
            throttle_hold_max=self.throttle_hold_max,
            greylist_delay=self.greylist_delay,
            hold_evidence=self.hold_evidence,
        )

    @property
    def effective_ledger_url(self) -> str:
        """The ledger's URL: its own setting, else the limiter's."""
        return self.ledger_url or self.limiter_url

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read ``MAILGUARD_*`` variables (``os.environ`` by default).

        Raises ``ValueError``, one line naming the variable and the accepted form, for a bad
        value or an unknown ``MAILGUARD_`` name (a typo must not silently fall back to a
        default; a near miss gets the closest names: :func:`unknown_setting`).
        """
        env = os.environ if environ is None else environ
        unknown = sorted(
            name
            for name in env
            if name.startswith(PREFIX)
            and name not in KNOWN | TEST_ONLY
            and not name.startswith(PREFIX + "KIND_")
        )
        if unknown:
            raise ValueError(unknown_setting(unknown[0]))
        values = read_values(env)
        values["kinds"] = Kinds.from_env(env)
        return cls(**values)  # type: ignore[arg-type]


def _s(seconds: float | None) -> str:
    """A number of seconds as shown in a refusal."""
    return "off" if seconds is None else f"{seconds:g} s"


def unknown_setting(name: str) -> str:
    """The one line refusing an unknown ``MAILGUARD_`` ``name``: the closest known names when
    some are near (``MAILGUARD_POLCY``: did you mean ``MAILGUARD_POLICY``?), else every name."""
    suffixes = sorted(known[len(PREFIX) :] for known in KNOWN)
    close = get_close_matches(name[len(PREFIX) :].upper(), suffixes, n=2, cutoff=0.6)
    if close:
        return f"unknown setting {name}; did you mean {' or '.join(PREFIX + c for c in close)}?"
    return (
        f"unknown setting {name}; known: {', '.join(sorted(KNOWN))} and {PREFIX}KIND_<NAME>_<FIELD>"
    )
