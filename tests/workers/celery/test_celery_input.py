"""Bad input through a real worker: whatever ``send_mail`` is called with, nothing breaks.

Hypothesis calls the task with random addresses (CR/LF, NUL, non-ASCII, huge, not a str), texts,
kinds, mail ids, contexts and headers of the wrong types, through a real Celery worker, Redis
and aiosmtpd. Every call ends as a clear error at enqueue (kombu cannot serialise the arguments),
``dropped``/``invalid``, or ``sent`` to a valid address; no worker process dies, no task fails
with an exception, and the server receives exactly one mail per ``sent`` outcome, to the
validated address only.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from kombu.exceptions import EncodeError

from mailer.errors import InvalidAddress
from mailer.mail.address import mailbox
from tests.workers.celery.conftest import LooseStack

TASK = "mailguard.send_mail"
FORBIDDEN = ("\r", "\n", "\0")


def nasty(text: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """``text`` with CR, LF, NUL or other line breaks spliced in somewhere."""
    breaks = st.sampled_from(["\r", "\n", "\r\n", "\0", "\x85", "\u2028", "\x0b", "\t", " "])
    return st.tuples(text, breaks, text).map(lambda t: t[0] + t[1] + t[2])


def huge(max_size: int) -> st.SearchStrategy[str]:
    """A long text (up to ``max_size`` characters), built cheaply."""
    return st.tuples(st.sampled_from("xé€𝄞"), st.integers(0, max_size)).map(lambda t: t[0] * t[1])


# Junk that survives the broker: JSON values, and what kombu's JSON encodes with a type marker.
json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
wire_value = json_value | st.binary(max_size=8) | st.datetimes() | st.decimals() | st.uuids()
# Values kombu's JSON cannot encode at all: refused at enqueue.
unencodable = (
    st.sets(st.integers(), min_size=1, max_size=2)
    | st.complex_numbers(allow_nan=False)
    | st.builds(object)
)

emails = st.emails()
addresses = st.one_of(
    emails,
    emails.map(lambda a: f"  {a.upper()}  "),
    emails.map(lambda a: "ü" + a),
    emails.map(lambda a: a.replace("@", "@bücher.")),
    nasty(emails),
    st.tuples(huge(400), emails).map(lambda t: t[0] + t[1]),
    emails.map(lambda a: f"Ada <{a}>"),
    st.text(max_size=40),
    wire_value,
)
texts = st.one_of(
    st.none(),
    st.text(max_size=60),
    nasty(st.text(max_size=20)),
    huge(1_200_000),
    st.sampled_from(["{{ 7 * 7 }}", "{% for i in range(10**9) %}x{% endfor %}", "\udc80"]),
    wire_value,
)
headers = st.one_of(
    st.none(),
    st.dictionaries(st.text(max_size=12), st.text(max_size=30), max_size=3),
    st.dictionaries(st.sampled_from(["X-Tag", "Bcc", "To", "X-Bad:"]), nasty(st.text(max_size=8))),
    st.dictionaries(st.just("X-Many"), wire_value, max_size=1),
    st.dictionaries(st.text(min_size=1, max_size=4), st.just("v"), min_size=51, max_size=60),
    wire_value,
)
contexts = st.one_of(
    st.none(),
    st.fixed_dictionaries({"code": st.one_of(st.text(max_size=12), wire_value, huge(1_200_000))}),
    st.dictionaries(st.text(max_size=8), wire_value, max_size=3),
    wire_value,
)
FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "subject": texts,
    "body": texts,
    "html": texts,
    "kind": st.one_of(st.sampled_from(["default", "code", "notice", "nope", ""]), wire_value),
    "context": contexts,
    "headers": headers,
    "mail_id": st.one_of(st.text(max_size=300), nasty(st.text(max_size=5)), wire_value),
}


@st.composite
def calls(draw: st.DrawFn) -> dict[str, Any]:
    """A valid call (subject and body given) with up to three fields replaced by junk."""
    call: dict[str, Any] = {"subject": "Hello", "body": "World"}
    count = draw(st.sampled_from([0, 1, 1, 2, 3]))
    for name in draw(st.permutations(sorted(FIELDS)))[:count]:
        call[name] = draw(FIELDS[name])
    return call


def valid_address(to: Any) -> str | None:
    """The address a mail to ``to`` may go to, or None if no mail may go anywhere."""
    if not isinstance(to, str) or any(char in to for char in FORBIDDEN):
        return None
    try:
        return mailbox(to)[1].address  # an address or "Name <address>"
    except InvalidAddress:
        return None


sent_ids: dict[str, dict[str, Any]] = {}  # mail ids already sent (hypothesis replays examples)


@settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    to=st.one_of(emails, addresses),  # half the time a plain valid address
    kwargs=calls(),
    # now and then one value kombu's JSON cannot carry
    poison=st.tuples(st.sampled_from(range(8)), unencodable).map(
        lambda t: t[1] if t[0] == 7 else None
    ),
)
def test_any_input_is_dropped_sent_once_or_refused_at_enqueue(
    loose_stack: LooseStack, to: Any, kwargs: dict[str, Any], poison: Any
) -> None:
    """Every call is refused at enqueue, dropped as invalid, or sent once to a valid address."""
    app, worker, smtp = loose_stack
    if poison is not None:  # one argument kombu's JSON cannot carry: a clear error at once
        with pytest.raises(EncodeError):
            app.send_task(TASK, args=[to], kwargs=kwargs | {"headers": poison})
        event("refused at enqueue")
        return
    before = len(smtp.delivered)
    result = app.send_task(TASK, args=[to], kwargs=kwargs)
    deadline = time.monotonic() + 20
    while not result.ready() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert result.state == "SUCCESS", (result.state, result.info)
    outcome = result.get(timeout=1)
    event(f"{outcome['status']}")
    delivered = smtp.delivered[before:]
    assert worker.process is not None and worker.process.poll() is None, "the worker died"
    if outcome["status"] == "dropped":
        assert outcome["reason"] == "invalid" and outcome["detail"]
        assert delivered == [], "nothing is sent for a dropped mail"
        return
    assert outcome["status"] == "sent", outcome
    address = valid_address(to)
    assert address is not None, "sent, but the address is not valid"
    mail_id = outcome["mail_id"]
    if mail_id in sent_ids:  # an example replayed with the same mail id: the first outcome
        assert outcome == sent_ids[mail_id] and delivered == []
        return
    sent_ids[mail_id] = outcome
    assert len(delivered) == 1, "exactly one mail per sent outcome"
    event("sent to a non-ASCII address" if not address.isascii() else "sent to an ASCII address")
    assert delivered[0].rcpt_tos == (address,)
    assert delivered[0].message["Message-ID"] == outcome["message_id"]


# Bad calls the worker must drop as invalid (the default kind's text unless a call gives one).
BAD_CALLS: list[tuple[Any, dict[str, Any]]] = [
    ("ada@example.com\r\nBcc: eve@example.com", {}),  # header injection in the address
    (["ada@example.com", 5], {}),  # a list holding something else than addresses
    ("ada@example.com", {"cc": ["not an address"]}),  # a bad cc from a producer skipping delay
    ("ada@example.com", {"attachments": [["a.txt", "!!", "text/plain"]]}),  # not base64
    ("x" * 400 + "@example.com", {}),  # a local part far over 64 octets
    ("ada@example.com", {"body": "é" * 1_200_000}),  # a body over the cap
    ("ada@example.com", {"kind": "nope"}),  # an unknown kind
    ("ada@example.com", {"headers": {"X-Bad:": "v"}}),  # a malformed header name
    ("ada@example.com", {"kind": "code", "context": {}}),  # the code kind without its code
]


def test_the_worker_survived_the_run(loose_stack: LooseStack) -> None:
    """Bad calls into the worker: each is dropped, then the same worker, with the same pool
    children, answers a ping and sends a valid mail; no task raised, no child was lost."""
    app, worker, smtp = loose_stack
    assert worker.process is not None
    children = worker.children()
    with pytest.raises(EncodeError):  # refused at enqueue, never reaches the worker
        app.send_task(TASK, args=["ada@example.com"], kwargs={"headers": {1, 2}})
    for to, kwargs in BAD_CALLS:
        result = app.send_task(TASK, args=[to], kwargs=kwargs)
        outcome = result.get(timeout=20)
        assert (result.state, outcome["status"], outcome["reason"]) == (
            "SUCCESS",
            "dropped",
            "invalid",
        ), (to, kwargs, outcome)

    replies = app.control.ping(timeout=10, limit=1)  # returns at the first reply
    assert any(name.startswith(f"{worker.name}@") for reply in replies for name in reply), replies
    before = len(smtp.delivered)
    survivor = "survivor@example.com"
    result = app.send_task(TASK, args=[survivor], kwargs={"subject": "still here", "body": "b"})
    outcome = result.get(timeout=20)
    assert outcome["status"] == "sent", outcome
    assert [d.rcpt_tos for d in smtp.delivered[before:]] == [(survivor,)]

    assert worker.process.poll() is None, "the worker's main process is alive"
    assert worker.children() == children, "no pool child died and was replaced"
    log = worker.log()
    assert "WorkerLostError" not in log and "raised unexpected" not in log
