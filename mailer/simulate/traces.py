"""Traces to replay: CSV files of ``time,recipient[,kind[,tenant]]`` and generated patterns."""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Callable, Iterable
from pathlib import Path

from mailer.errors import InvalidAddress
from mailer.limits.checks import check_tenant
from mailer.mail.address import normalise_address
from mailer.mail.kinds import Kinds
from mailer.simulate.report import DAY, Attempt

#: The generated patterns, by name (see :func:`generate`).
PATTERNS = ("day", "steady", "bursts", "abuse")


def read_csv(lines: Iterable[str], *, kinds: Kinds | None = None) -> list[Attempt]:
    """Parse a trace: one ``time,recipient[,kind[,tenant]]`` row a line, time in seconds from
    the start.

    An optional header row (first field ``time``), blank lines and lines starting with ``#``
    are skipped; a missing or empty kind is ``default``; a missing or empty tenant is none
    (the mail counts in no tenant, as ``send_mail`` without ``tenant=``). Each row is checked
    (time a finite number >= 0, a valid address, a kind that ``kinds`` knows, the built-ins by
    default, a tenant of 1-64 characters): a bad row raises ``ValueError("line N: ...")``
    naming the problem, never the address.
    """
    kinds = kinds if kinds is not None else Kinds.defaults()
    attempts: list[Attempt] = []
    checked: set[str] = set()
    reader = csv.reader(lines)
    first = True
    try:
        for row in reader:
            line = reader.line_num
            if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
                continue
            if first and row[0].strip().lower() == "time":
                first = False
                continue
            first = False
            attempts.append(_row(row, line, kinds, checked))
    except csv.Error as exc:
        raise ValueError(f"line {reader.line_num}: not valid CSV: {exc}") from None
    return attempts


def read_csv_file(path: str | Path, *, kinds: Kinds | None = None) -> list[Attempt]:
    """:func:`read_csv` on a UTF-8 file; errors say ``<file>, line N: ...``."""
    try:
        with Path(path).open(encoding="utf-8", newline="") as handle:
            return read_csv(handle, kinds=kinds)
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text") from None
    except ValueError as exc:
        raise ValueError(f"{path}, {exc}") from None


def _row(row: list[str], line: int, kinds: Kinds, checked: set[str]) -> Attempt:
    if len(row) not in (2, 3, 4):
        raise ValueError(
            f"line {line}: expected time,recipient[,kind[,tenant]], got {len(row)} fields"
        )
    text = row[0].strip()
    try:
        time = float(text)
    except ValueError:
        raise ValueError(f"line {line}: time {text[:20]!r} is not a number of seconds") from None
    if not math.isfinite(time) or time < 0:
        raise ValueError(f"line {line}: time must be a finite number >= 0, got {text[:20]!r}")
    recipient = row[1].strip()
    if recipient not in checked:
        try:
            normalise_address(recipient)
        except InvalidAddress as exc:
            raise ValueError(f"line {line}: {exc}") from None
        checked.add(recipient)
    kind = row[2].strip() if len(row) >= 3 and row[2].strip() else "default"
    if kind not in kinds:
        known = ", ".join(sorted(kinds))
        raise ValueError(f"line {line}: unknown kind {kind[:64]!r}; known: {known}")
    tenant = row[3].strip() if len(row) == 4 and row[3].strip() else None
    try:
        check_tenant(tenant)
    except ValueError as exc:
        raise ValueError(f"line {line}: {exc}") from None
    return Attempt(time, recipient, kind, line, tenant)


def generate(
    pattern: str, *, recipients: int = 1000, duration: float = DAY, seed: int = 0
) -> list[Attempt]:
    """A generated trace over ``duration`` seconds for ``recipients`` addresses, in time order.

    - ``day``: a day of mixed traffic: a 09:00 newsletter to everyone (``default``), notices
      through the day (``notice``), login codes with impatient second requests (``code``),
      and one abused address sent a code every 15 s from 10:00 to 11:00.
    - ``steady``: every recipient gets a ``notice`` every 30 minutes, with a random phase.
    - ``bursts``: every recipient gets three bursts of five ``default`` mails within 10 s.
    - ``abuse``: one ``notice`` per recipient at a random time, and one address sent a
      ``code`` every 10 s for the first two hours.

    Deterministic for a given ``seed``; times are whole milliseconds. Addresses are
    ``user00042@example.com`` and, for the abused one, ``target@example.org``.
    """
    if pattern not in _GENERATORS:
        raise ValueError(f"unknown pattern {pattern[:40]!r}; known: {', '.join(PATTERNS)}")
    if recipients < 1:
        raise ValueError(f"recipients must be at least 1, got {recipients}")
    if not math.isfinite(duration) or duration <= 0:
        raise ValueError(f"duration must be a positive number of seconds, got {duration}")
    rng = random.Random(seed)
    addresses = [f"user{i:05d}@example.com" for i in range(recipients)]
    attempts = _GENERATORS[pattern](rng, addresses, duration)
    attempts.sort(key=lambda a: a.time)
    # Whole milliseconds, the limiter's resolution: send times are then exact.
    return [Attempt(round(a.time, 3), a.recipient, a.kind) for a in attempts if a.time < duration]


ABUSED = "target@example.org"


def _day(rng: random.Random, addresses: list[str], duration: float) -> list[Attempt]:
    out: list[Attempt] = []
    for address in addresses:
        out.append(Attempt(9 * 3600 + rng.uniform(0, 120), address, "default"))
        for _ in range(rng.choice((0, 0, 1, 1, 2, 3))):
            out.append(Attempt(rng.uniform(0, duration), address, "notice"))
        if rng.random() < 0.3:
            login = rng.uniform(6 * 3600, 23 * 3600)
            out.append(Attempt(login, address, "code"))
            if rng.random() < 0.4:  # "I didn't get it": asks again within 90 s
                out.append(Attempt(login + rng.uniform(15, 90), address, "code"))
    out.extend(Attempt(10 * 3600 + 15.0 * k, ABUSED, "code") for k in range(240))
    return out


def _steady(rng: random.Random, addresses: list[str], duration: float) -> list[Attempt]:
    out: list[Attempt] = []
    for address in addresses:
        t = rng.uniform(0, 1800)
        while t < duration:
            out.append(Attempt(t, address, "notice"))
            t += 1800
    return out


def _bursts(rng: random.Random, addresses: list[str], duration: float) -> list[Attempt]:
    out: list[Attempt] = []
    for address in addresses:
        for _ in range(3):
            start = rng.uniform(0, duration)
            out.extend(Attempt(start + rng.uniform(0, 10), address, "default") for _ in range(5))
    return out


def _abuse(rng: random.Random, addresses: list[str], duration: float) -> list[Attempt]:
    out = [Attempt(rng.uniform(0, duration), address, "notice") for address in addresses]
    out.extend(Attempt(10.0 * k, ABUSED, "code") for k in range(720))
    return out


_GENERATORS: dict[str, Callable[[random.Random, list[str], float], list[Attempt]]] = {
    "day": _day,
    "steady": _steady,
    "bursts": _bursts,
    "abuse": _abuse,
}
