"""The manual: ``mkdocs build --strict`` succeeds, and its reference pages cover the code.

The build runs as ``make docs`` does, into a temporary directory, without network. The
generated pages are then checked against the code they come from: every setting the settings
module reads, every command of the ``mailguard`` group, every metric family, every reason.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from mailer import outcomes
from mailer.settings import KNOWN
from workers.cli.group import main

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).with_name("mkdocs")


def _hooks() -> ModuleType:
    """``docs/hooks.py``, the generator, loaded from its file."""
    spec = importlib.util.spec_from_file_location("mailguard_docs_hooks", ROOT / "docs/hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The manual built strictly into a temporary directory."""
    assert MKDOCS.exists(), "mkdocs is missing: make install (the dev extras)"
    out = tmp_path_factory.mktemp("site")
    env = os.environ | {"NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    yield out


def _page(site: Path, name: str) -> str:
    return (site / name / "index.html").read_text()


def test_the_settings_reference_lists_every_setting(site: Path) -> None:
    """Every variable ``Settings.from_env`` reads has a row, with a type, default and example."""
    page = _page(site, "reference/settings")
    missing = sorted(name for name in KNOWN if f"<code>{name}</code>" not in page)
    assert missing == []
    assert "MAILGUARD_KIND_&lt;NAME&gt;_MAX_WAIT" in page
    rows = _hooks().settings_rows()
    assert {row["variable"].strip("`") for row in rows} >= KNOWN
    assert all(row["type"] and row["default"] and row["example"] for row in rows)


def test_the_settings_generator_refuses_a_row_it_cannot_read(tmp_path: Path) -> None:
    """A row without the table's five cells stops the build, naming the row."""
    source = tmp_path / "settings.py"
    source.write_text(
        '"""Settings.\n\n| variable | type | default | example | meaning |\n|---|---|---|---|---|\n'
        '| ``MAILGUARD_X`` | ``1`` | x |\n"""\n'
    )
    with pytest.raises(ValueError, match="MAILGUARD_X"):
        _hooks().settings_rows(source)


def test_the_cli_reference_has_every_command(site: Path) -> None:
    """Each command's ``--help`` is on the page, under its own heading."""
    page = _page(site, "reference/cli")
    assert main.commands
    for name, command in main.commands.items():
        assert f'id="mailguard-{name}"' in page, name
        assert f"Usage: mailguard {name}" in page, name
        assert command.get_short_help_str(limit=200).split(" (")[0][:30] in page, name


def test_the_metrics_reference_names_every_family(site: Path) -> None:
    """Every metric family ``mailer/metrics.py`` (and its holds' gauges) serves is described."""
    source = "".join(
        (ROOT / name).read_text() for name in ("mailer/metrics.py", "mailer/metrics_holds.py")
    )
    names = set(re.findall(r'"(mailguard_[a-z_]+)"', source))
    assert len(names) >= 10
    page = _page(site, "reference/metrics")
    assert sorted(name for name in names if name not in page) == []


def test_the_outcomes_reference_has_every_reason(site: Path) -> None:
    """Every reason of ``mailer/outcomes.py`` is in the generated vocabulary table."""
    reasons = {
        value
        for name, value in vars(outcomes).items()
        if name.isupper() and not name.startswith("_") and isinstance(value, str)
    }
    page = _page(site, "reference/outcomes")
    assert sorted(reason for reason in reasons if f"<code>{reason}</code>" not in page) == []


def test_the_readme_is_short_and_installs_the_right_distribution() -> None:
    """README stays an entry (under 250 lines); it installs from a checkout or the wheel
    ``make wheel`` builds (the distribution is not on PyPI); no install line names another
    project."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 250
    assert "not on PyPI" in readme and "pip install ." in readme
    assert "make wheel && pip install dist/celery_mailguard-*.whl" in readme
    texts = [readme, *(path.read_text() for path in (ROOT / "docs").rglob("*.md"))]
    wrong = re.compile(r"""pip install ['"]?mailguard\b""")
    assert [text[:60] for text in texts if wrong.search(text)] == []
