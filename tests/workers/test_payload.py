"""A parked mail's payload (workers/waiting/payload.py): small and the same mail; nothing but the
version written is read."""

from __future__ import annotations

import json
import zlib
from dataclasses import replace

import pytest

from mailer.mail.seal import seal, unseal
from mailer.steps import Progress
from workers.waiting.payload import PACKED, WRITE_VERSION, Parked, pack

SECRET = "test-secret"
MAIL = "0b0e6a4c-5a43-4c1e-9f39-6d0a3f2b9e11"
PROGRESS = Progress(
    deferrals=1,
    requested_at=1795484742.938,
    due=1795484876.0617483,
    first_due=1795484876.0617483,
    first_seen=1795484743.012,
)


def _kwargs() -> tuple[dict[str, object], str]:
    """A short mail's kwargs (no ``_progress``) and its sealed progress."""
    sealed = seal(PROGRESS, MAIL, SECRET)
    return {"subject": "s", "body": "b", "_requested_at": 1795484742.938, "mail_id": MAIL}, sealed


def test_a_payload_is_the_same_mail_in_a_third_of_the_bytes() -> None:
    """The mail id, the seal and ``_requested_at`` are left out (the progress keeps its turn);
    decoding with the mail id gives the same call, and the progress sealed again at
    publication unseals to the same progress (turn 0, a caller's eta parked at enqueue, as
    turn 1: a published payload is no first message)."""
    kwargs, sealed = _kwargs()
    entry = Parked(MAIL, ["r1234@example.com"], kwargs | {"_progress": sealed}, 1795484876.062)
    message = json.dumps({"args": entry.args, "kwargs": entry.kwargs}).encode()
    new = Parked(MAIL, entry.args, entry.kwargs, entry.due, progress=PROGRESS).array()
    assert new[:3] == b"[4," and WRITE_VERSION == 4
    assert MAIL.encode() not in new and b"_progress" not in new
    assert len(new) <= 140 and len(new) * 3 < len(message), (len(new), len(message))
    back = Parked.decode(new, MAIL)
    assert back.task_id == MAIL and back.args == ["r1234@example.com"]
    assert back.kwargs == {"subject": "s", "body": "b", "mail_id": MAIL}
    assert back.due == 1795484876.062 and back.progress == PROGRESS
    published = back.message_kwargs(MAIL, SECRET)
    assert unseal(published["_progress"], MAIL, SECRET) == replace(PROGRESS, turn=1)
    with pytest.raises(ValueError, match="mail id"):
        Parked.decode(new)


@pytest.mark.parametrize("turn", [-1, 1, 4])
def test_a_payload_is_published_with_its_own_turn(turn: int) -> None:
    """A run's payload (turn 1 or later) or one of unknown turn (-1) goes with its turn as
    it is; only turn 0 becomes 1."""
    progress = replace(PROGRESS, turn=turn, parent="ab12cd34" if turn > 0 else "")
    entry = Parked(MAIL, ["r@example.com"], {"mail_id": MAIL}, 1795484876.062, progress)
    published = entry.message_kwargs(MAIL, SECRET)
    assert unseal(published["_progress"], MAIL, SECRET) == progress


def test_a_message_kept_as_enqueued_is_published_as_it_was() -> None:
    """A payload with no progress (a message kept as it was enqueued) reads back with its
    kwargs, a sealed ``_progress`` among them, and is published as it was."""
    kwargs, sealed = _kwargs()
    entry = Parked("t-9", ["ada@example.com"], kwargs | {"_progress": sealed}, 1795484876.062)
    back = Parked.decode(entry.encode(), MAIL)
    assert back == entry and back.progress is None
    assert back.message_kwargs(MAIL, "another secret") == entry.kwargs


def test_a_progress_reads_back_with_its_first_seen() -> None:
    """A progress reads back as written; one whose mail never reached the limiter has no
    ``first_seen`` (0)."""
    assert Progress.from_dict(PROGRESS.as_dict()) == PROGRESS
    unseen = Progress(requested_at=1795484742.938)  # a run that never reached the limiter
    assert Progress.from_dict(unseen.as_dict()).first_seen == 0.0


def test_the_progress_s_times_are_written_from_the_due() -> None:
    """A slot the progress holds is the payload's due (``0``), an unset time ``null``, the
    others whole milliseconds from it. Slots
    come back exact (a hop compares them for equality), whole milliseconds or not; the
    first time seen and the request time to the millisecond (a deadline is not moved by more
    than half of one)."""
    due = 1795484876.061
    progress = Progress(deferrals=1, due=due, first_due=due, first_seen=1795484743.0126, turn=2)
    raw = Parked(MAIL, [], {"mail_id": MAIL}, due, progress).array()
    assert raw == b"[4,1795484876061,[],{},[1,null,-133048,2]]"
    back = Parked.decode(raw, MAIL).progress
    assert back == replace(progress, first_seen=1795484743.013)
    assert back is not None and (back.due, back.first_due, back.requested_at) == (due, due, 0.0)
    odd = Progress(due=1795484876.0617483, first_due=1795484000.5, requested_at=1795484742.938)
    again = Parked.decode(Parked(MAIL, [], {"mail_id": MAIL}, due, odd).encode(), MAIL)
    assert again.progress == odd and again.due == due


