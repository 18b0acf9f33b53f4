"""What a mail server's reply asks of the sender: a small pure classifier.

:func:`classify` reads an SMTP reply (code and text, including the enhanced status code such as
``4.7.0``) and answers a :class:`Reaction`:

- ``HOLD_RECIPIENT``: this recipient receives too fast, hold it alone: ``450`` without an
  enhanced code, ``4.2.1`` (Gmail's "receiving mail at a rate"), or such a text in a 4xx.
- ``HOLD_SENDER``: we send too fast, hold every worker: ``421`` of any kind, ``454``, a 4xx
  with ``4.7.x``, or a 4xx whose text says rate, throttl or too many.
- ``SUPPRESS``: the mailbox is gone, suppress the address: ``550``/``551``/``553`` with
  ``5.1.x`` (not ``5.1.7``/``5.1.8``, which are about the sender), or a 5xx that says user
  unknown, no such user, mailbox unavailable, does not exist and the like.
- ``FAIL``: any other 5xx fails this mail only, as before (e.g. ``554 5.7.1`` content).
- ``RETRY``: any other 4xx, or a reply the classifier does not know: retried with backoff.

``hold`` is the delay the reply states ("try again in 2 minutes"), in seconds, when it states
one between 1 s and a day; otherwise None (the caller's configured hold applies). Pure: no I/O.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class Action(enum.Enum):
    """What to do after a reply; see the table in :mod:`mailer.mail.replies`."""

    RETRY = "retry"
    FAIL = "fail"
    HOLD_SENDER = "hold_sender"
    HOLD_RECIPIENT = "hold_recipient"
    SUPPRESS = "suppress"


@dataclass(frozen=True, slots=True)
class Reaction:
    """The action a reply asks for; ``hold`` is the delay it states, in seconds, or None."""

    action: Action
    hold: float | None = None

    @property
    def hold_action(self) -> bool:
        """True when the reply asks for a hold (of the sender or of the recipient)."""
        return self.action in (Action.HOLD_SENDER, Action.HOLD_RECIPIENT)


#: The longest delay a reply may state and be believed, in seconds (a day).
MAX_STATED_HOLD = 86_400.0

_ENHANCED = re.compile(r"\b([245])\.(\d{1,3})\.(\d{1,3})\b")
_RATE = re.compile(r"rate|throttl|too many", re.IGNORECASE)
_RECIPIENT_RATE = re.compile(r"receiving (?:mail|messages) (?:at|too)", re.IGNORECASE)
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
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0}
_SENDER_STATUS = {("1", "7"), ("1", "8")}  # x.1.7 / x.1.8: the sender's address, not the mailbox


def classify(code: int, reply: str) -> Reaction:
    """The reaction to the SMTP reply ``code`` ``reply`` (see the module's list)."""
    text = reply or ""
    enhanced = _ENHANCED.search(text)
    status = enhanced.groups() if enhanced else ("", "", "")
    if 400 <= code < 500:
        action = _transient(code, status, text)
        return Reaction(action, None if action is Action.RETRY else stated_hold(text))
    if 500 <= code < 600:
        klass, subject, detail = status
        mailbox = klass == "5" and subject == "1" and (subject, detail) not in _SENDER_STATUS
        if (code in (550, 551, 553) and mailbox) or _GONE.search(text):
            return Reaction(Action.SUPPRESS)
        return Reaction(Action.FAIL)
    return Reaction(Action.RETRY)


def _transient(code: int, status: tuple[str, ...], text: str) -> Action:
    """The action for a 4xx reply."""
    if (code == 450 and not status[0]) or status == ("4", "2", "1"):
        return Action.HOLD_RECIPIENT
    if _RECIPIENT_RATE.search(text):
        return Action.HOLD_RECIPIENT
    if code in (421, 454) or status[:2] == ("4", "7") or _RATE.search(text):
        return Action.HOLD_SENDER
    return Action.RETRY


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
