"""The reference pages' generated regions (settings, every command, the outcomes vocabulary)
are checked in current: what ``docs/hooks.py`` generates from the code now is what the pages
hold, so they read whole in the checkout. ``make reference`` writes them again."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mailguard_docs_hooks", ROOT / "docs/hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_checked_in_reference_pages_are_current() -> None:
    """Each page with a generated region holds what the code generates now."""
    hooks = _hooks()
    pages = [p.relative_to(ROOT).as_posix() for p in hooks.generated_pages()]
    assert pages == [f"docs/reference/{n}.md" for n in ("cli", "outcomes", "settings")]
    stale = [p.relative_to(ROOT).as_posix() for p in hooks.stale_pages()]
    assert stale == [], f"not current: {stale}; run `make reference` (python docs/hooks.py write)"
    for page in hooks.generated_pages():
        assert "<!-- end generated: " in page.read_text(), page


def test_a_stale_region_is_found_and_written_again(tmp_path: Path) -> None:
    """A region edited by hand (or left behind by a new setting) is found by ``check`` (exit 1)
    and written again by ``write``; a marker alone is filled."""
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs" / "reference", docs / "reference")
    hooks = _hooks()
    settings = docs / "reference" / "settings.md"
    current = settings.read_text()
    settings.write_text(current.replace("| `MAILGUARD_QUEUE` |", "| `MAILGUARD_QUEUE_OLD` |"))
    bare = docs / "reference" / "outcomes.md"
    bare.write_text("# Outcomes\n\n<!-- generated: vocabulary -->\n")
    assert hooks.stale_pages(docs) == [bare, settings]
    assert hooks.write_pages(docs) == [bare, settings]
    assert settings.read_text() == current and hooks.stale_pages(docs) == []
    assert "<!-- end generated: vocabulary -->" in bare.read_text()


def test_the_check_command_passes_on_the_checkout() -> None:
    """``python docs/hooks.py check`` (what CI can run) on the checkout: exit 0, silent."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "docs/hooks.py"), "check"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
