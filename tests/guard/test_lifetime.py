"""A mail lives until its kind's lifetime; greylisting is never a failure (the guard alone, an
injected clock, the memory stores).

Each test drives the guard run by run as the task layer does: a ``Later`` is run again when
its wait is over (the clock set to its end), with the progress it handed on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from mailer import Kind, Kinds, Limiter, ManualClock, Policy
from mailer.errors import TransientSendError
from mailer.factory import memory_guard
from mailer.guard import Finish, Guard, GuardConfig, Later, MailRequest, Progress, Step
from mailer.guard.retry_schedule import greylist_wait, retry_wait
from mailer.mail.envelope import Envelope
from mailer.mail.kinds import lifetime_of
from mailer.mail.transports.base import SendReceipt
from mailer.records.ledger import MemoryLedger
from mailer.settings import Settings

ADA = "ada@example.com"
DOWN = (421, "4.3.2 Service not available, closing transmission channel")
POSTGREY = (
    450,
    "4.2.0 <ada@example.com>: Recipient address rejected: Greylisted, see "
    "http://postgrey.schweikert.ch/help/example.com.html",
)


@dataclass
class RefusingUntil:
    """A relay that answers ``reply`` (a TransientSendError) to every try before ``until``
    (epoch seconds; ``after_first``: seconds after its first try, as postgrey's ``--delay``),
    then accepts. Records the time of every try and the mails it took."""

    clock: ManualClock
    reply: tuple[int, str]
    until: float = 0.0
    after_first: float | None = None
    tries: list[float] = field(default_factory=list)
    taken: list[str] = field(default_factory=list)

    def send(self, envelope: Envelope) -> SendReceipt:
        now = self.clock()
        self.tries.append(now)
        opens = self.until if self.after_first is None else self.tries[0] + self.after_first
        if now < opens:
            raise TransientSendError("refused for a time", code=self.reply[0], reply=self.reply[1])
        self.taken.append(envelope.message_id)
        return SendReceipt(message_id=envelope.message_id, code=250, reply="2.0.0 Ok: queued")


#: A kind that waits at most a minute for its slot and sets no lifetime (MAILGUARD_LIFETIME's).
ALERT = Kind("alert", subject="Alert", body="Something happened.", max_wait=60.0)


def make_guard(clock: ManualClock, transport: RefusingUntil, **config: object) -> Guard:
    limiter = Limiter.from_url("memory://", Policy.parse("1/60s, 5/1h"), clock=clock)
    return memory_guard(
        limiter,
        MemoryLedger(clock),
        transport,
        kinds=Kinds.defaults().with_kind(ALERT),
        config=GuardConfig(**config),  # type: ignore[arg-type]
        clock=clock,
    )


def request(mail_id: str, kind: str = "default") -> MailRequest:
    context = {"code": "123456"} if kind == "code" else None
    subject, body = (None, None) if kind == "code" else ("Your order", "Shipped.")
    return MailRequest(
        to=ADA, mail_id=mail_id, kind=kind, context=context, subject=subject, body=body
    )


def run_to_the_end(guard: Guard, clock: ManualClock, mail: MailRequest) -> list[Step]:
    """Every run of ``mail`` until one is final, each run at the end of the last one's wait."""
    steps: list[Step] = []
    progress: Progress | None = None
    for _ in range(500):
        step = guard.process(mail, progress)
        steps.append(step)
        if not isinstance(step, Later):
            return steps
        clock.set(step.due if step.due is not None else clock() + step.wait)
        progress = step.progress
    raise AssertionError("the mail never ended")


def test_a_relay_down_for_20_minutes_delivers_the_mail_once(clock: ManualClock) -> None:
    """421 for 20 minutes, longer than 0.1.0's whole budget (about 15.5 min): every run before
    is deferred (never failed), each wait doubling from RETRY_BACKOFF; the first try after the
    relay is back delivers it, once."""
    start = clock()
    relay = RefusingUntil(clock, DOWN, until=start + 20 * 60)
    guard = make_guard(clock, relay)
    steps = run_to_the_end(guard, clock, request("down-20m"))
    final = steps[-1]
    assert isinstance(final, Finish) and final.outcome.status == "sent", final
    assert len(relay.taken) == 1
    waiting = steps[:-1]
    assert all(s.outcome.reason == "smtp_transient" for s in waiting)
    assert [s.wait for s in waiting] == [30, 60, 120, 240, 480, 960]
    assert relay.tries[-1] >= start + 20 * 60 and relay.tries[-2] < start + 20 * 60


def test_the_backoff_doubles_to_its_cap() -> None:
    """30 s doubling, capped at RETRY_BACKOFF_MAX (4000 s, Postfix's maximal_backoff_time)."""
    config = GuardConfig()
    waits = [retry_wait(config, n) for n in range(1, 11)]
    assert waits == [30, 60, 120, 240, 480, 960, 1920, 3840, 4000, 4000]
    short = GuardConfig(retry_backoff=1.0, retry_backoff_max=2.0)
    assert [retry_wait(short, n) for n in range(1, 5)] == [1, 2, 2, 2]


def test_a_mail_older_than_its_lifetime_ends_expired_with_the_last_reply(
    clock: ManualClock,
) -> None:
    """A relay that never accepts: the mail is tried on its backoff for its lifetime (1 h
    here, MAILGUARD_LIFETIME's: its kind sets none), never failed; its last try is before the
    lifetime ends, and it ends ``dropped`` / ``expired`` with the reply of that try; its
    recipient's slot is given back."""
    start = clock()
    relay = RefusingUntil(clock, DOWN, until=float("inf"))
    guard = make_guard(clock, relay, lifetime=3600.0)
    steps = run_to_the_end(guard, clock, request("never", kind="alert"))
    final = steps[-1]
    assert isinstance(final, Finish), final
    assert (final.outcome.status, final.outcome.reason) == ("dropped", "expired")
    assert (final.outcome.smtp_code, final.outcome.smtp_reply) == DOWN
    assert "lifetime" in (final.outcome.detail or "")
    assert final.outcome.attempts == len(relay.tries)
    assert all(s.outcome.status == "deferred" for s in steps[:-1])
    assert start + 3000 < relay.tries[-1] <= start + 3600  # tried to the end, never past it
    assert guard.limiter.peek(ADA).allowed, "the expired mail's slot was given back"


def test_a_lifetime_is_never_shorter_than_the_wait_for_a_slot() -> None:
    """``notice`` may wait a day for its slot: kept at least that long; ``code`` (lifetime 0)
    exactly its 5 minutes; an explicit lifetime wins over MAILGUARD_LIFETIME."""
    kinds = Kinds.defaults()
    assert lifetime_of(kinds["notice"], 3600.0) == 86_400
    assert lifetime_of(kinds["default"], 5 * 86_400.0) == 5 * 86_400
    assert lifetime_of(kinds["code"], 5 * 86_400.0) == 300
    assert lifetime_of(ALERT, 3600.0) == 3600
    env = {"MAILGUARD_KIND_ALERT_MAX_WAIT": "1m", "MAILGUARD_KIND_ALERT_LIFETIME": "2h"}
    assert lifetime_of(Kinds.from_env(env)["alert"], 3600.0) == 7200


def test_a_kind_that_names_its_max_wait_names_its_deadline() -> None:
    """``_MAX_WAIT`` set and ``_LIFETIME`` not: the wait is the kind's deadline through
    temporary failures too (a one-time code under another name); a kind that sets neither is
    kept the process's lifetime."""
    kinds = Kinds.from_env(
        {
            "MAILGUARD_KIND_OTP_MAX_WAIT": "2m",
            "MAILGUARD_KIND_CODE_MAX_WAIT": "90s",
            "MAILGUARD_KIND_WELCOME_PRIORITY": "7",
        }
    )
    assert lifetime_of(kinds["otp"], 5 * 86_400.0) == 120
    assert lifetime_of(kinds["code"], 5 * 86_400.0) == 90
    assert lifetime_of(kinds["welcome"], 5 * 86_400.0) == 5 * 86_400


def test_a_code_kind_keeps_its_deadline(clock: ManualClock) -> None:
    """The built-in ``code`` kind (max_wait 5 min, lifetime 0: its max_wait) against a relay
    down for an hour: tried while its 5 minutes last, never after, then ``dropped`` /
    ``expired`` with the relay's reply: never sent late."""
    start = clock()
    relay = RefusingUntil(clock, DOWN, until=start + 3600)
    guard = make_guard(clock, relay)
    steps = run_to_the_end(guard, clock, request("code-1", kind="code"))
    final = steps[-1]
    assert isinstance(final, Finish), final
    assert (final.outcome.status, final.outcome.reason) == ("dropped", "expired")
    assert final.outcome.smtp_code == DOWN[0]
    assert relay.taken == [] and relay.tries[-1] <= start + 300
    assert len(relay.tries) >= 4  # 0, 30, 90, 210 s and a last try before 300 s


def test_greylisting_six_times_never_fails_the_mail(clock: ManualClock) -> None:
    """Six greylisting replies in a row: each run is deferred (``held`` / ``greylisting``),
    none counts against a budget; the waits follow the schedule (1, 5, 10, 20, 40 min, then
    doubling to the cap); the seventh try delivers it once."""
    relay = RefusingUntil(clock, POSTGREY, until=float("inf"))
    guard = make_guard(clock, relay)
    steps: list[Step] = []
    progress: Progress | None = None
    for _ in range(6):
        step = guard.process(request("grey-6"), progress)
        steps.append(step)
        assert isinstance(step, Later), step
        assert (step.outcome.reason, step.outcome.hold) == ("held", "greylisting"), step
        clock.set(step.due if step.due is not None else clock() + step.wait)
        progress = step.progress
    relay.until = 0.0  # the window is open
    final = guard.process(request("grey-6"), progress)
    assert isinstance(final, Finish) and final.outcome.status == "sent", final
    waits = [round(s.wait) for s in steps if isinstance(s, Later)]
    assert waits == [60, 300, 600, 1200, 2400, 4000]
    assert len(relay.taken) == 1


def test_a_postgrey_delay_of_300s_delivers_within_one_retry_step(clock: ManualClock) -> None:
    """postgrey's default ``--delay=300``: refused until 300 s after the first try, then
    accepted. The mail is tried at 0 and 60 s, then at 360 s, the first try after the window
    opens: delivered once, within one step of the schedule after 300 s."""
    start = clock()
    relay = RefusingUntil(clock, POSTGREY, after_first=300.0)
    guard = make_guard(clock, relay)
    steps = run_to_the_end(guard, clock, request("postgrey"))
    final = steps[-1]
    assert isinstance(final, Finish) and final.outcome.status == "sent", final
    assert len(relay.taken) == 1
    assert relay.tries[-1] - start >= 300
    assert relay.tries[-2] - start < 300
    assert relay.tries[-1] - relay.tries[-2] <= greylist_wait(GuardConfig(), 2)


def test_greylisting_holds_nobody_else(clock: ManualClock) -> None:
    """While one mail is greylisted, another recipient's mail goes at once."""
    relay = RefusingUntil(clock, POSTGREY, until=float("inf"))
    guard = make_guard(clock, relay)
    first = guard.process(request("grey-a"))
    assert isinstance(first, Later) and first.outcome.hold == "greylisting"
    relay.until = 0.0
    other = guard.process(MailRequest(to="bob@example.com", mail_id="b", subject="s", body="b"))
    assert isinstance(other, Finish) and other.outcome.status == "sent"


def test_a_retry_is_judged_by_the_limiter_again(clock: ManualClock) -> None:
    """1/60s per recipient: a mail refused once, whose recipient got another mail meanwhile,
    is not sent at its retry inside that mail's minute: it is booked after it."""
    relay = RefusingUntil(clock, DOWN, until=clock() + 1)
    guard = make_guard(clock, relay, retry_backoff=40.0)
    first = guard.process(request("judged-1"))
    assert isinstance(first, Later) and first.wait == 40
    clock.advance(20)
    other = guard.process(request("judged-2"))
    assert isinstance(other, Later), "the refused mail's slot still spaces its recipient"
    clock.set(other.outcome.due or 0.0)
    assert guard.process(request("judged-2"), other.progress).outcome.status == "sent"
    sent_at = clock()  # past the refused mail's retry time (40 s)
    again = guard.process(request("judged-1"), first.progress)
    assert isinstance(again, Later) and again.outcome.reason == "booked", again
    assert again.outcome.due is not None and again.outcome.due >= sent_at + 60


def test_the_lifetime_settings_are_read_and_bounded() -> None:
    """MAILGUARD_LIFETIME and RETRY_BACKOFF_MAX reach the guard; 0.1.0's SEND_RETRIES is still
    accepted; values out of bounds are refused in one line naming the variable."""
    settings = Settings.from_env(
        {
            "MAILGUARD_LIFETIME": "2d",
            "MAILGUARD_RETRY_BACKOFF_MAX": "1h",
            "MAILGUARD_SEND_RETRIES": "8",
            "MAILGUARD_KIND_CODE_LIFETIME": "10m",
        }
    )
    config = settings.guard_config()
    assert (config.lifetime, config.retry_backoff_max) == (2 * 86_400, 3600)
    assert settings.kinds["code"].lifetime == 600
    defaults = Settings.from_env({}).guard_config()
    assert (defaults.lifetime, defaults.retry_backoff_max) == (5 * 86_400, 4000)
    for env, message in (
        ({"MAILGUARD_LIFETIME": "8d"}, "MAILGUARD_LIFETIME must be 1s-7d"),
        ({"MAILGUARD_RETRY_BACKOFF_MAX": "10s"}, "MAILGUARD_RETRY_BACKOFF_MAX must be at least"),
        ({"MAILGUARD_KIND_CODE_LIFETIME": "8d"}, "MAILGUARD_KIND_CODE_"),
        ({"MAILGUARD_KIND_CODE_LIFETIME": "soon"}, "MAILGUARD_KIND_CODE_LIFETIME:"),
    ):
        with pytest.raises(ValueError, match=message):
            Settings.from_env(env)
