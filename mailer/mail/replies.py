"""What a mail server's reply asks of the sender: a small pure classifier.

:func:`reaction_to_reply` reads an SMTP reply (code and text, including the enhanced status
code such as ``4.7.0``) and answers a :class:`Reaction`. The corpus of real replies it is
tested on, each with its source, is ``tests/mail/reply_corpus.py``. A 4xx is read in this order:

- ``GREYLIST``: greylisting: retry this mail alone after a delay, hold nobody. A 4xx that says
  greylist / graylist / Postgrey.
- ``HOLD_RECIPIENT``: this recipient receives too fast, hold it alone: a text that says so
  (Gmail's "receiving mail at a rate", "receiving email too quickly", Exchange's "recipient
  thread limit exceeded", "the recipient ... has exceeded their message rate limit").
- ``RETRY`` for a full mailbox (``4.2.2``), whatever its words.
- ``HOLD_SENDER``: the relay states that we send too fast, hold every worker: a text that says
  rate, throttl, too many messages / connections / requests, too much mail, too many <things>
  from <us> (Postfix's anvil: ``too many recipients from``, ``too many connections from``),
  too frequent, volume, a sending or daily quota or limit, a limit exceeded or reached, the
  maximum number of connections, Microsoft's ``RP-001``-``RP-003``, Yahoo's ``[TS01]``-
  ``[TSS04]``, "messages from <ip> temporarily deferred", or asks to try again in a stated
  delay ("try again in 5 minutes"), whatever the code.
- ``HOLD_RECIPIENT`` too for ``450`` without an enhanced code and for ``4.2.1``.
- ``GREYLIST`` too for a ``450`` / ``451`` with ``4.2.0`` or ``4.7.1`` that says try again
  later (or please retry, come back later), and a ``4.7.500``-``4.7.699`` (Microsoft) that says
  server busy or try again later.
- ``RETRY``: any other 4xx: network and timeout conditions (``421 4.4.x``), ``421 4.7.0 Try
  again later`` and ``454`` without rate wording, insufficient storage (``4.3.1``), one
  message's recipient limit (``452 4.5.3 Error: too many recipients``), unknown replies.

A 5xx: ``HOLD_TRANSPORT`` when the fault is our own side's, so every mail through this relay
would be refused alike: authentication required or refused (``530``, ``534``, ``535``), the
sender refused (``5.1.7`` / ``5.1.8``, "Sender address rejected", an unverified sender
identity), relaying denied to our client ("Relay access denied"); ``SUPPRESS`` the address when
the mailbox is gone (``550``/``551``/``553`` with ``5.1.x``, or a text that says user unknown,
no such user, mailbox unavailable, does not exist and the like); any other 5xx is ``FAIL``
(this mail only). Any other code is ``RETRY``.

``hold`` is the delay the reply states ("try again in 2 minutes", "greylisted for 300 seconds"),
in seconds, when it states one between 1 s and a day; otherwise None (the caller's configured
delay applies). Always None for ``RETRY``. Pure: no I/O.

A ``HOLD_SENDER`` reply that names a mailbox provider (:data:`PROVIDER_RULES`: Gmail's
``4.7.28``, Yahoo's ``[TSS04]`` and ``[TS01]``-``[TS03]``, Microsoft's ``RP-001``-``RP-003``)
carries that provider's published reaction as its ``rule`` (:class:`ProviderRule`): the guard
then holds that sender at that provider only, when the mail's recipient is at that provider
(:mod:`mailer.guard.gates.provider_holds`).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Protocol


class Action(enum.Enum):
    """What to do after a reply; see the table in :mod:`mailer.mail.replies`."""

    RETRY = "retry"
    FAIL = "fail"
    GREYLIST = "greylist"
    HOLD_SENDER = "hold_sender"
    HOLD_RECIPIENT = "hold_recipient"
    SUPPRESS = "suppress"
    HOLD_TRANSPORT = "hold_transport"


@dataclass(frozen=True, slots=True)
class ProviderRule:
    """A mailbox provider's own reaction to one of its rate or reputation replies.

    ``provider``: the provider's name as :mod:`mailer.providers` finds it from MX (``google``);
    ``name``: the reply it reads (``4.7.28``); ``hold``: the least a hold lasts, in seconds
    (None: the configured ``MAILGUARD_THROTTLE_HOLD``), doubling while the throttling continues
    as every hold does; ``source``: where the rule is published. After the hold the provider's
    mail resumes one at a time, growing (the slow start, per sender, relay and provider), and a
    refusal while it grows holds that provider again (doubled)."""

    provider: str
    name: str
    hold: float | None
    source: str


@dataclass(frozen=True, slots=True)
class Reaction:
    """The action a reply asks for; ``hold`` is the delay it states, in seconds, or None;
    ``rule`` the provider's own reaction when the reply names one (:data:`PROVIDER_RULES`)."""

    action: Action
    hold: float | None = None
    rule: ProviderRule | None = None

    @property
    def hold_action(self) -> bool:
        """True when the reply asks to wait before trying again: a hold of the sender or of
        the recipient, or a greylisting delay. The guard answers these; an SMTP transport with
        holds on does not retry them at once."""
        return self.action in (Action.HOLD_SENDER, Action.HOLD_RECIPIENT, Action.GREYLIST)


