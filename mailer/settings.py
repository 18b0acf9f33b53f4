"""Settings from environment variables, all prefixed ``MAILGUARD_``; defaults need nothing installed.

With no environment at all everything runs inside one process: a memory broker with an
in-process worker, the memory limiter, the console transport. A deployment sets the URLs.

| variable | type | default | example | meaning |
|---|---|---|---|---|
| ``MAILGUARD_BROKER_URL`` | URL | ``memory://`` | ``redis://localhost:6379/1`` | Celery broker (``redis://…``, ``amqp://…``, ``redis+sentinel://…``) |
| ``MAILGUARD_RESULT_BACKEND`` | URL | ``cache+memory://`` | ``redis://localhost:6379/2`` | where outcomes are stored (``redis://…``, ``redis+sentinel://…``) |
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
| ``MAILGUARD_SEND_RETRIES`` | whole number | ``5`` | ``8`` | accepted for 0.1.0's configurations, bounds nothing: a mail is kept through temporary failures until its kind's lifetime (``MAILGUARD_LIFETIME``); the quick tries within one run are ``MAILGUARD_SMTP_ATTEMPTS`` |
| ``MAILGUARD_RETRY_BACKOFF`` | duration | ``30s`` | ``1m`` | the first wait after a failed run, doubled each time: after a refused send (4xx, greylisting with no stated delay aside, a relay down) up to ``RETRY_BACKOFF_MAX``, after a backend down up to ``MAX_COUNTDOWN`` |
| ``MAILGUARD_CLAIM_LEASE`` | duration | ``5m`` | ``10m`` | how long a worker's claim on sending one mail lasts |
| ``MAILGUARD_LATE_TOLERANCE`` | duration | ``1s`` | ``100ms`` | a run that starts later than its booked slot by more asks the limiter again |
| ``MAILGUARD_SMTP_ATTEMPTS`` | whole number | ``3`` | ``5`` | SMTP tries per Celery run (tenacity, random exponential backoff): the quick reconnects within one run, never a bound on a mail's life |
| ``MAILGUARD_SUPPRESS_FOR`` | duration | ``30d`` | ``90d`` | how long a hard bounce (``550 5.1.1 user unknown``) suppresses the recipient |
| ``MAILGUARD_THROTTLE_HOLD`` | duration or ``off`` | ``5s`` | ``30s`` | a hold's first length when the reply states no delay: a rate or quota reply (``454 Throttling failure``, ``421 4.7.28``) holds the sender that long, ``450 4.2.1`` one recipient; ``off``: no holds and no greylisting delay, such replies are retried like any 4xx |
| ``MAILGUARD_THROTTLE_HOLD_MAX`` | duration | ``15m`` | ``1h`` | the longest a hold grows by doubling while the throttling continues (>= ``THROTTLE_HOLD``, at most ``1d``) |
| ``MAILGUARD_GREYLIST_DELAY`` | duration | ``60s`` | ``5m`` | the first wait of a greylisted mail (``451 4.7.1 try again later``, Postgrey) when the reply states no delay; the waits after the next greylisting replies are 5, 10, 20, 40 times it, then doubling up to ``RETRY_BACKOFF_MAX``; never counted against a budget, nobody else waits (> 0, at most ``1d``) |
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
| ``MAILGUARD_REPUTATION`` | rates, ``on`` or ``off`` | ``off`` | ``complaint 0.3%, bounce 5%`` | per sender (From address), the complaint and hard-bounce rates over the window at which the sender's bulk kinds pause (deferred / ``reputation``) until the rate falls back or ``mailguard reputation resume``; without a complaint rate (and with ``on``) the providers' 0.3 % is taken, and a complaint at 0.1 % or more logs a WARNING first; ``off``: nothing counted |
| ``MAILGUARD_REPUTATION_WINDOW`` | duration | ``24h`` | ``7d`` | the rolling window the reputation's rates are counted over (in 24 buckets), ``1m``-``30d`` |
| ``MAILGUARD_REPUTATION_MIN`` | whole number | ``1000`` | ``5000`` | mails sent in the window below which no rate warns or counts (a sender is never paused on a tiny volume: under 1000 mails one complaint is over 0.1 %) |
| ``MAILGUARD_LIFETIME`` | duration | ``5d`` | ``2d`` | how long after the guard first saw it a mail is kept through temporary failures (4xx replies, greylisting, refused or dropped connections, timeouts, a relay down) when its kind sets no ``_LIFETIME``; then ``dropped`` / ``expired`` with the last reply (Postfix's ``maximal_queue_lifetime``, ``5d``; ``1s``-``7d``) |
| ``MAILGUARD_RETRY_BACKOFF_MAX`` | duration | ``4000s`` | ``1h`` | the longest wait between two tries of a mail the relay refused for a time (Postfix's ``maximal_backoff_time``, ``4000s``; at least ``RETRY_BACKOFF``, at most ``1d``); such waits are parked (``PARK_AFTER``) and judged by the limiter again when they run; with parking ``off`` a wait is held at most ``MAX_COUNTDOWN``, so that is the cap then |
| ``MAILGUARD_SMTP_CA_FILE`` | path | none (the system's trust) | ``/etc/mailguard/relay-ca.pem`` | the CAs (PEM) the SMTP transport trusts for its relay's certificate, instead of the system's; this transport's only (not Redis TLS, not ``SSL_CERT_FILE``); checked at start |
| ``MAILGUARD_SMTP_CA_DIR`` | directory | none (the system's trust) | ``/etc/mailguard/cas`` | a directory of CA certificates (``openssl rehash``) the SMTP transport trusts, with or instead of ``SMTP_CA_FILE``; checked at start |
| ``MAILGUARD_SMTP_VERIFY`` | ``on`` or ``off`` | ``on`` | ``off`` | ``off``: the SMTP transport accepts any certificate and host name (a relay on the same host only; a warning at start) |
| ``MAILGUARD_SMTP_CERT_FILE`` | path | none | ``/etc/mailguard/client.pem`` | the client certificate (PEM, with its key unless ``SMTP_KEY_FILE``) the SMTP transport presents to a relay that asks for one; checked at start |
| ``MAILGUARD_SMTP_KEY_FILE`` | path | the key in ``SMTP_CERT_FILE`` | ``/etc/mailguard/client.key`` | the client certificate's private key (PEM, unencrypted) |
| ``MAILGUARD_SMTP_EHLO`` | host name | the host's FQDN (``socket.getfqdn()``) | ``mail.example.org`` | the name the SMTP transport gives in ``EHLO`` (a host name or an address literal ``[192.0.2.1]``) |
| ``MAILGUARD_SMTP_SESSION_MAILS`` | whole number | ``100`` | ``20`` | the most mails one SMTP connection carries (checked on its socket between them, no command), then ``QUIT`` and a new one; ``1``: a connection per mail (1-100000) |
| ``MAILGUARD_SMTP_SESSION_IDLE`` | duration | ``30s`` | ``10s`` | an open SMTP connection idle longer than this is closed (``QUIT``) at the next mail, which opens another; keep it under the relay's own idle timeout (Postfix's ``smtpd_timeout``: 300 s) (> 0, at most ``1h``) |
| ``MAILGUARD_ALLOW_RESERVED_DOMAINS`` | names or ``off`` | ``off`` | ``local, test`` | recipient domains under these reserved names (``local``, ``test``, ``corp.local``: special-use names or names under one) are accepted, for an internal relay that delivers them; ``off``: refused at ``send_mail.delay`` |
| ``MAILGUARD_ENQUEUE_TIMEOUT`` | duration | ``5s`` | ``2s`` | how long ``send_mail.delay`` (and Django's backend) tries to reach the broker and the result backend before it raises ``NotEnqueued``: the mail was not enqueued, calling again is safe (``500ms``-``1m``) |
| ``MAILGUARD_ALLOW_EVICTION`` | ``on`` or ``off`` | ``off`` | ``on`` | ``on``: a worker whose broker, limiter or ledger Redis may evict keys (``maxmemory-policy`` not ``noeviction``) starts with a warning; ``off``: it refuses to start, naming the server's policy (see the start checks' guide) |
| ``MAILGUARD_FAILED_RETENTION`` | duration or ``off`` | ``7d`` | ``2d`` | how long a mail that ended ``failed`` keeps its payload (args and kwargs, in the ledger's Redis) so that ``mailguard retry`` can enqueue it again once (``1m``-``30d``); ``off``: nothing kept |
| ``MAILGUARD_DNS_SERVERS`` | ``ip[:port]``, comma separated | the system's resolver (``/etc/resolv.conf``) | ``127.0.0.1:5353`` | the DNS servers asked for recipient domains' MX, to find each domain's mailbox provider (:mod:`mailer.providers`; IPv6 as ``[ip]:port``, port 53 by default) |
| ``MAILGUARD_DNS_TIMEOUT`` | duration | ``2s`` | ``500ms`` | the bound on one MX lookup, every server and retry included (``100ms``-``30s``); past it the domain is its own provider for a minute and mail is not held up |
| ``MAILGUARD_PROVIDER_HOLDS`` | ``on`` or ``off`` | ``on`` | ``off`` | ``on``: a rate or reputation reply that names its provider (Gmail's ``4.7.28``, Yahoo's ``[TSS04]`` and ``[TS01]``-``[TS03]``, Microsoft's ``RP-001``-``RP-003``) for a recipient at that provider by MX holds that provider's mail alone (Gmail at least 10 min, Yahoo's ``[TSS04]`` 2 h, the others ``THROTTLE_HOLD`` doubling), each provider with its own slow start after it; MX is asked (``DNS_SERVERS``) only on such a reply and while such a hold or its pace is stored; ``off``: every rate reply holds the sender; with holds on only |
| ``MAILGUARD_WARMUP`` | plans or ``off`` | ``off`` | ``orders@example.org: sendgrid; example.org: 50, 100, 200`` | warm-up plans per sender address or sending domain (``;`` between entries): ``sendgrid``, ``sparkpost`` or mails a day from day 1; over the day's allowance a mail waits for the next day (deferred / ``warmup``); transactional kinds are counted, never held |
| ``MAILGUARD_WARMUP_IDLE`` | duration | ``30d`` | ``14d`` | a sender on a plan that sent nothing this long starts over on day 1 (``1d``-``365d``) |
| ``MAILGUARD_QUEUE_TYPE`` | ``classic`` or ``quorum`` | ``classic`` | ``quorum`` | the RabbitMQ queue type of the mail queues: ``quorum`` replicates them over the cluster's nodes, one queue per priority lane (``<queue>.p9``, ``.p5``, ``.p0``), with publisher confirms, a delivery limit above ``MAILGUARD_POISON_AFTER`` and the dead-letter queue ``<queue>.dead`` (see the RabbitMQ guide); ignored on other brokers |
| ``MAILGUARD_PACE_WINDOW`` | duration | ``60s`` | ``10s`` | the window a throttling relay counts in (Postfix's ``anvil_rate_time_unit``): at a throttling reply while paced, the mails accepted in the last window are the relay's count per window, and the pace sends that many per window (plus 10 %) instead of growing; the count is kept a day (``1s``-``1d``) |
| ``MAILGUARD_FLEET_LEASE`` | duration | ``3s`` | ``5s`` | how long the lease of the one worker of a queue that polls the schedule, the watchdog and the outbox lasts unrenewed (``1s``-``1m``); another worker takes over within this plus 2 s once its holder dies |
| ``MAILGUARD_LIVENESS_BEAT`` | duration | ``5s`` | ``2s`` | how often an idle worker writes its liveness record (``1s``-``5s``: ``mailguard health`` calls a worker unseen for 15 s gone) |
| ``MAILGUARD_POLICY_CHECK`` | duration | ``1s`` | ``10s`` | how often each worker process reads the live policy's version (by a mail's run; never while idle) (``100ms``-``1m``) |
| ``MAILGUARD_KIND_<NAME>_MAX_WAIT`` / ``_LIFETIME`` / ``_PRIORITY`` / ``_SHARE`` / ``_SUBJECT`` / ``_BODY`` / ``_HTML`` / ``_UNSUBSCRIBE`` / ``_TRANSACTIONAL`` | per option: duration, duration (0-7d), 0-9, share (0, 1], template, ``1`` or ``0``, ``1`` or ``0`` | built-ins | ``MAILGUARD_KIND_NEWSLETTER_UNSUBSCRIBE=1`` | kinds; ``_LIFETIME`` how long a mail of the kind is kept through temporary failures, never less than ``_MAX_WAIT`` (``0``: ``_MAX_WAIT`` is its deadline, as for the built-in ``code``; unset: ``MAILGUARD_LIFETIME``); ``_UNSUBSCRIBE=1`` makes a bulk kind (one-click unsubscribe, paused by a bad reputation) |

Durations are ``300``, ``500ms``, ``30s``, ``5m``, ``24h``, ``1d``. The longest countdown is
``min(MAX_COUNTDOWN, PARK_AFTER)`` (``MAX_COUNTDOWN`` with parking off): longer waits are parked.
The broker's ``visibility_timeout`` is derived: ``2 * longest countdown + 5m``, so no countdown ever outlives it
(a Redis broker hands a task out again once it has been unacknowledged that long). Setting it
lower makes redeliveries happen; the ledger still keeps them from sending twice.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass

from mailer import defaults, settings_checks
from mailer.guard import GuardConfig
from mailer.mail.address import AddressRules
from mailer.mail.kinds import Kinds
from mailer.mail.transports import registry as transports
from mailer.mail.transports.smtp_tls import TlsOptions
from mailer.settings_checks import RABBITMQ_CONSUMER_TIMEOUT
from mailer.settings_env import ALL_INTERFACES, KNOWN, read_values, unknown_names, unknown_setting
from mailer.settings_values import FailMode, LogFormat, Values

__all__ = [
    "ALL_INTERFACES",
    "KNOWN",
    "RABBITMQ_CONSUMER_TIMEOUT",
    "FailMode",
    "LogFormat",
    "Settings",
    "unknown_setting",
]


@dataclass(frozen=True)
class Settings(Values):
    """Everything a mailguard worker is configured with (the values: :class:`Values`).
    Durations in seconds.

    Built, each value is checked (:func:`mailer.settings_checks.check`: ``ValueError`` in one
    line naming the variable); :meth:`from_env` parses the variables with
    :mod:`mailer.settings_env`.
    """

    def __post_init__(self) -> None:
        settings_checks.check(self)

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
            smtp_tls=TlsOptions(
                ca_file=self.smtp_ca_file,
                ca_dir=self.smtp_ca_dir,
                verify=self.smtp_verify,
                cert_file=self.smtp_cert_file,
                key_file=self.smtp_key_file,
            ),
            smtp_ehlo=self.smtp_ehlo,
            smtp_session_mails=self.smtp_session_mails,
            smtp_session_idle=self.smtp_session_idle,
        )

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
        return settings_checks.problems(self)

    @functools.cached_property
    def address_rules(self) -> AddressRules:
        """How addresses are checked (the reserved domains ``ALLOW_RESERVED_DOMAINS`` admits),
        at ``send_mail.delay`` as in the guard."""
        return AddressRules(reserved_domains=self.allow_reserved_domains)

    def guard_config(self) -> GuardConfig:
        """The guard's knobs from these settings."""
        return GuardConfig(
            sender=self.sender,
            rules=self.address_rules,
            fail_open=self.fail_mode == "fail_open",
            max_backoff=self.max_countdown,
            retry_backoff=self.retry_backoff,
            claim_lease=self.claim_lease,
            suppress_for=self.suppress_for,
            late_tolerance=self.late_tolerance,
            throttle_hold=self.throttle_hold,
            throttle_hold_max=self.throttle_hold_max,
            greylist_delay=self.greylist_delay,
            hold_evidence=self.hold_evidence,
            lifetime=self.lifetime,
            retry_backoff_max=self.retry_backoff_max,
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
        unknown = unknown_names(env)
        if unknown:
            raise ValueError(unknown_setting(unknown[0]))
        values = read_values(env)
        values["kinds"] = Kinds.from_env(env)
        return cls(**values)  # type: ignore[arg-type]
