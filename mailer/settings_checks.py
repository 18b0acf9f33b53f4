"""The checks on settings' values (:class:`mailer.settings_values.Values`): each value's bounds,
refused at parse time (:func:`check`), and what makes settings unfit for shared workers, found at
a worker's start (:func:`problems`). Every refusal is one line naming its ``MAILGUARD_`` variable.
"""

from __future__ import annotations

import re

from mailer.errors import InvalidAddress
from mailer.mail.address import check_sender, reserved_suffix_problem
from mailer.mail.kinds import MAX_LIFETIME
from mailer.mail.transports import registry as transports
from mailer.settings_env import PREFIX
from mailer.settings_values import Values
from mailer.storage import is_sentinel, parse_sentinel_url

#: RabbitMQ's default ``consumer_timeout``: a message held unacknowledged longer closes its
#: channel. Countdown tasks are held by the worker until they run, so they must stay below it.
RABBITMQ_CONSUMER_TIMEOUT = 1800.0
#: An EHLO name: a host name of LDH labels, or an address literal (``[192.0.2.1]``,
#: ``[IPv6:2001:db8::1]``).
_EHLO = re.compile(
    r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}"
    r"[A-Za-z0-9])?)*\.?|\[(?:IPv6:[0-9A-Fa-f:.]+|[0-9.]+)\]"
)
_UNSUBSCRIBE_URL = re.compile(
    r"^(https://[^\s/?#]+|http://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?)(/[^\s?#]*)?$"
)


def check(settings: Values) -> None:
    """Raise ``ValueError``, one line naming the variable and the accepted form, for the first
    value out of bounds in ``settings``."""
    for variable, bad, accepted in (*_bounds(settings), *_delivery_bounds(settings)):
        if bad:
            raise ValueError(f"{PREFIX}{variable} must be {accepted}")
    try:
        check_sender(settings.sender)
    except InvalidAddress as exc:
        raise ValueError(
            f"{PREFIX}SENDER must be an address (noreply@example.com) or "
            f'"Name <noreply@example.com>": {exc}'
        ) from None
    _check_holds(settings)
    _check_pace(settings)
    _check_watch(settings)
    _check_transport(settings)
    _check_bulk(settings)
    _check_smtp(settings)
    _check_failed(settings)
    _check_sentinel(settings)
    _check_fleet(settings)


def problems(settings: Values) -> list[str]:
    """What makes ``settings`` unfit for shared workers, one line each (empty: none)."""
    found = []
    shared = settings.limiter_url.split(":", 1)[0].startswith(("redis", "rediss", "unix"))
    if shared and not settings.secret:
        found.append(
            f"{PREFIX}SECRET is not set but {PREFIX}LIMITER_URL is shared storage: workers "
            "without the same secret keep separate budgets and the key hash protects "
            f"nothing; set {PREFIX}SECRET (e.g. openssl rand -hex 32), the same everywhere"
        )
    bulk = sorted(name.upper() for name, kind in settings.kinds.items() if kind.unsubscribe)
    needs = [("UNSUBSCRIBE_URL", settings.unsubscribe_url), ("SECRET", settings.secret)]
    for variable in [name for name, value in needs if bulk and not value][:1]:
        found.append(
            f"{PREFIX}KIND_{bulk[0]}_UNSUBSCRIBE=1 makes a bulk kind, whose one-click "
            f"unsubscribe link needs {PREFIX}{variable} (https://example.org/unsubscribe; "
            "a secret to sign it)"
        )
    amqp = settings.broker_url.split(":", 1)[0] in ("amqp", "amqps", "pyamqp")
    longest = settings.longest_countdown
    if amqp and longest >= RABBITMQ_CONSUMER_TIMEOUT:
        bound = "MAX_COUNTDOWN" if longest == settings.max_countdown else "PARK_AFTER"
        found.append(
            f"{PREFIX}{bound} ({longest:g} s) reaches RabbitMQ's default "
            f"consumer_timeout ({RABBITMQ_CONSUMER_TIMEOUT:g} s), which would close the "
            "channel of a waiting mail; use at most 20m"
        )
    return found


def _s(seconds: float | None) -> str:
    """A number of seconds as shown in a refusal."""
    return "off" if seconds is None else f"{seconds:g} s"


def _check_transport(settings: Values) -> None:
    """The transport's name, and the variable each built-in transport cannot do without."""
    if settings.transport not in transports.names():
        known = ", ".join(transports.names())
        raise ValueError(
            f"{PREFIX}TRANSPORT must be one of {known}, got {settings.transport!r:.40}"
        )
    if settings.transport == "ses" and not settings.ses_region:
        raise ValueError(f"{PREFIX}SES_REGION must be set with {PREFIX}TRANSPORT=ses (eu-west-1)")
    if settings.transport == "anymail" and not settings.anymail_esp:
        raise ValueError(
            f"{PREFIX}ANYMAIL_ESP must be set with {PREFIX}TRANSPORT=anymail (postmark, "
            "mailgun, sendgrid... : an ESP Anymail ships)"
        )