#: The longest delay a reply may state and be believed, in seconds (a day).
MAX_STATED_HOLD = 86_400.0

#: Gmail, on ``4.7.28`` (and its older ``4.7.0`` with the same words and ``gsmtp``): "stop at
#: least 10 minutes, resume on one connection, wait another 10 on failure, add connections one at
#: a time on success" (support.google.com/mail/answer/81126 and /a/answer/14229414, as quoted in
#: /work/shared/RELAY-FACTS.md).
GMAIL_RATE = ProviderRule(
    "google", "4.7.28", 600.0, "https://support.google.com/mail/answer/81126 (4.7.28: stop at "
    "least 10 minutes, resume on one connection, add connections one at a time on success)",
)  # fmt: skip
#: Yahoo's ``[TSS04]`` (``[TS04]``) is a suspension: KumoMTA's shipped shaping suspends Yahoo
#: 2 hours on it (assets/policy-extras/shaping.toml, ``regex = "\\[TS?S04\\]"``,
#: ``action = "Suspend"``, ``duration = "2 hours"``); senders.yahooinc.com/smtp-error-codes.
YAHOO_SUSPENSION = ProviderRule(
    "yahoo", "[TSS04]", 7200.0, "KumoMTA assets/policy-extras/shaping.toml (Yahoo [TSS04]: "
    "Suspend, 2 hours); https://senders.yahooinc.com/smtp-error-codes/",
)  # fmt: skip
#: Yahoo's ``[TS01]``-``[TS03]``: deferrals for volume or complaints (senders.yahooinc.com):
#: backing off, the configured length doubling while they continue.
YAHOO_DEFERRAL = ProviderRule(
    "yahoo", "[TS0x]", None, "https://senders.yahooinc.com/smtp-error-codes/ ([TS01]-[TS03]: "
    "temporarily deferred for volume or user complaints)",
)  # fmt: skip
#: Microsoft's ``RP-001``-``RP-003`` (Outlook.com's rate and reputation throttling: per hour
#: and day, per connection, connections): backing off, the configured length doubling (KumoMTA's
#: shipped automation also backs off on "messages from <ip> weren't sent": 1 a minute).
MICROSOFT_RATE = ProviderRule(
    "microsoft", "RP-00x", None, "https://sendersupport.olc.protection.outlook.com/pm/"
    "troubleshooting.aspx (RP-001 rate, RP-002 per connection, RP-003 connections)",
)  # fmt: skip
#: Each rule with the words that name it, checked in this order.
PROVIDER_RULES: tuple[tuple[re.Pattern[str], ProviderRule], ...] = (
    (re.compile(r"\b4\.7\.28\b|unusual rate of\s+unsolicited mail[\s\S]*\bgsmtp\b"), GMAIL_RATE),
    (re.compile(r"\[TS?S04\]"), YAHOO_SUSPENSION),
    (re.compile(r"\[TS0[1-3]\]"), YAHOO_DEFERRAL),
    (re.compile(r"\bRP-00[1-3]\b"), MICROSOFT_RATE),
)
#: The providers a reply can name, so the only ones a provider hold can be for.
RULED_PROVIDERS: tuple[str, ...] = ("google", "microsoft", "yahoo")

