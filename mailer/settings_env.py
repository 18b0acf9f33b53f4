"""Reading ``MAILGUARD_*`` variables: each variable's parser, in one table (:data:`READERS`),
which is also the one list of the variables there are (:data:`KNOWN`).

:func:`read_values` is what :meth:`mailer.settings.Settings.from_env` parses the environment
with; every error names its variable. A ``MAILGUARD_`` name that is none of them is refused
(:func:`unknown_setting`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from difflib import get_close_matches

from mailer.durations import parse_duration, parse_size
from mailer.limits.policy import Policy
from mailer.limits.windows import zone
from mailer.providers.resolver import parse_servers
from mailer.records.reputation.base import Thresholds
from mailer.records.warmup.plans import Plan, parse_plans

PREFIX = "MAILGUARD_"
#: Variables that tests read (``MAILGUARD_CRASH_AT``: :mod:`mailer.crashpoints`): not settings,
#: never refused as unknown, never to be set in production.
TEST_ONLY = frozenset({PREFIX + "CRASH_AT"})
#: What ``MAILGUARD_METRICS_PORT=9808`` (no host) binds to.
ALL_INTERFACES = "0.0.0.0"  # noqa: S104 - metrics are scraped from other hosts; opt-in port

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
    "TRANSPORT",
    "DJANGO_BACKEND",
    "SES_REGION",
    "SES_ENDPOINT_URL",
    "SES_CONFIGURATION_SET",
    "ANYMAIL_ESP",
    "UNSUBSCRIBE_URL",
    "SMTP_CA_FILE",
    "SMTP_CA_DIR",
    "SMTP_CERT_FILE",
    "SMTP_KEY_FILE",
    "SMTP_EHLO",
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


def read_values(env: Mapping[str, str]) -> dict[str, object]:
    """The settings' values given by ``env``, parsed; ``ValueError`` names a bad variable."""
    values: dict[str, object] = {}
    for name, attr, parse in READERS:
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


def _evidence(value: str) -> tuple[int, float] | None:
    """``off`` (None) or ``count/window``: ``3/10s``."""
    if value.strip().lower() == "off":
        return None
    count, slash, window = value.partition("/")
    if not slash or not count.strip().isdigit():
        raise ValueError(f"{value!r} is not count/window (3/10s) or off")
    return int(count), parse_duration(window.strip())


def _rate(value: str) -> float:
    """A number of mails per second: ``0.5``, ``2``."""
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a number of mails per second") from None


def _off_or_rate(value: str) -> float | None:
    """``off`` (None) or a number of mails per second."""
    return None if value.strip().lower() == "off" else _rate(value)


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


def _reputation(value: str) -> Thresholds | None:
    """``off`` (None), ``on`` (the providers' complaint rate, 0.3 %) or thresholds:
    ``complaint 0.3%, bounce 5%``; without a complaint rate, the providers' is taken."""
    word = value.strip().lower()
    if word == "off":
        return None
    if word == "on":
        return Thresholds().with_provider_defaults()
    return Thresholds.parse(value).with_provider_defaults()


def _warmup(value: str) -> dict[str, Plan] | None:
    """``off`` (None) or plans: ``orders@example.org: sendgrid; example.org: 50, 100, 200``."""
    return None if value.strip().lower() == "off" else parse_plans(value)


def _on_off(value: str) -> bool:
    """``on`` or ``off`` (also ``1``/``0``, ``true``/``false``, ``yes``/``no``)."""
    word = value.strip().lower()
    if word in ("on", "1", "true", "yes"):
        return True
    if word in ("off", "0", "false", "no"):
        return False
    raise ValueError(f"{value!r:.40} is not on or off")


def _suffixes(value: str) -> frozenset[str]:
    """``off`` (none) or domain suffixes separated by commas: ``local, test``."""
    if value.strip().lower() == "off":
        return frozenset()
    names = frozenset(part.strip().strip(".").lower() for part in value.split(","))
    return frozenset(name for name in names if name)


