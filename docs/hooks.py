"""MkDocs hooks: the manual's generated reference pages, written from the code at each build.

A page holds a marker line where generated text goes:

- ``<!-- generated: settings -->``: every ``MAILGUARD_*`` setting, from the one table in
  ``mailer/settings.py``'s docstring (read with :mod:`ast`: nothing is imported);
- ``<!-- generated: cli -->``: ``mailguard --help`` and each command's ``--help``, through
  click's API (the command group imports no Celery);
- ``<!-- generated: vocabulary -->``: the words of a mail's run, from ``mailer.steps.VOCABULARY``.

``python docs/hooks.py settings`` (or ``cli``, ``vocabulary``) prints one of them.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SETTINGS_SOURCE = ROOT / "mailer" / "settings.py"
#: The columns of the settings table, in order.
SETTINGS_COLUMNS = ("variable", "type", "default", "example", "meaning")
CLI_WIDTH = 100


def _markdown(rst: str) -> str:
    """Docstring markup as Markdown: ````code```` and ``:mod:`x``` become `` `code` ``."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", rst)
    return text.replace("``", "`")


def settings_rows(source: Path = SETTINGS_SOURCE) -> list[dict[str, str]]:
    """The settings table of ``source``'s module docstring, one dict a row (Markdown cells).

    Raises ``ValueError`` naming the row when a row does not have the table's five columns.
    """
    doc = ast.get_docstring(ast.parse(source.read_text()), clean=True) or ""
    lines = [line for line in doc.splitlines() if line.startswith("|")]
    if not lines:
        raise ValueError(f"{source}: no settings table in the module docstring")
    header = tuple(cell.strip() for cell in lines[0].strip().strip("|").split("|"))
    if header != SETTINGS_COLUMNS:
        raise ValueError(f"{source}: the settings table's columns must be {SETTINGS_COLUMNS}")
    rows = []
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        if len(cells) != len(SETTINGS_COLUMNS):
            raise ValueError(f"{source}: settings row needs {len(SETTINGS_COLUMNS)} cells: {line}")
        rows.append(dict(zip(SETTINGS_COLUMNS, (_markdown(cell) for cell in cells), strict=True)))
    return rows


def settings_notes(source: Path = SETTINGS_SOURCE) -> str:
    """The docstring's paragraphs after the table (durations, derived values), as Markdown."""
    doc = ast.get_docstring(ast.parse(source.read_text()), clean=True) or ""
    after = doc.split("\n\n")
    tail = [part for part in after if not part.lstrip().startswith(("|", "Settings from"))]
    return _markdown("\n\n".join(tail[1:])) if len(tail) > 1 else ""


def settings_reference(source: Path = SETTINGS_SOURCE) -> str:
    """The settings reference: one table, then the notes of the docstring."""
    out = ["| variable | type | default | example | meaning |", "|---|---|---|---|---|"]
    out += [" | ".join(["", *row.values(), ""]).strip() for row in settings_rows(source)]
    return "\n".join(out) + "\n\n" + settings_notes(source) + "\n"


def cli_reference() -> str:
    """``mailguard --help`` and every command's ``--help``, each under its own heading."""
    import click

    from workers.cli.group import main

    width: dict[str, Any] = {"terminal_width": CLI_WIDTH, "max_content_width": CLI_WIDTH}
    root = click.Context(main, info_name="mailguard", **width, **main.context_settings)
    parts = [f"## mailguard\n\n```text\n{main.get_help(root)}\n```\n"]
    for name, command in main.commands.items():
        settings = command.context_settings
        ctx = click.Context(command, info_name=name, parent=root, **width, **settings)
        parts.append(f"## mailguard {name}\n\n```text\n{command.get_help(ctx)}\n```\n")
        for sub_name, sub in getattr(command, "commands", {}).items():  # a group's commands
            sub_ctx = click.Context(sub, info_name=sub_name, parent=ctx, **width)
            parts.append(
                f"### mailguard {name} {sub_name}\n\n```text\n{sub.get_help(sub_ctx)}\n```\n"
            )
    return "\n".join(parts)


def vocabulary_reference() -> str:
    """``mailer.steps.VOCABULARY`` as a table: what happened, the step, status, reason, state."""
    from mailer.steps import VOCABULARY

    out = [
        "| what happened | `plan()` | guard's step | status | reason | Celery state |",
        "|---|---|---|---|---|---|",
    ]
    for word in VOCABULARY:
        cells = (word.plan, word.step, word.status, word.reason or "", word.state)
        code = " | ".join(f"`{cell}`" if cell else "" for cell in cells)
        out.append(f"| {word.happened} | {code} |")
    return "\n".join(out) + "\n"


GENERATORS = {
    "settings": settings_reference,
    "cli": cli_reference,
    "vocabulary": vocabulary_reference,
}
_MARKER = re.compile(r"^<!-- generated: ([a-z]+) -->$", re.MULTILINE)


def expand(markdown: str) -> str:
    """``markdown`` with each marker line replaced by its generated text."""

    def generated(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise ValueError(f"unknown generated section {name!r}; known: {sorted(GENERATORS)}")
        return GENERATORS[name]()

    return _MARKER.sub(generated, markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs hook: expand the markers of every page."""
    return expand(markdown)


if __name__ == "__main__":
    print(GENERATORS[sys.argv[1]]())
