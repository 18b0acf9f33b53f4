"""The reply classifier on real replies from SES, Gmail, Microsoft, Yahoo, Postfix and Postgrey."""

from __future__ import annotations

import pytest

from mailer.mail.replies import (
    MAX_STATED_HOLD,
    Action,
    reaction_to_reply,
    stated_hold,
    temporary_reply,
)
from mailer.mail.replies import temporary as replies_temporary

GREYLIST = Action.GREYLIST
HOLD_SENDER = Action.HOLD_SENDER
HOLD_RECIPIENT = Action.HOLD_RECIPIENT
SUPPRESS = Action.SUPPRESS
FAIL = Action.FAIL
RETRY = Action.RETRY
HOLD_TRANSPORT = Action.HOLD_TRANSPORT

REPLIES = [
    # Amazon SES
    (454, "Throttling failure: Maximum sending rate exceeded.", HOLD_SENDER),
    (454, "Throttling failure: Daily message quota exceeded.", HOLD_SENDER),
    (421, "Too many concurrent SMTP connections; please try again later.", HOLD_SENDER),
    (554, "Message rejected: Email address is not verified.", FAIL),
    (554, "Transaction failed: Missing final '@domain'", FAIL),
    # Gmail
    (
        450,
        "4.2.1 The user you are trying to contact is receiving mail at a rate that prevents "
        "additional messages from being delivered. Please resend your message at a later time.",
        HOLD_RECIPIENT,
    ),
    (
        421,
        "4.7.28 Our system has detected an unusual rate of unsolicited mail originating from "
        "your IP address. To protect our users from spam, mail sent from your IP address has "
        "been temporarily rate limited.",
        HOLD_SENDER,
    ),
    (421, "4.7.0 Try again later, closing connection.", RETRY),  # no rate wording
    (
        550,
        "5.1.1 The email account that you tried to reach does not exist. Please try "
        "double-checking the recipient's email address for typos or unnecessary spaces.",
        SUPPRESS,
    ),
    (552, "5.2.2 The email account that you tried to reach is over quota.", FAIL),
    (452, "4.2.2 The email account that you tried to reach is over quota.", RETRY),
    (451, "4.3.0 Mail server temporarily rejected message.", RETRY),
    (550, "5.7.1 Our system has detected that this message is likely unsolicited mail.", FAIL),
    # Microsoft (Outlook.com, Exchange Online)
    (550, "5.5.0 Requested action not taken: mailbox unavailable.", SUPPRESS),
    (421, "4.7.500 Server busy. Please try again later from [192.0.2.1]. (S77719)", GREYLIST),
    (451, "4.7.500 Server busy. Please try again later from [192.0.2.1]. (S77714)", GREYLIST),
    (550, "5.7.708 Service unavailable. Access denied, traffic not accepted from this IP.", FAIL),
    (554, "5.2.0 STOREDRV.Deliver.Exception:StoreDriverRetryableException", FAIL),
    (452, "4.5.3 Too many recipients", RETRY),  # one message's size, not a rate
    # Yahoo
    (
        421,
        "4.7.0 [TSS04] Messages from 192.0.2.1 temporarily deferred due to unexpected volume "
        "or user complaints - 4.16.55.1; see https://postmaster.yahooinc.com/error-codes",
        HOLD_SENDER,
    ),
    (
        554,
        "delivery error: dd This user doesn't have a yahoo.com account (a@yahoo.com) [0] - "
        "mta1234.mail.ne1.yahoo.com",
        SUPPRESS,
    ),
    (553, "5.7.1 [BL21] Connections will not be accepted from 192.0.2.1", FAIL),
    # Postfix
    (
        550,
        "5.1.1 <a@example.com>: Recipient address rejected: User unknown in local recipient table",
        SUPPRESS,
    ),
    (
        450,
        "4.1.1 <a@example.com>: Recipient address rejected: User unknown in virtual mailbox table",
        RETRY,
    ),
    (452, "4.3.1 Insufficient system storage", RETRY),
    (421, "4.3.2 Service shutting down", RETRY),
    (554, "5.7.1 <a@example.com>: Relay access denied", HOLD_TRANSPORT),  # our client
    (450, "4.7.1 <a@example.com>: Recipient address rejected: Greylisted", GREYLIST),
    (551, "5.1.6 User has moved; please try <b@example.com>", SUPPRESS),
    (553, "5.1.3 Bad recipient address syntax", SUPPRESS),
    (553, "5.1.8 <bounce@example.org>: Sender address rejected: Domain not found", HOLD_TRANSPORT),
    (550, "5.7.1 Message rejected as spam by Content Filtering.", FAIL),
    # Postgrey, and greylisting in Postfix, sendmail and Exim setups
    (
        450,
        "4.2.0 <a@example.com>: Recipient address rejected: Greylisted, see "
        "http://postgrey.schweikert.ch/help/example.com.html",
        GREYLIST,
    ),
    (451, "4.7.1 try again later", GREYLIST),
    (451, "4.7.1 Please try again later", GREYLIST),
    (451, "4.7.1 Greylisting in action, please come back later", GREYLIST),
    (450, "4.2.0 Greylisted for 300 seconds", GREYLIST),
    (451, "Greylisted, please try again in 180 seconds", GREYLIST),
    (
        451,
        "4.7.1 <a@example.com>: Recipient address rejected: Graylisted, try again later",
        GREYLIST,
    ),
    # timeouts, dropped and closing connections: network conditions, nobody held
    (421, "4.4.2 mx.example.com Error: timeout exceeded", RETRY),
    (421, "4.4.2 connection dropped", RETRY),
    (421, "4.4.2 Connection timed out after 30 seconds", RETRY),
    (451, "4.4.1 Connection timed out", RETRY),
    (421, "4.4.5 Server busy, try again later.", RETRY),  # Gmail
    (421, "Service not available, closing transmission channel", RETRY),
    (454, "4.7.0 Temporary authentication failure", RETRY),
    (451, "4.4.0 Error: queue file write error", RETRY),
    # explicit rate and quota statements: the sender is held
    (
        421,
        "4.7.0 [192.0.2.1] Our system has detected an unusual rate of unsolicited mail "
        "originating from your IP address.",
        HOLD_SENDER,
    ),
    (421, "4.7.0 Too many messages from this IP, try again in 10 minutes", HOLD_SENDER),
    (451, "4.3.0 Local error, try again in 5 minutes", HOLD_SENDER),
    (
        451,
        "4.7.650 The mail server [192.0.2.1] has been temporarily rate limited due to IP "
        "reputation.",
        HOLD_SENDER,
    ),
    (450, "4.7.1 Error: too many connections from 192.0.2.1", HOLD_SENDER),
    (454, "4.7.0 Sending quota exceeded for today", HOLD_SENDER),
    # plain, unknown, odd
    (450, "Requested mail action not taken: mailbox busy", HOLD_RECIPIENT),
    (451, "Local error in processing", RETRY),
    (554, "Transaction failed", FAIL),
    (999, "nonsense", RETRY),
]


