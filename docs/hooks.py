"""The manual's generated reference pages: written from the code into the pages themselves
(readable in the checkout), and again at each build (MkDocs hook).

A page holds a region that generated text fills, between a marker line and its end line
(``<!-- end generated: NAME -->``; a marker alone is filled the first time):

- ``<!-- generated: settings -->``: every ``MAILGUARD_*`` setting, from the one table in
  ``mailer/settings.py``'s docstring (read with :mod:`ast`: nothing is imported);
- ``<!-- generated: cli -->``: ``mailguard --help`` and each command's ``--help``, through
  click's API (the command group imports no Celery);
- ``<!-- generated: vocabulary -->``: the words of a mail's run, from ``mailer.steps.VOCABULARY``.

``python docs/hooks.py write`` (``make reference``) rewrites every page's regions from the code;
``python docs/hooks.py check`` exits 1 naming the pages whose checked-in text is not current
(``tests/docs/test_reference_current.py``); ``python docs/hooks.py settings`` (or ``cli``,
``vocabulary``) prints one of them.
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
_MARKER = re.compile(
    r"^<!-- generated: ([a-z]+) -->$(?:.*?^<!-- end generated: \1 -->$)?", re.MULTILINE | re.DOTALL
)
DOCS = ROOT / "docs"


def expand(markdown: str) -> str:
    """``markdown`` with each generated region (or marker line) filled with its text afresh."""

    def generated(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise ValueError(f"unknown generated section {name!r}; known: {sorted(GENERATORS)}")
        text = GENERATORS[name]().strip("\n")
        return f"<!-- generated: {name} -->\n\n{text}\n\n<!-- end generated: {name} -->"

    return _MARKER.sub(generated, markdown)


def generated_pages(docs: Path = DOCS) -> list[Path]:
    """The pages under ``docs`` that hold a generated region, sorted."""
    return sorted(p for p in docs.rglob("*.md") if _MARKER.search(p.read_text()))


def stale_pages(docs: Path = DOCS) -> list[Path]:
    """The generated pages whose checked-in text is not what the code generates now."""
    return [p for p in generated_pages(docs) if expand(p.read_text()) != p.read_text()]


def write_pages(docs: Path = DOCS) -> list[Path]:
    """Fill every generated page's regions from the code; the pages that changed."""
    changed = stale_pages(docs)
    for page in changed:
        page.write_text(expand(page.read_text()))
    return changed


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs hook: fill the regions of every page (the built manual is current either way)."""
    return expand(markdown)


def main(argv: list[str]) -> int:
    """``write``, ``check`` or a generator's name (printed); the exit code."""
    command = argv[0] if argv else ""
    if command in ("write", "check"):
        pages = write_pages() if command == "write" else stale_pages()
        for page in pages:
            verb = "written" if command == "write" else "not current (run: make reference)"
            print(f"{page.relative_to(ROOT)}: {verb}", file=sys.stderr)
        return 1 if pages and command == "check" else 0
    if command not in GENERATORS:
        print(f"usage: python docs/hooks.py write|check|{'|'.join(GENERATORS)}", file=sys.stderr)
        return 2
    print(GENERATORS[command]())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
