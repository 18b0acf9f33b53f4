"""Every default of the guard and the worker, named once. Durations in seconds.

:class:`~mailer.settings.Settings` (``MAILGUARD_*``) and :class:`~mailer.guard.GuardConfig`
both take their defaults from here; change a default here, nowhere else.
"""

from __future__ import annotations

#: The From address when ``MAILGUARD_SENDER`` is not set.
SENDER = "mailguard@localhost"
#: The kombu queue of ``send_mail``.
QUEUE = "mail"
#: Longest single countdown; a longer wait hops (runs again, finds its booking, defers again).
MAX_COUNTDOWN = 600.0
#: Accepted for 0.1.0's configurations (``MAILGUARD_SEND_RETRIES``); bounds nothing: a mail is
#: kept through temporary failures until its kind's lifetime (:data:`LIFETIME`), and the quick
#: tries within one run are :data:`SMTP_ATTEMPTS`.
SEND_RETRIES = 5
#: First delay of a retry after a temporary failure (SMTP 4xx, a relay down; a backend down),
#: doubled each time: after a refused send up to :data:`RETRY_BACKOFF_MAX`.
RETRY_BACKOFF = 30.0
#: How long one run's claim on sending a mail lasts.
CLAIM_LEASE = 300.0
#: SMTP tries within one run (tenacity).
SMTP_ATTEMPTS = 3
#: Added to twice the longest countdown to make the Redis broker's visibility timeout.
VISIBILITY_MARGIN = 300.0
#: How long outcomes are kept, in the ledger and in Celery's result backend (7 days).
OUTCOME_TTL = 7 * 86_400
#: The largest ``send_mail`` call, its arguments as JSON, in bytes (10 MB).
MAX_MESSAGE_BYTES = 10 * 1024 * 1024
#: How late a run may start after its booked slot before it asks the limiter again (re-books).
LATE_TOLERANCE = 1.0
#: Redelivered copies of one mail handed to a pool, with no run ending, before it is quarantined.
POISON_AFTER = 3
#: How long a hard bounce suppresses the recipient (30 days).
SUPPRESS_FOR = 30 * 86_400.0
#: A hold's first length when the reply states no delay (5 s): a throttling reply holds the
#: sender (or ``450 4.2.1`` one recipient) that long, doubling while the throttling continues.
THROTTLE_HOLD = 5.0
#: How long a greylisted mail waits before it is tried again when the reply states no delay
#: (60 s: most greylisting servers accept a retry after a minute).
GREYLIST_DELAY = 60.0
#: Temporary failures of this many distinct recipients within this many seconds hold the
#: sender (3 in 10 s).
HOLD_EVIDENCE = (3, 10.0)
#: The longest a hold grows by doubling while throttling replies keep coming (15 minutes).
THROTTLE_HOLD_MAX = 15 * 60.0
#: A deferral longer than this is parked in the schedule rather than held as a countdown.
PARK_AFTER = 30.0
#: How long a worker holds the parked mails it is promoting (publishing) before others may.
PROMOTE_LEASE = 30.0
#: Seconds past the end of a countdown a worker holds, with no run of its mail seen, before
#: the watchdog publishes the mail again from the schedule. With the promoter's poll (0.3 s)
#: it stays under ``LATE_TOLERANCE``, so the copy keeps the mail's slot.
WATCH_GRACE = 0.5
#: Seconds after ``send_mail.delay`` before the watchdog may publish a mail's first message again
#: from the outbox (only one that was popped from the broker and never received). It covers a
#: producer slow between its outbox write and its publish (a false alarm costs a repeat run).
OUTBOX_GRACE = 10.0
#: Wait when another run holds the claim on the same mail.
IN_FLIGHT_WAIT = 5.0


def backoff(failures: int, *, first: float, cap: float) -> float:
    """Seconds before the next try after ``failures`` (>= 1) failures in a row: doubling from
    ``first``, at most ``cap``. Not for booked slots: those wait exactly their booking."""
    return min(first * 2.0 ** min(max(failures - 1, 0), 64), cap)


#: The sender reputation's rolling window (24 h), in 24 buckets of an hour.
REPUTATION_WINDOW = 86_400.0
#: Mails sent in the window below which no rate counts: 1000, the floor mature reputation gates
#: use for complaints (a 0.1 % warning is one complaint in a thousand: under that volume a
#: single complaint would cross it, and two would pause a sender at 0.3 % of 700).
REPUTATION_MIN = 1000
#: How long a bulk mail paused by the sender's reputation waits before it looks again (5 min).
REPUTATION_RECHECK = 300.0


