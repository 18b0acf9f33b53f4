"""The transport registry (``MAILGUARD_TRANSPORT``), the reaction a provider's error states, and
the bytes an API transport sends: pure, no server."""

from __future__ import annotations

import pickle
from email.message import EmailMessage

import pytest

from mailer.errors import PermanentSendError, TransientSendError
from mailer.factory import build_transport
from mailer.mail.replies import Action, Reaction, reaction_of
from mailer.mail.transports import (
    ConsoleTransport,
    MemoryTransport,
    SmtpTransport,
    provider,
    registry,
)
from mailer.mail.transports.base import wire_bytes
from mailer.settings import Settings


def test_smtp_stays_the_default_and_its_url_scheme_still_picks_console_or_memory() -> None:
    """No MAILGUARD_TRANSPORT: console:// prints, memory:// keeps, smtp:// sends (not retrying
    throttling replies at once when holds are on); a bad URL names MAILGUARD_SMTP_URL."""
    assert isinstance(build_transport(Settings()), ConsoleTransport)
    assert isinstance(build_transport(Settings(smtp_url="memory://")), MemoryTransport)
    smtp = build_transport(Settings(smtp_url="smtp://127.0.0.1:2525"))
    assert isinstance(smtp, SmtpTransport) and smtp.port == 2525 and not smtp.retry_holds
    with pytest.raises(ValueError, match=r"^MAILGUARD_SMTP_URL: bad SMTP URL"):
        build_transport(Settings(smtp_url="smtp://"))


def test_a_registered_transport_is_found_by_name() -> None:
    """``register`` adds a name the settings then accept; a name that is not a word is refused."""
    kept = MemoryTransport()
    registry.register("pigeon", lambda options: kept)
    try:
        assert "pigeon" in registry.names()
        assert build_transport(Settings.from_env({"MAILGUARD_TRANSPORT": "pigeon"})) is kept
    finally:
        registry._BUILDERS.pop("pigeon")
    with pytest.raises(ValueError, match="must be a word"):
        registry.register("two words", lambda options: kept)


@pytest.mark.parametrize(
    ("code", "status", "action", "permanent"),
    [
        ("TooManyRequestsException", 429, Action.HOLD_SENDER, False),
        ("Throttling", 400, Action.HOLD_SENDER, False),
        ("LimitExceededException", 400, Action.HOLD_SENDER, False),
        ("MessageRejected", 400, Action.FAIL, True),
        ("MailFromDomainNotVerifiedException", 400, Action.FAIL, True),
        ("InternalFailure", 500, Action.RETRY, False),
        ("SomethingNew", 400, Action.RETRY, False),
    ],
)
def test_ses_answers_map_onto_the_guards_reactions(
    code: str, status: int, action: Action, permanent: bool
) -> None:
    """Each SES error code states its reaction; the provider's message is the reply, masked."""
    error = provider.ses_error(
        code, "for ada@example.com", status=status, recipients=["ada@example.com"], paused_hold=60
    )
    assert reaction_of(error).action is action
    assert isinstance(error, PermanentSendError) is permanent
    assert error.reply == f"SES {code}: for [recipient]" and error.code is None


def test_a_paused_account_states_the_longest_hold() -> None:
    """A paused account holds the sender for the hold it is given (THROTTLE_HOLD_MAX)."""
    error = provider.ses_error(
        "SendingPausedException", "paused", status=400, recipients=[], paused_hold=900
    )
    assert reaction_of(error) == Reaction(Action.HOLD_SENDER, hold=900)
    worded = provider.ses_error(
        "X", "Maximum sending rate exceeded.", status=400, recipients=[], paused_hold=1
    )
    assert reaction_of(worded).action is Action.HOLD_SENDER, "SES v1's wording, any code"


def test_a_stated_reaction_survives_pickling_and_smtp_errors_keep_their_reply() -> None:
    """The result backend pickles errors: the stated reaction comes back; an SMTP error
    without one is classified from its reply, a network error (no reply) retried."""
    error = pickle.loads(pickle.dumps(provider.refused_recipients("refused")))  # noqa: S301
    assert reaction_of(error).action is Action.SUPPRESS and error.reply == "refused"
    assert reaction_of(TransientSendError("x", code=454, reply="4.7.0 rate limit")).action is (
        Action.HOLD_SENDER
    )
    assert reaction_of(TransientSendError("no connection")).action is Action.RETRY


def test_wire_bytes_leave_bcc_out_and_keep_everything_else() -> None:
    message = EmailMessage()
    message["From"] = "orders@example.org"
    message["To"] = "ada@example.com"
    message["Bcc"] = "audit@example.org"
    message["Message-ID"] = "<m1@example.org>"
    message.set_content("Hi")
    raw = wire_bytes(message)
    assert b"Bcc" not in raw and b"Message-ID: <m1@example.org>\r\n" in raw
    assert message["Bcc"] == "audit@example.org", "the original keeps its Bcc"
