"""The reply classifier against a corpus of real replies from real servers, each with its source
(``tests/mail/reply_corpus.py``)."""

from __future__ import annotations

import pytest

from mailer.mail.replies import Action, reaction_to_reply
from tests.mail.reply_corpus import CORPUS, Reply

#: What the corpus must hold: (who, a piece of a reply text from them).
REQUIRED = [
    ("Postfix", "too much mail from"),
    ("Postfix", "too many recipients from"),
    ("Postfix", "too many connections from"),
    ("Postfix", "Error: too many recipients"),
    ("Postfix", "Insufficient system storage"),
    ("sisimai", "Connection rate limit exceeded"),
    ("Exim", "Sender rate exceeds"),
    ("Microsoft", "4.7.500 Server busy"),
    ("Microsoft", "4.7.650"),
    ("Microsoft", "RP-001"),
    ("Microsoft", "RP-002"),
    ("Microsoft", "RP-003"),
    ("Gmail", "4.7.28"),
    ("Gmail", "receiving mail at a rate"),
    ("Gmail", "unusual rate"),
    ("Yahoo", "[TSS04]"),
    ("Yahoo", "[TS01]"),
    ("Yahoo", "[TS02]"),
    ("Yahoo", "[TS03]"),
    ("SES", "Throttling failure: Maximum sending rate exceeded"),
    ("SES", "Throttling failure: Daily message quota exceeded"),
    ("SendGrid", "temporarily deferred"),
]


@pytest.mark.parametrize("reply", CORPUS, ids=lambda r: f"{r.code} {r.text[:48]}")
def test_each_real_reply_gets_its_reaction(reply: Reply) -> None:
    """Each reply of the corpus is read as the reaction its row names."""
    assert reaction_to_reply(reply.code, reply.text).action is reply.action


def test_the_corpus_is_large_sourced_and_covers_every_reaction() -> None:
    """At least 30 real replies, each naming where it was read, every reaction among them."""
    assert len(CORPUS) >= 30
    assert all(len(reply.source) > 10 for reply in CORPUS)
    assert {reply.action for reply in CORPUS} == set(Action)
    assert len({(reply.code, reply.text) for reply in CORPUS}) == len(CORPUS)


@pytest.mark.parametrize(("who", "piece"), REQUIRED)
def test_the_corpus_holds_each_named_rate_reply(who: str, piece: str) -> None:
    """The rate replies of Postfix, Exim, Microsoft, Gmail, Yahoo and SES are in the corpus."""
    assert any(piece in f"{reply.code} {reply.text}" for reply in CORPUS), who


def test_postfix_message_rate_holds_the_sender_and_its_recipient_limit_does_not() -> None:
    """Postfix's ``too much mail from`` (a rate per client) holds the sender; its
    ``too many recipients`` without ``from`` (one message's size) is a plain retry."""
    assert reaction_to_reply(450, "4.7.1 Error: too much mail from 127.0.0.1").action is (
        Action.HOLD_SENDER
    )
    assert reaction_to_reply(452, "4.5.3 Error: too many recipients").action is Action.RETRY


def test_a_relay_refusing_our_credentials_holds_the_transport_not_the_mail() -> None:
    """Authentication refused or required, and a relay refusing our sender, hold the transport;
    a refused recipient does not."""
    for code, text in [
        (535, "5.7.8 Error: authentication failed: authentication failure"),
        (530, "5.7.0 Authentication required"),
        (534, "5.7.9 Application-specific password required."),
        (553, "5.1.8 <app@example.org>: Sender address rejected: Domain not found"),
        (554, "5.7.1 <ada@example.org>: Relay access denied"),
    ]:
        assert reaction_to_reply(code, text).action is Action.HOLD_TRANSPORT, text
    assert reaction_to_reply(550, "5.1.1 <ada@example.org>: User unknown").action is (
        Action.SUPPRESS
    )


#: The corpus's rate replies that name their provider, with the provider's rule they carry.
PROVIDER_REPLIES = [
    ("4.7.28 Gmail has detected an unusual rate", "google", "4.7.28"),
    ("4.7.0 [216.194.173.80 15] Our system has detected an unusual rate", "google", "4.7.28"),
    ("4.7.0 [TSS04] Messages from 192.0.2.1", "yahoo", "[TSS04]"),
    ("4.7.0 [TS01] Messages from", "yahoo", "[TS0x]"),
    ("4.7.0 [TS02] Temporarily deferred", "yahoo", "[TS0x]"),
    ("4.7.1 [TS03] All messages", "yahoo", "[TS0x]"),
    ("RP-001 (SNT0-MC2-F19)", "microsoft", "RP-00x"),
    ("RP-002 The sending IP", "microsoft", "RP-00x"),
    ("RP-003 The sending IP", "microsoft", "RP-00x"),
]


@pytest.mark.parametrize(("start", "provider", "name"), PROVIDER_REPLIES)
def test_a_providers_rate_reply_carries_its_rule(start: str, provider: str, name: str) -> None:
    """Gmail's 4.7.28 (and its older 4.7.0 with the same words and ``gsmtp``), Yahoo's
    ``[TSS04]`` and ``[TS01]``-``[TS03]``, Microsoft's ``RP-001``-``RP-003``: a sender hold whose
    rule names the provider (each rule with its source); the Gmail and Yahoo suspensions last at
    least 10 minutes and 2 hours."""
    rows = [r for r in CORPUS if r.text.startswith(start)]
    assert len(rows) == 1, start
    reaction = reaction_to_reply(rows[0].code, rows[0].text)
    assert reaction.action is Action.HOLD_SENDER
    assert reaction.rule is not None
    assert (reaction.rule.provider, reaction.rule.name) == (provider, name)
    assert reaction.rule.source.startswith(("https://", "KumoMTA"))
    least = {"4.7.28": 600.0, "[TSS04]": 7200.0}.get(name)
    assert reaction.rule.hold == least


def test_no_other_reply_of_the_corpus_names_a_provider() -> None:
    """Every other reply carries no rule: a relay's own rate replies (Postfix, Exim, SES,
    SendGrid, Google's SMTP relay quota "Peak SMTP relay limit", Microsoft's 4.7.650 without an
    ``RP-00x``) hold the sender as before, whoever the recipient."""
    named = {r.text for r in CORPUS for start, _, _ in PROVIDER_REPLIES if r.text.startswith(start)}
    others = [r for r in CORPUS if r.text not in named]
    assert len(others) == len(CORPUS) - len(PROVIDER_REPLIES)
    for reply in others:
        assert reaction_to_reply(reply.code, reply.text).rule is None, reply.text
    peak = reaction_to_reply(450, "4.2.1 Peak SMTP relay limit exceeded for this customer.")
    assert peak.action is Action.HOLD_SENDER and peak.rule is None