@pytest.mark.parametrize(("code", "reply", "action"), REPLIES)
def test_real_replies_get_the_expected_action(code: int, reply: str, action: Action) -> None:
    """Each real reply is classified as the table in mailer/replies.py says."""
    assert reaction_to_reply(code, reply).action is action


def test_the_table_covers_every_provider_and_action() -> None:
    """At least 20 real replies, and every action appears."""
    assert len(REPLIES) >= 20
    assert {action for _, _, action in REPLIES} == set(Action)


@pytest.mark.parametrize(
    ("reply", "seconds"),
    [
        ("421 4.7.0 Try again in 2 minutes", 120.0),
        ("454 Throttling failure, retry after 90 seconds", 90.0),
        ("421 please wait 30s before reconnecting", 30.0),
        ("421 4.7.0 try again in 1 hour", 3600.0),
        ("421 4.7.0 try again later", None),
        ("421 4.7.0 try again in 0 seconds", None),  # absurd: below 1 s
        ("421 4.7.0 try again in 48 hours", None),  # absurd: over a day
        ("421 4.7.0 try again in soon minutes", None),  # unparsable
    ],
)
def test_a_stated_delay_is_believed_only_when_sane(reply: str, seconds: float | None) -> None:
    """A stated delay between 1 s and a day is used; anything else falls back (None)."""
    assert stated_hold(reply) == seconds
    assert seconds is None or seconds <= MAX_STATED_HOLD


def test_a_hold_reaction_carries_the_stated_delay_and_a_retry_none() -> None:
    """Holds and greylisting carry the reply's delay; plain retries never do."""
    assert reaction_to_reply(421, "4.7.0 Try again in 2 minutes").hold == 120.0
    assert reaction_to_reply(450, "4.2.0 Greylisted for 300 seconds").hold == 300.0
    assert reaction_to_reply(451, "4.7.1 try again later").hold is None
    assert reaction_to_reply(421, "4.4.2 Connection timed out after 30 seconds").hold is None


def test_a_waiting_reaction_is_not_retried_at_once_and_a_plain_retry_is() -> None:
    """Greylisting and holds ask to wait (the transport leaves them to the guard); a network
    condition or an unknown reply may be tried again at once."""
    assert reaction_to_reply(451, "4.7.1 try again later").hold_action
    assert reaction_to_reply(454, "Throttling failure: Maximum sending rate exceeded.").hold_action
    assert reaction_to_reply(450, "4.2.1 receiving mail at a rate").hold_action
    assert not reaction_to_reply(421, "4.4.2 connection dropped").hold_action
    assert not reaction_to_reply(451, "Local error in processing").hold_action


@pytest.mark.parametrize(
    ("reply", "temporary"),
    [
        ("421 4.7.0 try again later", True),
        ("450 4.2.2 mailbox full", True),
        ("4.4.7 message expired", True),
        ("  451 local error", True),
        ("550 5.1.1 user unknown", False),
        ("5.1.1 user unknown", False),
        ("mailbox full", False),
        ("", False),
    ],
)
def test_a_reply_text_is_temporary_by_its_code_or_enhanced_status(
    reply: str, temporary: bool
) -> None:
    """The one reader of temporary replies: a 4xx code, or an enhanced status ``4.x.x`` alone
    (as an ESP's bounce report quotes it); the same answer as for the code itself."""
    assert temporary_reply(reply) is temporary
    code = reply.split(maxsplit=1)[0] if reply.strip()[:3].isdigit() else None
    if code is not None:
        assert replies_temporary(int(code)) is temporary
