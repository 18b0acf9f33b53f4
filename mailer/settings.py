"""Settings from environment variables, all prefixed ``MAILGUARD_``; defaults need nothing installed.

With no environment at all everything runs inside one process: a memory broker with an
in-process worker, the memory limiter, the console transport. A deployment sets the URLs.

| variable | default | meaning |
|---|---|---|
| ``MAILGUARD_BROKER_URL`` | ``memory://`` | Celery broker (``redis://…``, ``amqp://…``) |
| ``MAILGUARD_RESULT_BACKEND`` | ``cache+memory://`` | where outcomes are stored (``redis://…``) |
| ``MAILGUARD_LIMITER_URL`` | ``memory://`` | limiter storage (``redis://…`` for several processes) |
| ``MAILGUARD_LEDGER_URL`` | the limiter URL | where sent-markers and send claims live |
| ``MAILGUARD_SMTP_URL`` | ``console://`` | ``smtp://host:port``, ``smtps://user:pass@host``, ``?starttls=1``; ``console://``, ``memory://`` |
| ``MAILGUARD_POLICY`` | ``1/60s, 5/1h, 10/24h`` | tiers per recipient |
| ``MAILGUARD_SECRET`` | none | keys the hash of every stored address: set it, the same everywhere |
| ``MAILGUARD_SENDER`` | ``mailguard@localhost`` | the From header: an address or ``Name <address>`` (checked at start) |
| ``MAILGUARD_FAIL_MODE`` | ``fail_closed`` | limiter down: ``fail_closed`` defers, ``fail_open`` sends unguarded |
| ``MAILGUARD_QUEUE`` | ``mail`` | the kombu queue of ``send_mail`` |
| ``MAILGUARD_MAX_COUNTDOWN`` | ``10m`` | longest single deferral; longer waits hop |
| ``MAILGUARD_PARK_AFTER`` | ``30s`` | a deferral longer than this is parked in the schedule (:mod:`mailer.records.schedule`), not held by a worker; ``off`` holds every wait as a countdown |
| ``MAILGUARD_PROMOTE_LEASE`` | ``30s`` | how long a worker holds the parked mails it is promoting before another may take them again |
| ``MAILGUARD_SEND_RETRIES`` | ``5`` | Celery-level retries after the transport gave up on a transient error |
| ``MAILGUARD_RETRY_BACKOFF`` | ``30s`` | first Celery-level retry delay, doubled each time, capped at ``MAX_COUNTDOWN`` |
| ``MAILGUARD_CLAIM_LEASE`` | ``5m`` | how long a worker's claim on sending one mail lasts |
| ``MAILGUARD_LATE_TOLERANCE`` | ``1s`` | a run that starts later than its booked slot by more asks the limiter again |
| ``MAILGUARD_SMTP_ATTEMPTS`` | ``3`` | SMTP tries per Celery run (tenacity, random exponential backoff) |
| ``MAILGUARD_SUPPRESS_FOR`` | ``30d`` | how long a hard bounce (``550 5.1.1 user unknown``) suppresses the recipient |
| ``MAILGUARD_THROTTLE_HOLD`` | ``60s`` | how long a throttling reply (``454 4.7.0``, ``421``) holds the sender, or ``450 4.2.1`` one recipient, when the reply states no delay; ``off``: no holds, such replies are retried like any 4xx |
| ``MAILGUARD_THROTTLE_HOLD_MAX`` | ``15m`` | the longest a hold grows by doubling while throttling replies keep coming (>= ``THROTTLE_HOLD``, at most ``1d``) |
| ``MAILGUARD_POISON_AFTER`` | ``3`` | redelivered copies of one mail handed to a worker's pool, none of whose runs ended, before the message is quarantined as ``dropped`` / ``poison`` |
| ``MAILGUARD_MAX_MESSAGE_BYTES`` | ``10MB`` | the largest ``send_mail`` call (its arguments as JSON), refused at enqueue beyond it: ``1048576``, ``512KB``, ``10MB`` |
| ``MAILGUARD_VISIBILITY_TIMEOUT`` | ``2 * longest countdown + 5m`` | Redis broker redelivery timeout; set lower only to test redelivery |
| ``MAILGUARD_RESTORE_INTERVAL`` | kombu's (about 100 s) | how often a worker sweeps the Redis broker for unacknowledged tasks past the visibility timeout |
| ``MAILGUARD_METRICS_PORT`` | none (no server) | the worker serves Prometheus metrics on this port (``9808``, all interfaces) or ``host:port`` (``127.0.0.1:9808``) |
| ``MAILGUARD_TIMEZONE`` | ``UTC`` | where ``fixed`` tiers' calendar windows start (``1d`` at local midnight): an IANA name such as ``Europe/Paris`` |
| ``MAILGUARD_LOG_FORMAT`` | ``text`` | the worker's log lines: ``text`` (Celery's format) or ``json`` (one object a line, with ``mail_id``, ``recipient`` hash, ``kind``, ``status``, ``reason``) |
| ``MAILGUARD_KIND_<NAME>_MAX_WAIT`` / ``_PRIORITY`` / ``_SHARE`` / ``_SUBJECT`` / ``_BODY`` / ``_HTML`` | built-ins | kinds |

Durations are ``300``, ``500ms``, ``30s``, ``5m``, ``24h``, ``1d``. The longest countdown is
``min(MAX_COUNTDOWN, PARK_AFTER)`` (``MAX_COUNTDOWN`` with parking off): longer waits are parked.
The broker's ``visibility_timeout`` is derived: ``2 * longest countdown + 5m``, so no countdown ever outlives it
(a Redis broker hands a task out again once it has been unacknowledged that long). Setting it
lower makes redeliveries happen; the ledger still keeps them from sending twice.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from difflib import get_close_matches
from typing import Literal

from mailer import defaults
from mailer.durations import parse_duration, parse_size
from mailer.errors import InvalidAddress
from mailer.guard import GuardConfig
from mailer.limits.policy import REFERENCE_POLICY, Policy
from mailer.limits.windows import zone
from mailer.mail.address import check_sender
from mailer.mail.kinds import Kinds

PREFIX = "MAILGUARD_"
#: RabbitMQ's default ``consumer_timeout``: a message held unacknowledged longer closes its
#: channel. Countdown tasks are held by the worker until they run, so they must stay below it.
RABBITMQ_CONSUMER_TIMEOUT = 1800.0
FailMode = Literal["fail_closed", "fail_open"]
LogFormat = Literal["text", "json"]
ALL_INTERFACES = "0.0.0.0"  # noqa: S104 - metrics are scraped from other hosts; opt-in port

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
        "THROTTLE_HOLD",
        "THROTTLE_HOLD_MAX",
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
    throttle_hold: float | None = defaults.THROTTLE_HOLD
    throttle_hold_max: float = defaults.THROTTLE_HOLD_MAX
    kinds: Kinds = field(default_factory=Kinds.defaults)

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
            max_countdown=self.max_countdown,
            send_retries=self.send_retries,
            retry_backoff=self.retry_backoff,
            claim_lease=self.claim_lease,
            suppress_for=self.suppress_for,
            late_tolerance=self.late_tolerance,
            throttle_hold=self.throttle_hold,
            throttle_hold_max=self.throttle_hold_max,
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
            and name not in KNOWN
            and not name.startswith(PREFIX + "KIND_")
        )
        if unknown:
            raise ValueError(unknown_setting(unknown[0]))
        values = _read_values(env)
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


#: Variables read as plain text into the attribute of the same name, lower case.
_TEXT = (
    "BROKER_URL",
    "LIMITER_URL",
    "LEDGER_URL",
    "SMTP_URL",
    "SECRET",
    "SENDER",
    "FAIL_MODE",
    "QUEUE",
)
#: Variables read as durations (seconds) and the attribute each sets.
_DURATIONS = (
    ("MAX_COUNTDOWN", "max_countdown"),
    ("RETRY_BACKOFF", "retry_backoff"),
    ("CLAIM_LEASE", "claim_lease"),
    ("VISIBILITY_TIMEOUT", "visibility_timeout_override"),
    ("RESTORE_INTERVAL", "restore_interval"),
    ("SUPPRESS_FOR", "suppress_for"),
    ("LATE_TOLERANCE", "late_tolerance"),
)


def _read_values(env: Mapping[str, str]) -> dict[str, object]:
    """The settings' values given by ``env``, parsed; ``ValueError`` names a bad variable."""
    values: dict[str, object] = {}
    for name, attr, parse in _READERS:
        value = env.get(PREFIX + name)
        if value is None or value == "":
            continue
        try:
            parsed = parse(value)
        except ValueError as exc:
            raise ValueError(f"{PREFIX}{name}: {exc}") from None
        if isinstance(parsed, _Several):
            values.update(parsed.values)
        else:
            values[attr] = parsed
    return values


