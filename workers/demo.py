"""``mailguard demo``: the main job on embedded defaults, time-compressed to play in under a minute.

Everything runs in this process: a threads-pool Celery worker (:func:`inprocess_worker`) on the
memory broker, the memory limiter and ledger, and an aiosmtpd SMTP server on 127.0.0.1 (a free
port) that captures what the worker sends. A short script of mails to four fictitious
recipients (ada, bob, cy and mallory, all ``@example.com``) goes through the real ``send_mail``
task with a compressed policy, ``1/1s, 5/10s, 10/30s``, and compressed tolerances (``code``
waits at most 3.75 s, ``default`` and ``notice`` 60 s):

- ada gets a code, a welcome and a notice in a second (the last two are deferred to booked
  slots by ``1/1s``), and a second code later (sent at once);
- bob gets a burst of 11 notices: five go a second apart, five more wait for ``5/10s``, the
  last one for ``10/30s``, about 30 s later; none is dropped (a notice may wait a minute);
- cy gets two mails far apart, both sent at once;
- mallory is abused: a bot asks for a login code every half second. The first few are deferred
  a second or two; once ``5/10s`` is full the next slot is further away than a code tolerates,
  so those codes are dropped (a stale code is worse than none).

A live table shows each mail queued, deferred (with the binding tier and booked time), sent
(and how late against its booking) or dropped; the summary gives per recipient the mails sent,
deferred and dropped, the largest lateness (``sent_at - due``), and what the SMTP server
captured, and checks from the booked slots that no recipient went over any tier. ``--speed``
divides every duration (policy windows, tolerances, the script) to compress further; ``--json``
prints the summary as JSON instead of tables.

``--redis URL`` runs the same story with the broker, the result backend, the limiter and the
ledger on that Redis; the worker still runs in this process (threads pool). The run uses a queue
of its own (``mailguard-demo-<random>``, deleted at the end) and a random limiter secret, so it
never takes a real worker's mail and never shares a budget with an earlier run.

**How the demo's settings reach the task.** ``send_mail`` is registered on ``workers.app.app``,
the app built from the environment when :mod:`workers.app` is imported. The demo does not build
a second app with a second copy of the task: :func:`configure` points that same app at the
demo's broker, result backend and queue (the values :func:`workers.app.create_app` derives from
the demo's :class:`~mailer.settings.Settings`, so the safe defaults have one source), and calls
:func:`workers.tasks.use_settings` so the guard is built from the demo's settings (policy,
kinds, limiter, SMTP URL). ``workers.app.settings`` keeps the environment's values: the
worker-start hooks read it (the prefork check, which a threads pool does not trip, the opt-in
metrics port and the log format), so those follow the environment as for any worker. The demo
command runs in a process of its own, so nothing else uses the app meanwhile; call
:func:`configure` before the app has sent or received anything.

Logs stay quiet: the worker logs at WARNING, and its log lines never carry addresses. The table
shows the demo's own fictitious addresses by short name only: it is the demo's UI, not a log.
Ctrl-C stops the worker and the SMTP server and exits with code 130.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP as SMTPServer
from aiosmtpd.smtp import Envelope, Session
from celery import Celery

from mailer.kinds import Kinds
from mailer.policy import Policy, Tier
from mailer.settings import Settings
from workers.app import create_app

#: The demo's policy per recipient, before ``--speed``.
POLICY = "1/1s, 5/10s, 10/30s"
#: How long each kind may wait for its slot, in seconds, before ``--speed``.
MAX_WAIT = {"code": 3.75, "default": 60.0, "notice": 60.0}
#: The memory broker's polling interval: a deferred mail is picked up well before its slot.
MEMORY_POLLING = 0.05
#: How often the table and the states are refreshed, in seconds.
TICK = 0.05


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
    store = {}
    if redis_url:
        store = {"broker_url": redis_url, "result_backend": redis_url, "limiter_url": redis_url}
    return Settings(
        **store,
        smtp_url=smtp_url,
        policy=demo_policy(speed),
        kinds=demo_kinds(speed),
        secret=secrets.token_urlsafe(16),  # a fresh budget each run, even on a shared Redis
        sender="mailguard-demo@example.com",
        queue=queue or f"mailguard-demo-{secrets.token_hex(4)}",
        retry_backoff=1.0,
        smtp_attempts=2,
    )


def configure(app: Celery, settings: Settings) -> None:
    """Point ``app`` (``workers.app.app``) and the guard at ``settings``; see the module doc."""
    from workers.tasks import use_settings  # noqa: PLC0415 - registers the task on the app

    template = create_app(settings).conf
    keys = (
        "broker_url",
        "result_backend",
        "task_queues",
        "task_default_queue",
        "task_default_routing_key",
        "broker_transport_options",
    )
    conf: dict[str, Any] = {key: template[key] for key in keys}
    if settings.broker_url.startswith("memory:"):
        conf["broker_transport_options"] = {
            **conf["broker_transport_options"],
            "polling_interval": MEMORY_POLLING,
        }
    conf["result_expires"] = 600  # the demo's outcomes need not outlive it on a shared Redis
    app.conf.update(conf)
    use_settings(settings)


# --- the SMTP server -------------------------------------------------------------------------


class _Capture:
    """aiosmtpd handler: accepts every message and counts them per recipient address."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._received: Counter[str] = Counter()

    async def handle_DATA(self, server: SMTPServer, session: Session, envelope: Envelope) -> str:
        with self._lock:
            for rcpt in envelope.rcpt_tos:
                self._received[rcpt.lower()] += 1
        return "250 2.0.0 captured by the mailguard demo"

    def received(self) -> Counter[str]:
        with self._lock:
            return Counter(self._received)