def _policy(value: str) -> Policy:
    return Policy.parse(value, name="recipient")


#: Each variable (without the prefix), the attribute it sets and how its text is parsed.
READERS: tuple[tuple[str, str, Callable[[str], object]], ...] = (
    *((name, name.lower(), _text) for name in _TEXT),
    ("RESULT_BACKEND", "result_backend", _text),
    *((name, attr, parse_duration) for name, attr in _DURATIONS),
    ("PARK_AFTER", "park_after", _off_or_duration),
    ("PROMOTE_LEASE", "promote_lease", parse_duration),
    ("WATCH_GRACE", "watch_grace", parse_duration),
    ("OUTBOX_GRACE", "outbox_grace", _off_or_duration),
    ("THROTTLE_HOLD", "throttle_hold", _off_or_duration),
    ("THROTTLE_HOLD_MAX", "throttle_hold_max", parse_duration),
    ("GREYLIST_DELAY", "greylist_delay", parse_duration),
    ("HOLD_EVIDENCE", "hold_evidence", _evidence),
    ("PACE_START", "pace_start", _off_or_rate),
    ("PACE_STEP", "pace_step", _rate),
    ("SEND_RETRIES", "send_retries", _integer),
    ("POISON_AFTER", "poison_after", _integer),
    ("MAX_BOOKINGS", "max_bookings", _integer),
    ("METRICS_PORT", "metrics_port", _metrics_port),
    ("LOG_FORMAT", "log_format", _text),
    ("TIMEZONE", "timezone", _timezone),
    ("MAX_MESSAGE_BYTES", "max_message_bytes", parse_size),
    ("SMTP_ATTEMPTS", "smtp_attempts", _integer),
    ("POLICY", "policy", _policy),
    ("REPUTATION", "reputation", _reputation),
    ("REPUTATION_WINDOW", "reputation_window", parse_duration),
    ("REPUTATION_MIN", "reputation_min", _integer),
    ("LIFETIME", "lifetime", parse_duration),
    ("RETRY_BACKOFF_MAX", "retry_backoff_max", parse_duration),
    ("SMTP_VERIFY", "smtp_verify", _on_off),
    ("SMTP_SESSION_MAILS", "smtp_session_mails", _integer),
    ("SMTP_SESSION_IDLE", "smtp_session_idle", parse_duration),
    ("ALLOW_RESERVED_DOMAINS", "allow_reserved_domains", _suffixes),
    ("ENQUEUE_TIMEOUT", "enqueue_timeout", parse_duration),
    ("DNS_SERVERS", "dns_servers", parse_servers),
    ("DNS_TIMEOUT", "dns_timeout", parse_duration),
    ("PROVIDER_HOLDS", "provider_holds", _on_off),
    ("ALLOW_EVICTION", "allow_eviction", _on_off),
    ("FAILED_RETENTION", "failed_retention", _off_or_duration),
    ("WARMUP", "warmup", _warmup),
    ("WARMUP_IDLE", "warmup_idle", parse_duration),
    ("QUEUE_TYPE", "queue_type", _text),
    ("PACE_WINDOW", "pace_window", parse_duration),
    ("FLEET_LEASE", "fleet_lease", parse_duration),
    ("LIVENESS_BEAT", "liveness_beat", parse_duration),
    ("POLICY_CHECK", "policy_check", parse_duration),
)

#: The variables :meth:`mailer.settings.Settings.from_env` reads (besides ``MAILGUARD_KIND_*``).
KNOWN = frozenset(PREFIX + name for name, _, _ in READERS)


def unknown_names(env: Mapping[str, str]) -> list[str]:
    """The ``MAILGUARD_`` names in ``env`` that no setting reads, sorted (a typo must not
    silently fall back to a default)."""
    return sorted(
        name
        for name in env
        if name.startswith(PREFIX)
        and name not in KNOWN | TEST_ONLY
        and not name.startswith(PREFIX + "KIND_")
    )


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
