"""The ``mailguard`` lines the manual writes run as written without a terminal: a command that
asks first (``unsuppress``, ``reset``, ``cancel``, ``policy set``) is written with ``--yes``,
unless the page shows it in a terminal session answering its question (``[y/N]: y``). A
synopsis (``mailguard cancel MAIL_ID``, a bare command name) names no value to run with."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ASKING = re.compile(r"mailguard (unsuppress|reset|cancel|policy set)\b([^`\n]*)")
#: How many following lines of a console block may show the question answered.
ANSWER_WITHIN = 12


def _violations(path: Path, base: Path = ROOT) -> list[str]:
    lines = path.read_text().splitlines()
    found = []
    for n, line in enumerate(lines):
        for match in ASKING.finditer(line):
            args = re.split(r"[#|)]", match.group(2), maxsplit=1)[0].strip()  # a comment, a cell
            if not args or re.search(r"\b[A-Z][A-Z_]{1,}\b", args):
                continue  # a synopsis or a mention, not a line to run
            if re.search(r"(^|\s)(--yes|-y)\b", args):
                continue
            if any("[y/N]: y" in later for later in lines[n + 1 : n + 1 + ANSWER_WITHIN]):
                continue  # a terminal session that answers the question
            found.append(f"{path.relative_to(base)}:{n + 1}: {match.group(0).strip()}")
    return found


def test_every_asking_command_in_the_manual_runs_without_a_terminal() -> None:
    """Every page under docs/: an asking command with values is written with ``--yes``."""
    pages = sorted((ROOT / "docs").rglob("*.md"))
    assert len(pages) > 10
    assert [v for page in pages for v in _violations(page)] == []


def test_the_check_finds_a_line_that_would_ask(tmp_path: Path) -> None:
    """The checker itself: a line without ``--yes`` is found, a synopsis is not."""
    page = tmp_path / "page.md"
    page.write_text("`mailguard unsuppress ada@example.com` lifts it; `mailguard cancel MAIL_ID`.")
    assert _violations(page, tmp_path) == ["page.md:1: mailguard unsuppress ada@example.com"]