class SmtpCapture:
    """An aiosmtpd server on 127.0.0.1, a free port, counting what it receives per address."""

    def __init__(self) -> None:
        self.handler = _Capture()
        self.controller: Controller | None = None

    @property
    def url(self) -> str:
        assert self.controller is not None
        return f"smtp://127.0.0.1:{self.controller.port}"

    def start(self) -> SmtpCapture:
        logging.getLogger("mail.log").setLevel(logging.WARNING)  # aiosmtpd logs peers at INFO
        for _ in range(5):
            controller = Controller(
                self.handler, hostname="127.0.0.1", port=_free_port(), ready_timeout=10.0
            )
            try:
                controller.start()
            except (OSError, RuntimeError):  # the port was taken in between: try another
                continue
            self.controller = controller
            return self
        raise DemoError("cannot start the SMTP server on 127.0.0.1")

    def stop(self) -> None:
        if self.controller is not None:
            with contextlib.suppress(RuntimeError, asyncio.CancelledError):
                self.controller.stop()
            self.controller = None

    def received(self) -> Counter[str]:
        return self.handler.received()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- the story -------------------------------------------------------------------------------


@dataclass
class Row:
    """One mail of the run and what became of it. Times are epoch seconds."""

    n: int
    planned: Planned
    address: str
    at: float  # when it is enqueued, seconds after the start (after --speed)
    mail_id: str = ""
    enqueued_at: float | None = None
    state: str = "planned"  # planned, queued, deferred, sent, dropped, failed
    booked: float | None = None
    tier: str | None = None
    wait: float | None = None
    due: float | None = None
    sent_at: float | None = None
    reason: str | None = None
    deferrals: int = 0

    @property
    def settled(self) -> bool:
        return self.state in ("sent", "dropped", "failed")

    @property
    def lateness(self) -> float | None:
        """``sent_at - due``: how late against its slot (its booking when it was deferred)."""
        if self.sent_at is None or self.due is None:
            return None
        return self.sent_at - self.due

    def update(self, state: str, info: Any) -> None:
        """Take a Celery state and its meta (``DEFERRED``, ``SUCCESS``, ``FAILURE``)."""
        if isinstance(info, BaseException):  # FAILURE: MailFailed(outcome)
            info = info.args[0] if info.args and isinstance(info.args[0], Mapping) else {}
        if state == "DEFERRED" and isinstance(info, Mapping):
            self.state = "deferred"
            self.booked = _float(info.get("due"))
            self.tier = info.get("tier") or self.tier
            self.wait = _float(info.get("wait"))
        elif state in ("SUCCESS", "FAILURE") and isinstance(info, Mapping):
            status = str(info.get("status") or ("failed" if state == "FAILURE" else "sent"))
            self.state = status if status in ("sent", "dropped") else "failed"
            self.reason = info.get("reason")
            self.due = _float(info.get("due"))
            self.sent_at = _float(info.get("sent_at"))
            self.deferrals = int(info.get("deferrals") or 0)
            if self.state == "dropped":
                self.tier = info.get("tier")
                self.wait = _float(info.get("wait"))
            elif self.deferrals and self.booked is None:
                # Its DEFERRED state came and went between two looks: the slot it was sent at
                # is its booking; the wait is counted from when it was enqueued.
                self.booked = self.due

    @property
    def waited(self) -> float | None:
        """The booked wait; for a deferral seen only by its outcome, from enqueue to its slot."""
        if self.wait is not None or self.booked is None or self.enqueued_at is None:
            return self.wait
        return self.booked - self.enqueued_at

    def as_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "mail_id": self.mail_id,
            "recipient": self.planned.to,
            "kind": self.planned.kind,
            "enqueued_at": self.enqueued_at,
            "status": self.state,
            "deferred": self.booked is not None,
            "booked": self.booked,
            "tier": self.tier,
            "wait": self.waited,
            "due": self.due,
            "sent_at": self.sent_at,
            "lateness": self.lateness,
            "reason": self.reason,
        }


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