@dataclass(frozen=True)
class _Several:
    """A parser's answer that sets several attributes at once."""

    values: dict[str, object]


def _text(value: str) -> str:
    return value


def _off_or_duration(value: str) -> float | None:
    """``off`` (the feature is off: None) or a duration in seconds."""
    return None if value.strip().lower() == "off" else parse_duration(value)


def _integer(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a whole number") from None


def _metrics_port(value: str) -> _Several:
    """``port`` or ``host:port`` (IPv6 hosts in brackets)."""
    host, _, number = value.rpartition(":")
    if not number.isdigit():
        raise ValueError(f"{value!r} is not a port or host:port")
    return _Several(
        {"metrics_port": int(number), "metrics_host": host.strip("[]") or ALL_INTERFACES}
    )


def _timezone(value: str) -> str:
    zone(value)  # an unknown zone raises here, at start
    return value


def _policy(value: str) -> Policy:
    return Policy.parse(value, name="recipient")


#: Each variable (without the prefix), the attribute it sets and how its text is parsed.
_READERS: tuple[tuple[str, str, Callable[[str], object]], ...] = (
    *((name, name.lower(), _text) for name in _TEXT),
    ("RESULT_BACKEND", "result_backend", _text),
    *((name, attr, parse_duration) for name, attr in _DURATIONS),
    ("PARK_AFTER", "park_after", _off_or_duration),
    ("PROMOTE_LEASE", "promote_lease", parse_duration),
    ("THROTTLE_HOLD", "throttle_hold", _off_or_duration),
    ("THROTTLE_HOLD_MAX", "throttle_hold_max", parse_duration),
    ("SEND_RETRIES", "send_retries", _integer),
    ("POISON_AFTER", "poison_after", _integer),
    ("METRICS_PORT", "metrics_port", _metrics_port),
    ("LOG_FORMAT", "log_format", _text),
    ("TIMEZONE", "timezone", _timezone),
    ("MAX_MESSAGE_BYTES", "max_message_bytes", parse_size),
    ("SMTP_ATTEMPTS", "smtp_attempts", _integer),
    ("POLICY", "policy", _policy),
)