def test_the_usual_values_at_the_end_are_left_out() -> None:
    """A booked mail's progress: deferrals, request time, first time seen, turn and parent;
    the counts at 0, no stale owner and its due the slot itself are left out (read back as
    such); the first time seen counts
    from the request (74 ms: the queue's wait). A value that is not the usual one is written,
    with every one before it."""
    due = 1795484876.061
    progress = Progress(
        deferrals=1,
        due=due,
        first_due=due,
        requested_at=1795484742.938,
        first_seen=1795484743.012,
        turn=2,
        parent="ab12cd34",
    )
    raw = Parked(MAIL, [], {"mail_id": MAIL}, due, progress).array()
    assert raw == b'[4,1795484876061,[],{},[1,-133123,74,2,"ab12cd34"]]'
    assert Parked.decode(raw, MAIL).progress == progress
    odd = replace(progress, first_due=1795484000.5, attempts=3, stale_owner="0f")
    raw = Parked(MAIL, [], {"mail_id": MAIL}, due, odd).array()
    assert raw.endswith(b',3,0,0,"0f",0,-875561]]'), raw
    assert Parked.decode(raw, MAIL).progress == odd
    for first in (Progress(), Progress(turn=-1), Progress(requested_at=1795484742.938)):
        entry = Parked(MAIL, [], {"mail_id": MAIL}, due, first)
        assert Parked.decode(entry.encode(), MAIL).progress == first


@pytest.mark.parametrize(
    ("args", "written"),
    [
        (["ada@example.com"], b'"ada@example.com"'),
        ([["ada@example.com", "bob@example.com"]], b'[["ada@example.com","bob@example.com"]]'),
        ([], b"[]"),
        (["ada@example.com", "s"], b'["ada@example.com","s"]'),
    ],
)
def test_one_address_is_written_as_a_string(args: list[object], written: bytes) -> None:
    """``send_mail(to, ...)`` with one address (the usual call): its args are that string,
    read back as the list; any other args as the list."""
    entry = Parked(MAIL, args, {"mail_id": MAIL}, 1795484876.062, PROGRESS)
    raw = entry.array()
    assert raw.startswith(b"[4,1795484876062," + written + b","), raw
    assert Parked.decode(raw, MAIL) == entry


def test_a_payload_is_packed_and_a_caller_s_task_id_kept() -> None:
    """Stored packed (its JSON deflated against the dictionary) when that is shorter: a long
    body to less than half, a short booked mail's 92 B of JSON into 60 B or less (Redis keeps
    it in a 64-byte allocation, not 96); read back the same."""
    kwargs, _ = _kwargs()
    body = "Dear Ada, " + "your order has shipped. " * 40
    entry = Parked("task-1", ["ada@example.com"], kwargs | {"body": body}, 12.25, PROGRESS)
    raw = entry.encode()
    assert raw[:1] == PACKED and len(raw) < len(body) / 2
    back = Parked.decode(raw, MAIL)
    assert back.task_id == "task-1" and back.kwargs["body"] == body and back.progress == PROGRESS
    due = 1795831584.518
    booked = Progress(
        deferrals=1, due=due, first_due=due, first_seen=due - 53.475, turn=1, parent="d8a11bb1"
    )
    short = Parked(MAIL, ["r738@example.com"], {"subject": "s", "body": "b", "mail_id": MAIL}, due)
    short = replace(short, progress=booked)
    assert len(short.array()) == 92 and short.array()[:3] == b"[4,"
    packed = short.encode()
    assert packed[:1] == PACKED and len(packed) <= 60, len(packed)
    assert Parked.decode(packed, MAIL) == short


@pytest.mark.parametrize(
    "bad",
    [
        None,
        b"",
        b"\xff",
        b"x\x9cnot zlib",
        zlib.compress(b"[4,1,[],{},null]"),  # zlib without the dictionary: not a payload
        b"d",
        b"dnot deflate",
        pack(b"[4,1,[],{},null]")[:-1],  # cut short
        pack(b"[4,1,[],{},null]") + b"more",
        pack(b"not JSON"),
        b"[]",
        b'{"v": 3}',
        b'{"v": 1, "task": "t", "args": []}',
        b'{"v":1,"args":[],"kwargs":{"mail_id":"m"},"due":1.0}',  # no other version is read
        b"[2, 1.0, [], {}, null]",
        b"[3, 1, [], {}, null]",
        b'[2, 1.0, [], {"mail_id": "m"}, null]',  # the mail id is never in the kwargs
        b"[2, 1.0, [], {}, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]]",  # more progress than there is
        b'[2, "soon", [], {}, null]',
        b"[2, 1.0, {}, {}, null]",
        b"[2, 1.0, [], {}, null, 7]",  # a task id that is not a string
        b"[4, 1.5, [], {}, null]",  # the due is whole milliseconds
        b"[4, true, [], {}, null]",
        b"[5, 1, [], {}, null]",
        b"[4, 1, [], {}, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]]",
    ],
)
def test_anything_else_is_a_value_error(bad: bytes | None) -> None:
    """What the promoter buries (a dead letter), never retried."""
    with pytest.raises(ValueError):
        Parked.decode(bad, "m")


def test_a_parked_mail_keeps_its_greylisting_count() -> None:
    """A greylisted mail's count of greylisting replies (its step in the greylisting schedule)
    survives parking: decoded as written; a payload written without it reads 0."""
    progress = replace(PROGRESS, greylists=3, attempts=4)
    entry = Parked(MAIL, ["r@example.com"], {"mail_id": MAIL}, 1795484876.062, progress)
    decoded = Parked.decode(entry.encode(), MAIL)
    assert decoded.progress is not None and decoded.progress.greylists == 3
    plain = Parked(MAIL, ["r@example.com"], {"mail_id": MAIL}, 1795484876.062, PROGRESS)
    assert b"greylists" not in plain.array() and Parked.decode(plain.encode(), MAIL).progress
    assert Parked.decode(plain.encode(), MAIL).progress.greylists == 0  # type: ignore[union-attr]