@dataclass
class Run:
    """The state of one demo run, handed to the view on every tick."""

    settings: Settings
    speed: float
    rows: list[Row]
    smtp: SmtpCapture
    started: float = 0.0
    elapsed: float = 0.0
    captured: Counter[str] = field(default_factory=Counter)

    @property
    def policy(self) -> Policy:
        return self.settings.policy

    def violations(self) -> list[str]:
        """Tiers some recipient went over, recounted from the slots of its sent mails."""
        found = []
        for name in RECIPIENTS:
            sent = sorted(
                r.due
                for r in self.rows
                if r.planned.to == name and r.state == "sent" and r.due is not None
            )
            for tier in self.policy.tiers:
                for first, last in zip(sent, sent[tier.limit :], strict=False):
                    if last - first < tier.window - 1e-6:
                        found.append(f"{name}: {tier.limit + 1} mails within {tier}")
                        break
        return found

    def summary(self) -> dict[str, Any]:
        """The JSON summary: the policy, every mail, per recipient totals, the checks."""
        per: dict[str, dict[str, Any]] = {}
        for name, who in RECIPIENTS.items():
            mine = [r for r in self.rows if r.planned.to == name]
            late = [r.lateness for r in mine if r.lateness is not None]
            per[name] = {
                "address": who.address,
                "mails": len(mine),
                "sent": sum(r.state == "sent" for r in mine),
                "deferred": sum(r.booked is not None for r in mine),
                "dropped": sum(r.state == "dropped" for r in mine),
                "failed": sum(r.state == "failed" for r in mine),
                "unsettled": sum(not r.settled for r in mine),
                "max_lateness": max(late, default=None),
                "captured": self.captured.get(who.address, 0),
            }
        lateness = [r.lateness for r in self.rows if r.lateness is not None and r.booked]
        return {
            "policy": str(self.policy),
            "tiers": [{"limit": t.limit, "window": t.window} for t in self.policy.tiers],
            "max_wait": {k: self.settings.kinds[k].max_wait for k in MAX_WAIT},
            "speed": self.speed,
            "broker": _mask(self.settings.broker_url),
            "started": self.started,
            "elapsed": round(self.elapsed, 3),
            "mails": [r.as_dict() for r in self.rows],
            "recipients": per,
            "max_lateness_deferred": max(lateness, default=None),
            "captured": sum(self.captured.values()),
            "violations": self.violations(),
            "complete": all(r.settled for r in self.rows),
        }


def run_demo(
    *,
    redis_url: str | None = None,
    speed: float = 1.0,
    view: Callable[[Run], None] | None = None,
    done: Callable[[Run], None] | None = None,
    timeout: float | None = None,
) -> Run:
    """Play the story; call ``view(run)`` on every tick; return the finished run.

    ``done(run)`` is called once every mail has settled, before the worker stops (a threads
    worker on the memory broker takes a few seconds to notice it should stop): the summary
    need not wait for it.

    Raises :class:`DemoError` (Redis unreachable, mails still unsettled after ``timeout``) and
    :class:`DemoInterrupted` on Ctrl-C, after the worker and the SMTP server have stopped.
    """
    from workers.app import app  # noqa: PLC0415 - Celery and the env's app only when run
    from workers.inprocess import inprocess_worker  # noqa: PLC0415
    from workers.tasks import send_mail  # noqa: PLC0415

    if redis_url:
        _check_redis(redis_url)
    smtp = SmtpCapture()
    settings: Settings | None = None
    try:
        smtp.start()
        settings = demo_settings(smtp.url, speed=speed, redis_url=redis_url)
        configure(app, settings)
        rows = [
            Row(n, planned, RECIPIENTS[planned.to].address, planned.at / speed)
            for n, planned in enumerate(script(), start=1)
        ]
        run = Run(settings, speed, rows, smtp)
        limit = timeout if timeout is not None else 30.0 + max(r.at for r in rows) + 40.0 / speed
        with inprocess_worker(app, concurrency=4):
            _play(run, app, send_mail, view, limit)
            if done is not None:
                done(run)
        return run
    except KeyboardInterrupt:
        raise DemoInterrupted() from None
    finally:
        smtp.stop()
        if redis_url and settings is not None:
            _delete_queue(redis_url, settings.queue)