def _check_bulk(settings: Values) -> None:
    url = settings.unsubscribe_url
    if url is not None and not _UNSUBSCRIBE_URL.match(url):
        raise ValueError(
            f"{PREFIX}UNSUBSCRIBE_URL must be https://host/path (http:// only on localhost), "
            f"got {url!r:.60}"
        )
    if not 60 <= settings.reputation_window <= 30 * 86_400:
        raise ValueError(
            f"{PREFIX}REPUTATION_WINDOW must be 1m-30d, got {_s(settings.reputation_window)}"
        )
    if settings.reputation_min < 1:
        raise ValueError(f"{PREFIX}REPUTATION_MIN must be >= 1, got {settings.reputation_min}")
    if not 86_400 <= settings.warmup_idle <= 365 * 86_400:
        raise ValueError(f"{PREFIX}WARMUP_IDLE must be 1d-365d, got {_s(settings.warmup_idle)}")


def _check_pace(settings: Values) -> None:
    start = settings.pace_start
    if start is not None and not 0.01 <= start <= 10_000:
        raise ValueError(f"{PREFIX}PACE_START must be 0.01-10000 mails/s or off, got {start:g}")
    if not 0 <= settings.pace_step <= 10_000:
        raise ValueError(f"{PREFIX}PACE_STEP must be 0-10000 mails/s, got {settings.pace_step:g}")
    if not 1 <= settings.pace_window <= 86_400:
        raise ValueError(f"{PREFIX}PACE_WINDOW must be 1s-1d, got {settings.pace_window:g} s")


def _check_watch(settings: Values) -> None:
    if not 0.1 <= settings.watch_grace <= 600:
        raise ValueError(f"{PREFIX}WATCH_GRACE must be 100ms-10m, got {settings.watch_grace:g} s")
    grace = settings.outbox_grace
    if grace is not None and not 1 <= grace <= 600:
        raise ValueError(f"{PREFIX}OUTBOX_GRACE must be 1s-10m or off, got {grace:g} s")


def _bounds(settings: Values) -> tuple[tuple[str, bool, str], ...]:
    """Each value's check: its variable (without the prefix), whether the value is out of
    bounds, and the accepted form with the value given."""
    restore = settings.restore_interval
    return (
        (
            "FAIL_MODE",
            settings.fail_mode not in ("fail_closed", "fail_open"),
            f"fail_closed or fail_open, got {settings.fail_mode!r:.40}",
        ),
        ("MAX_COUNTDOWN", settings.max_countdown < 1, f">= 1 s, got {_s(settings.max_countdown)}"),
        ("RETRY_BACKOFF", settings.retry_backoff <= 0, f"> 0 s, got {_s(settings.retry_backoff)}"),
        ("CLAIM_LEASE", settings.claim_lease < 1, f">= 1 s, got {_s(settings.claim_lease)}"),
        ("RESTORE_INTERVAL", restore is not None and restore <= 0, f"> 0 s, got {_s(restore)}"),
        ("SEND_RETRIES", settings.send_retries < 0, f">= 0, got {settings.send_retries}"),
        ("SMTP_ATTEMPTS", settings.smtp_attempts < 1, f">= 1, got {settings.smtp_attempts}"),
        (
            "METRICS_PORT",
            settings.metrics_port is not None and not 0 < settings.metrics_port < 65536,
            f"1-65535, got {settings.metrics_port}",
        ),
        (
            "LATE_TOLERANCE",
            not 0 <= settings.late_tolerance <= 3600,
            f"0-1h, got {_s(settings.late_tolerance)}",
        ),
        ("SUPPRESS_FOR", settings.suppress_for <= 0, f"> 0 s, got {_s(settings.suppress_for)}"),
        ("POISON_AFTER", settings.poison_after < 1, f">= 1, got {settings.poison_after}"),
        (
            "MAX_MESSAGE_BYTES",
            settings.max_message_bytes < 1024,
            f">= 1024, got {settings.max_message_bytes}",
        ),
        (
            "LOG_FORMAT",
            settings.log_format not in ("text", "json"),
            f"text or json, got {settings.log_format!r:.40}",
        ),
        (
            "PARK_AFTER",
            settings.park_after is not None and settings.park_after <= 0,
            f"> 0 s or off, got {_s(settings.park_after)}",
        ),
        ("PROMOTE_LEASE", settings.promote_lease < 1, f">= 1 s, got {_s(settings.promote_lease)}"),
        ("MAX_BOOKINGS", settings.max_bookings < 1000, f">= 1000, got {settings.max_bookings}"),
    )