#: How long a mail is kept through temporary failures (4xx replies, greylisting, a relay down),
#: counted from when the guard first saw it, unless its kind sets its own (5 days: Postfix's
#: ``maximal_queue_lifetime``, postconf(5)).
LIFETIME = 5 * 86_400.0
#: The longest wait between two tries of a mail the relay refused for a time, in seconds
#: (4000 s: Postfix's ``maximal_backoff_time``, postconf(5); its ``minimal_backoff_time`` is
#: 300 s, mailguard's first is :data:`RETRY_BACKOFF`).
RETRY_BACKOFF_MAX = 4000.0
#: The waits after the greylisting replies of one mail, as multiples of ``GREYLIST_DELAY``
#: (1, 5, 10, 20, 40 min with the default 60 s, then doubling up to ``RETRY_BACKOFF_MAX``): the
#: tries at 1, 6, 16, 36 and 76 min cover the common windows (postgrey's default 300 s, 5, 10
#: and 30 min), each met by the first try after it opens.
GREYLIST_STEPS = (1.0, 5.0, 10.0, 20.0, 40.0)
#: The most mails one SMTP connection carries before it is closed (``QUIT``) and another opened.
SMTP_SESSION_MAILS = 100
#: How long an open SMTP connection may wait for its next mail before it is not used again.
SMTP_SESSION_IDLE = 30.0
#: Seconds ``send_mail.delay`` tries to reach the broker and the result backend before it
#: raises :class:`~mailer.errors.NotEnqueued` (5 s).
ENQUEUE_TIMEOUT = 5.0


#: The bound on one DNS lookup of a recipient domain's MX, every server and retry included.
DNS_TIMEOUT = 2.0
#: A found provider is kept for its MX answer's DNS TTL, clamped to at least this (5 min)...
PROVIDER_MIN_TTL = 300.0
#: ... and at most this (1 day).
PROVIDER_MAX_TTL = 86_400.0
#: A failed MX lookup (timeout, SERVFAIL, REFUSED): the domain is its own provider this long.
PROVIDER_NEGATIVE_TTL = 60.0
#: The lock one worker holds while it resolves a new domain (over ``DNS_TIMEOUT``).
PROVIDER_LOCK = 5.0
#: How long a worker that did not take the lock uses the domain itself before looking again.
PROVIDER_PENDING = 1.0
#: Domains each process keeps in its LRU in front of the shared store.
PROVIDER_LRU = 10_000
#: Whether a worker on a Redis that may evict keys (``maxmemory-policy`` not ``noeviction``)
#: starts with a warning rather than refusing to start.
ALLOW_EVICTION = False
#: How long a mail that ended ``failed`` keeps its payload for ``mailguard retry`` (7 days, as
#: long as its recorded outcome: :data:`OUTCOME_TTL`).
FAILED_RETENTION = float(OUTCOME_TTL)
#: A sender on a warm-up plan that sent nothing this long starts over on day 1 (30 days: the
#: span after which SendGrid asks an IP to be warmed up again).
WARMUP_IDLE = 30 * 86_400.0
#: The RabbitMQ queue type of the mail queues (``classic`` or ``quorum``: replicated, one queue per
#: priority lane; see :mod:`workers.brokers.priority`).
QUEUE_TYPE = "classic"
#: The window a throttling relay's count is learned over by the sender's pace, seconds (60:
#: Postfix's default ``anvil_rate_time_unit``, and the per-minute limits of most relays).
PACE_WINDOW = 60.0
#: How long the fleet lease lasts without renewal: the one worker of a queue that polls the
#: schedule, the watchdog and the outbox (``workers/polling/lease.py``); its holder renews it every
#: third of that, and another worker takes it over within this plus 2 s once the holder dies.
FLEET_LEASE = 3.0
#: Seconds between two writes of an idle worker's liveness record (one ``HSET``); kept under a
#: third of the 15 s after which ``mailguard health`` calls a worker gone.
LIVENESS_BEAT = 5.0
#: Seconds between two reads of the live policy's version, per worker process (one ``GET``, made
#: by a mail's run, never while idle).
POLICY_CHECK = 1.0
