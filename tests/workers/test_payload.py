"""A parked mail's payload (workers/payload.py): version 3 is small and the same mail; version 1
and 2 entries, parked by earlier workers, are still read as they were written."""

from __future__ import annotations

import json
import zlib
from dataclasses import replace

import pytest

from mailer.mail.seal import seal, unseal
from mailer.steps import Progress
from workers.payload import PACKED, WRITE_VERSION, Parked, pack

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


def test_version_3_is_the_same_mail_in_a_third_of_the_bytes() -> None:
    """The mail id, the seal and ``_requested_at`` are left out (the progress keeps its turn);
    decoding with the mail id gives the same call, and the progress sealed again at
    publication unseals to the same progress (turn 0, a caller's eta parked at enqueue, as
    turn 1: a published payload is no first message)."""
    kwargs, sealed = _kwargs()
    entry = Parked(MAIL, ["r1234@example.com"], kwargs | {"_progress": sealed}, 1795484876.062)
    old = _version1(entry)
    new = Parked(MAIL, entry.args, entry.kwargs, entry.due, progress=PROGRESS).array(version=3)
    assert new[:3] == b"[3," and MAIL.encode() not in new and b"_progress" not in new
    assert len(new) <= 140 and len(new) * 3 < len(old), (len(new), len(old))
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


def test_a_version_1_payload_is_read_as_it_was_written() -> None:
    """Bytes as the first parking workers wrote them (JSON object, sealed ``_progress`` in the
    kwargs, ``task`` only when it is not the mail id): the same call is published, seal and all."""
    kwargs, sealed = _kwargs()
    written = (
        '{"v":1,"args":["ada@example.com"],"task":"t-9","kwargs":{"subject":"s","body":"b",'
        f'"_requested_at":1795484742.938,"mail_id":"{MAIL}","_progress":"{sealed}"}},'
        '"due":1795484876.062}'
    ).encode()
    for given in (None, MAIL):  # the mail id is in the payload itself
        entry = Parked.decode(written, given)
        assert entry.task_id == "t-9" and entry.args == ["ada@example.com"]
        assert entry.kwargs == kwargs | {"_progress": sealed} and entry.progress is None
        assert entry.due == 1795484876.062
        assert entry.message_kwargs(MAIL, "another secret") == entry.kwargs  # as it was
    same = Parked.decode(written.replace(b'"task":"t-9",', b""))
    assert same.task_id == MAIL


def test_a_progress_written_before_first_seen_keeps_its_deadline() -> None:
    """A version 2 payload and a sealed progress written before ``first_seen`` existed (eight
    values; no such key) count the kind's deadline from their ``requested_at``, as they did: an
    upgrade does not give a waiting mail a new deadline."""
    values = [0, 0, 0, 1, "", 1795484742.938, 1795484876.062, 1795484876.062]
    written = json.dumps([2, 1795484876.062, ["ada@example.com"], {}, values]).encode()
    parked = Parked.decode(written, MAIL).progress
    assert parked is not None and parked.first_seen == parked.requested_at == 1795484742.938
    old = {k: v for k, v in PROGRESS.as_dict().items() if k != "first_seen"}
    assert Progress.from_dict(old).first_seen == PROGRESS.requested_at
    assert Progress.from_dict(PROGRESS.as_dict()) == PROGRESS
    unseen = Progress(requested_at=1795484742.938)  # a run that never reached the limiter
    assert Progress.from_dict(unseen.as_dict()).first_seen == 0.0


def test_version_3_writes_the_progress_s_times_from_the_due() -> None:
    """A slot the progress holds is the payload's due (``0``), an unset time ``null``, the
    others whole milliseconds from it: the usual progress is 40 B, half version 2's. Slots
    come back exact (a hop compares them for equality), whole milliseconds or not; the
    first time seen and the request time to the millisecond (a deadline is not moved by more
    than half of one)."""
    due = 1795484876.061
    progress = Progress(deferrals=1, due=due, first_due=due, first_seen=1795484743.0126, turn=2)
    raw = Parked(MAIL, [], {"mail_id": MAIL}, due, progress).array(version=3)
    assert raw == b'[3,1795484876061,[],{},[0,0,0,1,"",null,0,0,-133048,2,""]]'
    back = Parked.decode(raw, MAIL).progress
    assert back == replace(progress, first_seen=1795484743.013)
    assert back is not None and (back.due, back.first_due, back.requested_at) == (due, due, 0.0)
    odd = Progress(due=1795484876.0617483, first_due=1795484000.5, requested_at=1795484742.938)
    again = Parked.decode(Parked(MAIL, [], {"mail_id": MAIL}, due, odd).encode(version=3), MAIL)
    assert again.progress == odd and again.due == due