def _delivery_bounds(settings: Values) -> tuple[tuple[str, bool, str], ...]:
    """:func:`_bounds` of how long a mail is kept and retried, and of the enqueue and DNS
    waits (seconds)."""
    return (
        (
            "LIFETIME",
            not 1 <= settings.lifetime <= MAX_LIFETIME,
            f"1s-7d, got {_s(settings.lifetime)}",
        ),
        (
            "RETRY_BACKOFF_MAX",
            not settings.retry_backoff <= settings.retry_backoff_max <= 86_400,
            f"at least {PREFIX}RETRY_BACKOFF ({_s(settings.retry_backoff)}) and at most 1d, "
            f"got {_s(settings.retry_backoff_max)}",
        ),
        (
            "ENQUEUE_TIMEOUT",
            not 0.5 <= settings.enqueue_timeout <= 60,
            f"500ms-1m, got {_s(settings.enqueue_timeout)}",
        ),
        (
            "DNS_TIMEOUT",
            not 0.1 <= settings.dns_timeout <= 30,
            f"100ms-30s, got {_s(settings.dns_timeout)}",
        ),
        (
            "QUEUE_TYPE",
            settings.queue_type not in ("classic", "quorum"),
            f"classic or quorum, got {settings.queue_type!r:.40}",
        ),
    )


def _check_holds(settings: Values) -> None:
    if settings.throttle_hold is not None and not 0 < settings.throttle_hold <= 86_400:
        raise ValueError(
            f"{PREFIX}THROTTLE_HOLD must be > 0 s and at most 1d, or off, got "
            f"{settings.throttle_hold:g} s"
        )
    hold = settings.throttle_hold or 0.0
    if not hold <= settings.throttle_hold_max <= 86_400 or settings.throttle_hold_max <= 0:
        raise ValueError(
            f"{PREFIX}THROTTLE_HOLD_MAX must be > 0 s, at least {PREFIX}THROTTLE_HOLD "
            f"({hold:g} s) and at most 1d, got {settings.throttle_hold_max:g} s"
        )
    if not 0 < settings.greylist_delay <= 86_400:
        raise ValueError(
            f"{PREFIX}GREYLIST_DELAY must be > 0 s and at most 1d, got "
            f"{settings.greylist_delay:g} s"
        )
    if settings.hold_evidence is not None:
        count, window = settings.hold_evidence
        if not (2 <= count <= 1000 and 0 < window <= 3600):
            raise ValueError(
                f"{PREFIX}HOLD_EVIDENCE must be count/window with a count of 2-1000 and a "
                f"window > 0 s and at most 1h, or off, got {count}/{window:g}s"
            )


def _check_smtp(settings: Values) -> None:
    """The SMTP transport's session bounds, EHLO name and admitted reserved domains."""
    if not 1 <= settings.smtp_session_mails <= 100_000:
        raise ValueError(
            f"{PREFIX}SMTP_SESSION_MAILS must be 1-100000 (1: a connection per mail), got "
            f"{settings.smtp_session_mails}"
        )
    if not 0 < settings.smtp_session_idle <= 3600:
        raise ValueError(
            f"{PREFIX}SMTP_SESSION_IDLE must be > 0 s and at most 1h, got "
            f"{_s(settings.smtp_session_idle)}"
        )
    ehlo = settings.smtp_ehlo
    if ehlo is not None and (len(ehlo) > 255 or not _EHLO.fullmatch(ehlo)):
        raise ValueError(
            f"{PREFIX}SMTP_EHLO must be a host name (mail.example.org) or an address literal "
            f"([192.0.2.1]), got {ehlo!r:.60}"
        )
    for suffix in sorted(settings.allow_reserved_domains):
        problem = reserved_suffix_problem(suffix)
        if problem:
            raise ValueError(f"{PREFIX}ALLOW_RESERVED_DOMAINS: {problem}")


def _check_failed(settings: Values) -> None:
    kept = settings.failed_retention
    if kept is not None and not 60 <= kept <= 30 * 86_400:
        raise ValueError(f"{PREFIX}FAILED_RETENTION must be 1m-30d or off, got {_s(kept)}")


def _check_sentinel(settings: Values) -> None:
    """Every ``redis+sentinel://`` URL (broker, result backend, limiter, ledger) is one that
    :func:`mailer.storage.parse_sentinel_url` reads: sentinels, a service, a db number."""
    urls = (
        ("BROKER_URL", settings.broker_url),
        ("RESULT_BACKEND", settings.result_backend),
        ("LIMITER_URL", settings.limiter_url),
        ("LEDGER_URL", settings.ledger_url or ""),
    )
    for variable, url in urls:
        if is_sentinel(url):
            try:
                parse_sentinel_url(url)
            except ValueError as exc:
                raise ValueError(
                    f"{PREFIX}{variable} must be redis+sentinel://[:password@]host:port"
                    f"[,host:port...]/<service>[/<db>]: {exc}"
                ) from None


def _check_fleet(settings: Values) -> None:
    """The fleet's polling rates: the lease, the liveness beat, the live policy's reads."""
    if not 1 <= settings.fleet_lease <= 60:
        raise ValueError(f"{PREFIX}FLEET_LEASE must be 1s-1m, got {_s(settings.fleet_lease)}")
    if not 1 <= settings.liveness_beat <= 5:
        raise ValueError(f"{PREFIX}LIVENESS_BEAT must be 1s-5s, got {_s(settings.liveness_beat)}")
    if not 0.1 <= settings.policy_check <= 60:
        raise ValueError(f"{PREFIX}POLICY_CHECK must be 100ms-1m, got {_s(settings.policy_check)}")
