"""The values of mailguard's settings: each attribute with its type and default
(:class:`Values`), unchecked. :class:`mailer.settings.Settings` adds the checks, the parsing of
``MAILGUARD_*`` variables and what is built from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from mailer import defaults
from mailer.limits.checks import MAX_BOOKINGS
from mailer.limits.policy import REFERENCE_POLICY, Policy
from mailer.mail.kinds import Kinds
from mailer.mail.transports.registry import DEFAULT as DEFAULT_TRANSPORT
from mailer.records.holds.pace import PACE_START, PACE_STEP
from mailer.records.reputation.base import Thresholds
from mailer.records.warmup.plans import Plan
from mailer.settings_env import ALL_INTERFACES

FailMode = Literal["fail_closed", "fail_open"]
LogFormat = Literal["text", "json"]


@dataclass(frozen=True)
class Values:
    """Every setting's value, as :meth:`mailer.settings.Settings.from_env` reads it (the table
    of :mod:`mailer.settings`). Durations in seconds."""

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
    transport: str = DEFAULT_TRANSPORT
    django_backend: str | None = None
    ses_region: str | None = None
    ses_endpoint_url: str | None = None
    ses_configuration_set: str | None = None
    anymail_esp: str | None = None
    unsubscribe_url: str | None = None
    reputation: Thresholds | None = None
    reputation_window: float = defaults.REPUTATION_WINDOW
    reputation_min: int = defaults.REPUTATION_MIN
    lifetime: float = defaults.LIFETIME
    retry_backoff_max: float = defaults.RETRY_BACKOFF_MAX
    smtp_ca_file: str | None = None
    smtp_ca_dir: str | None = None
    smtp_verify: bool = True
    smtp_cert_file: str | None = None
    smtp_key_file: str | None = None
    smtp_ehlo: str | None = None
    smtp_session_mails: int = defaults.SMTP_SESSION_MAILS
    smtp_session_idle: float = defaults.SMTP_SESSION_IDLE
    allow_reserved_domains: frozenset[str] = frozenset()
    enqueue_timeout: float = defaults.ENQUEUE_TIMEOUT
    dns_servers: tuple[tuple[str, int], ...] = ()
    dns_timeout: float = defaults.DNS_TIMEOUT
    provider_holds: bool = True
    allow_eviction: bool = defaults.ALLOW_EVICTION
    failed_retention: float | None = defaults.FAILED_RETENTION
    warmup: dict[str, Plan] | None = None
    warmup_idle: float = defaults.WARMUP_IDLE
    queue_type: str = defaults.QUEUE_TYPE
    pace_window: float = defaults.PACE_WINDOW
    fleet_lease: float = defaults.FLEET_LEASE
    liveness_beat: float = defaults.LIVENESS_BEAT
    policy_check: float = defaults.POLICY_CHECK

    @property
    def longest_countdown(self) -> float:
        """The longest countdown a worker holds, in seconds: longer waits are parked
        (``park_after``) or hop (``max_countdown``), whichever bound is shorter."""
        if self.park_after is None:
            return self.max_countdown
        return min(self.max_countdown, self.park_after)