def test_version_4_is_written_and_reads_as_versions_2_and_3_do() -> None:
    """The smallest version is written; a version 2 or 3 entry of the same mail reads the
    same."""
    assert WRITE_VERSION == 4
    entry = Parked(MAIL, ["ada@example.com"], {"mail_id": MAIL}, 1795484876.062, PROGRESS)
    raw = entry.array()
    assert raw[:3] == b"[4,"
    assert len(raw) <= len(entry.array(version=3))
    older = [Parked.decode(entry.encode(version=v), MAIL) for v in (2, 3)]
    assert Parked.decode(raw, MAIL) == older[0] == older[1] == entry


def test_version_4_leaves_the_usual_values_at_the_end_out() -> None:
    """A booked mail's progress in version 4: deferrals, request time, first time seen, turn
    and parent; the counts at 0, no stale owner and its due the slot itself are left out
    (read back as such), where version 3 writes all eleven values; the first time seen counts
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
def test_version_4_writes_one_address_as_a_string(args: list[object], written: bytes) -> None:
    """``send_mail(to, ...)`` with one address (the usual call): its args are that string in
    version 4, read back as the list; any other args as the list."""
    entry = Parked(MAIL, args, {"mail_id": MAIL}, 1795484876.062, PROGRESS)
    raw = entry.array()
    assert raw.startswith(b"[4,1795484876062," + written + b","), raw
    assert Parked.decode(raw, MAIL) == entry


def test_a_version_2_payload_is_read_as_it_was_written() -> None:
    """Bytes as workers wrote them before version 3 (the due and the progress's times in
    epoch seconds): the same mail and progress."""
    values = [0, 0, 0, 1, "", 1795484742.938, 1795484876.0617483, 1795484876.0617483]
    values += [1795484743.012, 1, "afed39f9"]
    written = json.dumps([2, 1795484876.062, ["ada@example.com"], {"subject": "s"}, values, "t-9"])
    entry = Parked.decode(written.encode(), MAIL)
    assert (entry.task_id, entry.due, entry.args) == ("t-9", 1795484876.062, ["ada@example.com"])
    assert entry.kwargs == {"subject": "s", "mail_id": MAIL}
    assert entry.progress == replace(PROGRESS, turn=1, parent="afed39f9")


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


def test_a_payload_compressed_by_an_earlier_worker_is_read() -> None:
    """Earlier workers stored a payload over 200 B zlib-compressed, without the dictionary."""
    kwargs, _ = _kwargs()
    entry = Parked(MAIL, ["ada@example.com"], kwargs | {"body": "b" * 300}, 12.25, PROGRESS)
    written = zlib.compress(entry.array(), 6)
    assert written[:1] == b"x"
    assert Parked.decode(written, MAIL) == Parked.decode(entry.encode(), MAIL)


@pytest.mark.parametrize(
    "bad",
    [
        None,
        b"",
        b"\xff",
        b"x\x9cnot zlib",
        b"d",
        b"dnot deflate",
        pack(b"[4,1,[],{},null]")[:-1],  # cut short
        pack(b"[4,1,[],{},null]") + b"more",
        pack(b"not JSON"),
        b"[]",
        b'{"v": 3}',
        b'{"v": 1, "task": "t", "args": []}',
        b'[2, 1.0, [], {"mail_id": "m"}, null]',  # the mail id is never in the kwargs
        b"[2, 1.0, [], {}, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]]",  # more progress than there is
        b'[2, "soon", [], {}, null]',
        b"[2, 1.0, {}, {}, null]",
        b"[2, 1.0, [], {}, null, 7]",  # a task id that is not a string
        b"[3, 1.5, [], {}, null]",  # version 3's due is whole milliseconds
        b"[3, true, [], {}, null]",
        b"[5, 1, [], {}, null]",
        b"[4, 1, [], {}, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]]",
    ],
)
def test_anything_else_is_a_value_error(bad: bytes | None) -> None:
    """What the promoter buries (a dead letter), never retried."""
    with pytest.raises(ValueError):
        Parked.decode(bad, "m")


def _version1(entry: Parked) -> bytes:
    """What the version 1 encoder wrote for ``entry``."""
    data: dict[str, object] = {"v": 1, "args": entry.args}
    if entry.task_id != entry.kwargs.get("mail_id"):
        data["task"] = entry.task_id
    data |= {"kwargs": entry.kwargs, "due": round(entry.due, 3)}
    return json.dumps(data, separators=(",", ":")).encode()


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