def _play(
    run: Run, app: Celery, send_mail: Any, view: Callable[[Run], None] | None, limit: float
) -> None:
    waiting = list(run.rows)
    run.started = time.time()
    while True:
        now = time.time()
        run.elapsed = now - run.started
        while waiting and waiting[0].at <= run.elapsed:
            row = waiting.pop(0)
            _enqueue(row, send_mail)
        for row in run.rows:
            if row.mail_id and not row.settled:
                result = app.AsyncResult(row.mail_id)
                row.update(result.state, result.info)
        run.captured = run.smtp.received()
        if view is not None:
            view(run)
        if not waiting and all(r.settled for r in run.rows):
            return
        if run.elapsed > limit:
            left = sum(not r.settled for r in run.rows)
            raise DemoError(f"{left} mails still unsettled after {limit:.0f} s")
        time.sleep(TICK)


def _enqueue(row: Row, send_mail: Any) -> None:
    planned = row.planned
    row.mail_id = str(uuid.uuid4())
    kwargs = {
        "subject": planned.subject,
        "body": planned.body,
        "kind": planned.kind,
        "context": dict(planned.context) if planned.context else None,
    }
    row.enqueued_at = time.time()
    row.state = "queued"  # before publishing: the poller may see the outcome at once
    send_mail.apply_async(args=[row.address], kwargs=kwargs, task_id=row.mail_id)


def _check_redis(url: str) -> None:
    import redis  # noqa: PLC0415

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3)
    except ValueError as exc:
        raise ValueError(f"--redis {_mask(url)}: {exc}") from None
    try:
        client.ping()
    except redis.RedisError as exc:
        raise DemoError(f"cannot reach Redis at {_mask(url)}: {exc}") from None
    finally:
        client.close()


def _delete_queue(url: str, queue: str) -> None:
    """Remove the run's own queue and its kombu bindings from Redis (best effort).

    A mail still waiting at Ctrl-C is put back on the queue when the worker stops: deleting the
    queue keeps it from lingering there with nobody to take it.
    """
    import redis  # noqa: PLC0415

    with contextlib.suppress(redis.RedisError):
        client = redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3)
        try:
            keys = [*client.scan_iter(match=f"{queue}*", count=1000)]  # with priority steps
            keys += [f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}"]
            client.delete(*keys)
        finally:
            client.close()


def _mask(url: str) -> str:
    from mailer.errors import mask_url  # noqa: PLC0415

    return mask_url(url)


@contextlib.contextmanager
def quiet_logs() -> Iterator[None]:
    """Keep library loggers at WARNING while the demo runs (the live table owns the screen)."""
    names = {
        "mailer": logging.WARNING,
        "workers": logging.WARNING,
        "celery": logging.WARNING,
        "kombu": logging.WARNING,
        "kombu.connection": logging.ERROR,  # "no hostname supplied" for memory://
        "mail.log": logging.WARNING,  # aiosmtpd: peers and envelopes at INFO
    }
    levels = {name: logging.getLogger(name).level for name in names}
    for name, level in names.items():
        logging.getLogger(name).setLevel(level)
    try:
        yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


# --- the view --------------------------------------------------------------------------------

_STYLES = {
    "queued": "dim",
    "deferred": "yellow",
    "sent": "green",
    "dropped": "red",
    "failed": "bold red",
}


def headline(run: Run) -> str:
    """One line: the policy, the tolerances, where it runs."""
    waits = ", ".join(f"{k} {run.settings.kinds[k].max_wait:g} s" for k in sorted(MAX_WAIT))
    where = (
        "memory broker and limiter"
        if run.settings.broker_url.startswith("memory:")
        else (f"Redis {_mask(run.settings.broker_url)}")
    )
    return (
        f"mailguard demo: policy {run.policy} per recipient; max wait {waits}; {where}; "
        f"worker in this process (threads); SMTP capture on {run.smtp.url.removeprefix('smtp://')}"
    )


