"""The map of the code (``docs/explanation/code-map.md``) against the tree: it names every module
of ``mailer/`` and ``workers/``, every package and every Lua script folder, names nothing that is
gone, and keeps every table cell readable; the packages table of "Where a change goes"
(``house.md``) names nothing that is gone either.

How the map names a path: every backticked word that ends with ``/`` or a file's extension
(``.py``, ``.lua``...) is a path. A heading whose first backticked word is a folder
(``### `mailer/limits/` ...``) makes that folder the base of the lines under it; in a table row
whose first cell starts with a folder, that folder (under the base) is the base of the row's other
cells. A path is read under its base, unless only the repository's root holds it: ``policy.py``
under the heading ``mailer/limits/`` is ``mailer/limits/policy.py``; ``mailer/steps.py`` is
itself anywhere. A package's ``__init__.py`` is named when its folder is."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAP = ROOT / "docs" / "explanation" / "code-map.md"
#: "Where a change goes": its table of packages names modules and folders as the map does.
HOUSE = ROOT / "docs" / "explanation" / "house.md"
PACKAGES = ("mailer", "workers")
#: A table cell longer than this is a paragraph nobody reads in a table: it becomes rows.
MAX_CELL = 300
CODE = re.compile(r"`([^`\n]+)`")
PATH = re.compile(r"[\w.][\w./-]*(?:/|\.(?:py|lua|json|ya?ml|toml|md|service|timer|txt))")


def _resolve(token: str, base: str) -> str:
    """The path ``token`` names: under ``base``, unless only the root holds it (a path that is
    nowhere is reported under its base, where the map's reader looks for it)."""
    under = f"{base}{token}"
    return under if base and ((ROOT / under).exists() or not (ROOT / token).exists()) else token


def _first_folder(text: str) -> str | None:
    found = CODE.search(text)
    word = found.group(1) if found else ""
    return word if word.endswith("/") and PATH.fullmatch(word) else None


def named_paths(text: str) -> Iterator[tuple[int, str, str]]:
    """Each path the map names: its line number, its word as written and the path it names
    (relative to the root; a folder ends with ``/``)."""
    base = ""
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("#"):
            folder = _first_folder(line)
            base = _resolve(folder, "") if folder else ""
        parts = [line]
        row_base = base
        if line.startswith("|"):
            first, _, rest = line.strip("|").partition("|")
            folder = _first_folder(first)
            if folder:
                row_base = _resolve(folder, base)
            parts = [first, rest]
        for part, part_base in zip(parts, (base, row_base), strict=False):
            for word in CODE.findall(part):
                if PATH.fullmatch(word) and "*" not in word:
                    yield number, word, _resolve(word, part_base)


def tree_paths() -> set[str]:
    """What the map must name: every module of the packages but their ``__init__.py``, every
    package folder and every folder holding Lua scripts (relative to the root)."""
    wanted: set[str] = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*"):
            relative = path.relative_to(ROOT)
            if "__pycache__" in relative.parts:
                continue
            if path.suffix == ".py" and path.name != "__init__.py":
                wanted.add(relative.as_posix())
            elif path.is_dir() and ((path / "__init__.py").exists() or any(path.glob("*.lua"))):
                wanted.add(f"{relative.as_posix()}/")
    return wanted


def problems(text: str) -> list[str]:
    """What is wrong with the map, one line each: a path of the tree it does not name, then a
    path it names that is not in the tree."""
    found = list(named_paths(text))
    named = {path for _, _, path in found}
    missing = [f"not in the map: {path}" for path in sorted(tree_paths() - named)]
    stale = [
        f"line {number}: `{word}` names {path}, which does not exist"
        for number, word, path in found
        if not (ROOT / path).exists()
    ]
    return missing + stale


def long_cells(text: str) -> list[str]:
    """Each table cell over :data:`MAX_CELL` characters: its line and its start."""
    return [
        f"line {number}: a cell of {len(cell)} characters: {cell[:60]}..."
        for number, line in enumerate(text.splitlines(), start=1)
        if line.startswith("|")
        for cell in (part.strip() for part in line.strip("|").split("|"))
        if len(cell) > MAX_CELL
    ]


def test_the_map_names_every_module_and_nothing_gone() -> None:
    """Every module, package and Lua folder of ``mailer/`` and ``workers/`` is in the map, and
    every path the map names exists; the message lists each one that is not, one a line."""
    found = problems(MAP.read_text(encoding="utf-8"))
    assert not found, "the code map is out of date:\n" + "\n".join(found)


def test_no_cell_of_the_map_is_a_paragraph() -> None:
    """No table cell of the map is over 300 characters: a longer one is split into rows, one
    module or folder a row."""
    found = long_cells(MAP.read_text(encoding="utf-8"))
    assert not found, "\n".join(found)


def test_where_a_change_goes_names_only_what_exists() -> None:
    """The packages table of ``house.md`` names no module or folder that is gone, and no cell of
    it is a paragraph (its prose walks through files in the context of its steps, unchecked)."""
    text = HOUSE.read_text(encoding="utf-8")
    rows = "\n".join(line if line.startswith("|") else "" for line in text.splitlines())
    found = [
        f"line {number}: `{word}` names {path}, which does not exist"
        for number, word, path in named_paths(rows)
        if not (ROOT / path).exists()
    ] + long_cells(text)
    assert not found, "\n".join(found)


def test_the_reading_of_the_map_follows_headings_and_rows() -> None:
    """A heading's folder is the base of its lines, a row's first folder the base of its other
    cells, a full path is read from the root, and a gone path is reported with its line."""
    text = "\n".join(
        [
            "### `mailer/records/`: what is kept",
            "| `ledger/` | `redis.py`, `lua/`, `mailer/steps.py` |",
            "| `gone.py` | `Send/Defer/Drop`, `mailer.limits.aio` |",
            "## Elsewhere",
            "`ledger/`",
        ]
    )
    assert [path for _, _, path in named_paths(text)] == [
        "mailer/records/",
        "mailer/records/ledger/",
        "mailer/records/ledger/redis.py",
        "mailer/records/ledger/lua/",
        "mailer/steps.py",
        "mailer/records/gone.py",
        "ledger/",
    ]
    stale = [line for line in problems(text) if not line.startswith("not in the map")]
    assert stale == [
        "line 3: `gone.py` names mailer/records/gone.py, which does not exist",
        "line 5: `ledger/` names ledger/, which does not exist",
    ]