_ENHANCED = re.compile(r"\b([245])\.(\d{1,3})\.(\d{1,3})\b")
_RATE = re.compile(
    r"\brate(?:s|d|[- ]?limit\w*)?\b|throttl|too many (?:messages|mails|e-?mails|connections"
    r"|concurrent|requests|sessions|transactions)|too many [\w -]{1,30}? from\b|too much mail"
    r"|too (?:frequent|fast)|\bvolume\b|(?:sending|message|daily|hourly) (?:quota|limit)"
    r"|quota exceeded|\blimit (?:exceeded|reached)|exceeded (?:our|the|your|its) (?:[\w-]+ )?"
    r"limit|reached its limit|maximum number of connections|limits for how many"
    r"|\bRP-00[1-3]\b|\[TSS?0[1-4]\]|messages? from \S+ (?:\S+ )?temporarily deferred",
    re.IGNORECASE,
)
_RECIPIENT_RATE = re.compile(
    r"receiving (?:e-?mail|mail|messages) (?:at|too)|recipient thread limit"
    r"|recipient \S+ has exceeded (?:their|its)",
    re.IGNORECASE,
)
# A 5xx that refuses our own side (credentials, sender, relaying), not this mail.
_OUR_SIDE = re.compile(
    r"authentication (?:required|failed|unsuccessful|credentials invalid)|username and password"
    r" not accepted|application-specific password|sender address rejected|relay access denied"
    r"|relaying denied|not (?:permitted|allowed) to relay|verified sender identity"
    r"|must issue a starttls",
    re.IGNORECASE,
)
_AUTH_CODES = {530, 534, 535}
_SENDER_REFUSED = re.compile(r"sender address rejected|verified sender identity", re.IGNORECASE)
_GREYLISTED = re.compile(r"gr[ae]y-?list|postgrey", re.IGNORECASE)
_TRY_LATER = re.compile(
    r"try (?:again )?later|retry later|please retry|come back later|server (?:is )?busy",
    re.IGNORECASE,
)
_ASKS_DELAY = re.compile(r"\b(?:try|retry|wait|again|back|reconnect)", re.IGNORECASE)
_GREYLIST_STATUS = {("4", "2", "0"), ("4", "7", "1")}
_GONE = re.compile(
    r"user unknown|unknown user|no such (?:user|mailbox|recipient)|mailbox (?:unavailable|not "
    r"found|does not exist)|does ?n[o']t exist|doesn't have an? \S+ account|recipient not found"
    r"|invalid recipient|no mailbox here",
    re.IGNORECASE,
)
_STATED = re.compile(
    r"(?:in|after|wait(?:ing)?|for)\s+(\d{1,6}(?:\.\d+)?)\s*"
    r"(seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h)\b",
    re.IGNORECASE,
)
# A reply's start: its code (``421``), or an enhanced status alone (``4.4.7``).
_REPLY_START = re.compile(r"\s*(?:(\d\d\d)\b|([245])\.\d)")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0}
_SENDER_STATUS = {("1", "7"), ("1", "8")}  # x.1.7 / x.1.8: the sender's address, not the mailbox


def temporary(code: int) -> bool:
    """True for a temporary SMTP reply code (4xx: the same mail may go later)."""
    return 400 <= code < 500


def temporary_reply(reply: str) -> bool:
    """True when the text of a reply (``421 ...``, ``450 4.2.2 ...``, or an enhanced status
    alone, ``4.4.7 ...``, as an ESP's bounce report quotes it) is temporary."""
    match = _REPLY_START.match(reply or "")
    if match is None:
        return False
    return temporary(int(match[1])) if match[1] else match[2] == "4"


def reaction_to_reply(code: int, reply: str) -> Reaction:
    """The reaction to the SMTP reply ``code`` ``reply`` (see the module's list)."""
    text = reply or ""
    enhanced = _ENHANCED.search(text)
    status = enhanced.groups() if enhanced else ("", "", "")
    if temporary(code):
        action = _transient(code, status, text)
        if action is Action.RETRY:
            return Reaction(action)
        rule = provider_rule(text) if action is Action.HOLD_SENDER else None
        return Reaction(action, stated_hold(text), rule)
    if 500 <= code < 600:
        klass, subject, detail = status
        ours = klass == "5" and (subject, detail) in _SENDER_STATUS
        if code in _AUTH_CODES or ours or _OUR_SIDE.search(text):
            return Reaction(Action.HOLD_TRANSPORT)
        mailbox = klass == "5" and subject == "1" and (subject, detail) not in _SENDER_STATUS
        if (code in (550, 551, 553) and mailbox) or _GONE.search(text):
            return Reaction(Action.SUPPRESS)
        return Reaction(Action.FAIL)
    return Reaction(Action.RETRY)


