"""The reply classifier on real replies from SES, Gmail, Microsoft, Yahoo and Postfix."""

from __future__ import annotations

import pytest

from mailer.mail.replies import MAX_STATED_HOLD, Action, classify, stated_hold

HOLD_SENDER = Action.HOLD_SENDER
HOLD_RECIPIENT = Action.HOLD_RECIPIENT
SUPPRESS = Action.SUPPRESS
FAIL = Action.FAIL
RETRY = Action.RETRY

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
    (421, "4.7.0 Try again later, closing connection.", HOLD_SENDER),
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
    (421, "4.7.500 Server busy. Please try again later from [192.0.2.1]. (S77719)", HOLD_SENDER),
    (451, "4.7.500 Server busy. Please try again later from [192.0.2.1]. (S77714)", HOLD_SENDER),
    (550, "5.7.708 Service unavailable. Access denied, traffic not accepted from this IP.", FAIL),
    (554, "5.2.0 STOREDRV.Deliver.Exception:StoreDriverRetryableException", FAIL),
    (452, "4.5.3 Too many recipients", HOLD_SENDER),
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
    (421, "4.3.2 Service shutting down", HOLD_SENDER),
    (554, "5.7.1 <a@example.com>: Relay access denied", FAIL),
    (450, "4.7.1 <a@example.com>: Recipient address rejected: Greylisted", HOLD_SENDER),
    (551, "5.1.6 User has moved; please try <b@example.com>", SUPPRESS),
    (553, "5.1.3 Bad recipient address syntax", SUPPRESS),
    (553, "5.1.8 <bounce@example.org>: Sender address rejected: Domain not found", FAIL),
    (550, "5.7.1 Message rejected as spam by Content Filtering.", FAIL),
    # plain, unknown, odd
    (450, "Requested mail action not taken: mailbox busy", HOLD_RECIPIENT),
    (451, "Local error in processing", RETRY),
    (554, "Transaction failed", FAIL),
    (999, "nonsense", RETRY),
]


@pytest.mark.parametrize(("code", "reply", "action"), REPLIES)
def test_real_replies_get_the_expected_action(code: int, reply: str, action: Action) -> None:
    """Each real reply is classified as the table in mailer/replies.py says."""
    assert classify(code, reply).action is action


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
    """Holds carry the reply's delay; plain retries never do."""
    assert classify(421, "4.7.0 Try again in 2 minutes").hold == 120.0
    assert classify(451, "4.3.0 try again in 2 minutes").hold is None