def mails_table(run: Run, max_rows: int | None = None) -> Any:
    """The mails so far, one row each; ``max_rows`` hides the earliest settled ones."""
    from rich import box  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415

    shown = [r for r in run.rows if r.state != "planned"]
    hidden = 0
    if max_rows is not None and len(shown) > max_rows:
        while len(shown) > max_rows and shown[0].settled:
            shown.pop(0)
            hidden += 1
        shown = shown[-max_rows:] if len(shown) > max_rows else shown
    caption = f"{hidden} earlier settled mails not shown" if hidden else None
    title = f"t+{run.elapsed:5.1f} s: {sum(r.settled for r in run.rows)}/{len(run.rows)} settled"
    table = Table(
        title=title, title_justify="left", caption=caption, caption_justify="left", box=box.SIMPLE
    )
    table.add_column("#", justify="right")
    table.add_column("queued", justify="right")
    table.add_column("to")
    table.add_column("kind")
    table.add_column("status")
    table.add_column("detail")
    for row in shown:
        table.add_row(
            str(row.n),
            f"t+{row.at:.2f}",
            row.planned.to,
            row.planned.kind,
            f"[{_STYLES.get(row.state, '')}]{row.state}[/]",
            _detail(run, row),
        )
    return table


def _detail(run: Run, row: Row) -> str:
    def rel(epoch: float | None) -> str:
        return "?" if epoch is None else f"t+{epoch - run.started:.2f}"

    tier = row.tier or "?"
    if row.state == "queued":
        return "waiting for the worker"
    if row.state == "deferred":
        return f"booked {rel(row.booked)} ({tier})"
    if row.state == "sent":
        if row.booked is not None and row.lateness is not None:
            return f"booked {rel(row.booked)} ({tier}), sent {row.lateness * 1000:+.0f} ms"
        return f"sent {rel(row.sent_at)}"
    if row.state == "dropped" and row.reason == "rate_limited":
        tolerance = run.settings.kinds[row.planned.kind].max_wait
        kind = row.planned.kind
        return f"slot in {row.wait or 0:.2f} s ({tier}) > {kind}'s {tolerance:g} s"
    return row.reason or ""


def summary_table(run: Run) -> Any:
    """Per recipient: mails, sent, deferred, dropped, largest lateness, captured by SMTP."""
    from rich import box  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415

    summary = run.summary()
    table = Table(title="summary per recipient", title_justify="left", box=box.SIMPLE)
    table.add_column("recipient")
    table.add_column("story")
    for column in ("mails", "sent", "deferred", "dropped", "max late", "captured"):
        table.add_column(column, justify="right")
    for name, who in RECIPIENTS.items():
        item = summary["recipients"][name]
        late = item["max_lateness"]
        table.add_row(
            name,
            who.role,
            str(item["mails"]),
            str(item["sent"]),
            str(item["deferred"]),
            str(item["dropped"]),
            "-" if late is None else f"{late * 1000:.0f} ms",
            str(item["captured"]),
        )
    return table


def conclusions(run: Run) -> list[str]:
    """The checks, one line each."""
    summary = run.summary()
    lines = []
    violations = summary["violations"]
    if violations:
        lines.append("[bold red]over the policy:[/] " + "; ".join(violations))
    else:
        lines.append(
            f"no recipient over any tier of {run.policy} (recounted from the sent mails' slots)"
        )
    late = summary["max_lateness_deferred"]
    deferred = sum(r.booked is not None and r.state == "sent" for r in run.rows)
    if late is not None:
        lines.append(
            f"{deferred} deferred mails sent at their booked slot, at most "
            f"{late * 1000:.0f} ms late"
        )
    dropped = [r for r in run.rows if r.state == "dropped"]
    kinds = sorted({r.planned.kind for r in dropped})
    if dropped:
        lines.append(
            f"{len(dropped)} dropped, all of kind {', '.join(kinds)}: their slot was further "
            "away than the kind tolerates"
        )
    sent = sum(r.state == "sent" for r in run.rows)
    lines.append(
        f"the SMTP server captured {summary['captured']} mails for {sent} sent; "
        f"{run.elapsed:.1f} s in all"
    )
    return lines