class _Refusal(Protocol):
    """What :func:`reaction_of` reads of a :class:`~mailer.errors.SendError`."""

    @property
    def code(self) -> int | None: ...
    @property
    def reply(self) -> str: ...
    @property
    def reaction(self) -> Reaction | None: ...


def reaction_of(error: _Refusal) -> Reaction:
    """The reaction a transport's error (a :class:`~mailer.errors.SendError`) asks for: the
    one it states (an API transport that knows its provider's answer), else
    :func:`reaction_to_reply` of its SMTP reply; ``RETRY`` when it has neither (no reply came:
    a network error)."""
    if error.reaction is not None:
        return error.reaction
    if error.code is None:
        return Reaction(Action.RETRY)
    return reaction_to_reply(error.code, error.reply or "")


def described(error: _Refusal, kind: str) -> str:
    """A log line's words for a transport's ``kind`` (``permanent``, ``transient``) error:
    ``permanent SMTP error 550`` with an SMTP reply, ``permanent provider error (SES
    MessageRejected: ...)`` with a provider's answer (which names the provider), ``transient
    error without a reply`` when none came."""
    if error.code is not None:
        return f"{kind} SMTP error {error.code}"
    if error.reply:
        return f"{kind} provider error ({error.reply})"
    return f"{kind} error without a reply"


def _transient(code: int, status: tuple[str, ...], text: str) -> Action:
    """The action for a 4xx reply (the order of the module's list)."""
    if _GREYLISTED.search(text):
        return Action.GREYLIST
    if _RECIPIENT_RATE.search(text):
        return Action.HOLD_RECIPIENT
    # a full mailbox (4.2.2) is no rate, whatever its words ("size limit exceeded")
    if tuple(status) != ("4", "2", "2") and _sender_rate(text):
        return Action.HOLD_SENDER
    if (code == 450 and not status[0]) or status == ("4", "2", "1"):
        return Action.HOLD_RECIPIENT
    if _TRY_LATER.search(text) and _greylisting_status(code, status):
        return Action.GREYLIST
    return Action.RETRY


def _sender_rate(text: str) -> bool:
    """True when a 4xx ``text`` says we send too fast, or asks to try again in a stated delay."""
    return bool(_RATE.search(text) or (stated_hold(text) is not None and _ASKS_DELAY.search(text)))


def _greylisting_status(code: int, status: tuple[str, ...]) -> bool:
    """A ``450``/``451`` with ``4.2.0`` or ``4.7.1``, or a ``4.7.500``-``4.7.699`` (Microsoft's
    "server busy" for a sender it does not know yet)."""
    if code in (450, 451) and tuple(status) in _GREYLIST_STATUS:
        return True
    return status[:2] == ("4", "7") and status[2].isdigit() and 500 <= int(status[2]) <= 699


def sender_refused(reply: str) -> bool:
    """True when a ``HOLD_TRANSPORT`` reply refuses our sender alone (``5.1.7`` / ``5.1.8``,
    "Sender address rejected", an unverified sender identity), not the relay's credentials,
    certificate or relaying (those hold every sender)."""
    status = _ENHANCED.search(reply or "")
    if status is not None and (status[2], status[3]) in _SENDER_STATUS:
        return True
    return _SENDER_REFUSED.search(reply or "") is not None


def rate_worded(text: str) -> bool:
    """True when ``text`` says the sender goes too fast: rate limit, throttling, too many
    requests or messages, a sending quota (the words that hold the sender in a 4xx)."""
    return _RATE.search(text or "") is not None


def provider_rule(text: str) -> ProviderRule | None:
    """The provider's rule a rate reply's ``text`` names (:data:`PROVIDER_RULES`), or None."""
    for words, rule in PROVIDER_RULES:
        if words.search(text or ""):
            return rule
    return None


def enhanced_status(reply: str) -> str | None:
    """The enhanced status code in ``reply`` (``4.7.0``), or None."""
    match = _ENHANCED.search(reply or "")
    return match[0] if match else None


def stated_hold(reply: str) -> float | None:
    """The delay ``reply`` asks for ("try again in 2 minutes"), in seconds; None when it states
    none, or one that is absurd (under 1 s or over :data:`MAX_STATED_HOLD`)."""
    match = _STATED.search(reply or "")
    if match is None:
        return None
    seconds = float(match[1]) * _UNIT_S[match[2][0].lower()]
    return seconds if 1.0 <= seconds <= MAX_STATED_HOLD else None
