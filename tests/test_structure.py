"""The structural measures (``.ci/check_structure.py``): the project holds them, and the checker
finds what it is meant to find."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

from mailer import outcomes
from mailer.steps import VOCABULARY, celery_state

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / ".ci" / "check_structure.py"


def _checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_structure", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    for package in ("mailer", "workers"):
        (root / package).mkdir(exist_ok=True)
        (root / package / "__init__.py").touch()
    return root


def test_the_project_holds_its_measures() -> None:
    """No module over 450 lines, no function over 60, no complexity waiver, no import circle,
    no Celery in mailer/: the script finds nothing (its output lists what it found)."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout


def test_a_circle_is_found_even_through_a_function_level_import(tmp_path: Path) -> None:
    """``a`` imports ``b`` at the top, ``b`` imports ``a`` inside a function: one circle."""
    root = _tree(
        tmp_path,
        {
            "workers/a.py": "from workers import b\n",
            "workers/b.py": "def f():\n    from workers.a import x\n",
        },
    )
    found = _checker().problems(root)
    assert found == ["import circle: workers.a -> workers.b -> workers.a"]


def test_a_package_reexporting_its_submodules_is_not_a_circle(tmp_path: Path) -> None:
    """``mailer/p/__init__.py`` imports its submodule, which imports the package: no circle."""
    root = _tree(
        tmp_path,
        {
            "mailer/p/__init__.py": "from mailer.p.q import Q\n",
            "mailer/p/q.py": "from mailer import p\nQ = 1\n",
        },
    )
    assert _checker().problems(root) == []


def test_long_functions_waivers_and_celery_in_the_library_are_found(tmp_path: Path) -> None:
    """A 61-line function (its docstring not counted), a PLR0912 waiver, and mailer/ importing
    kombu inside a function are each reported; a 60-line one is not."""
    body = "".join(f"    x{n} = {n}\n" for n in range(59))
    root = _tree(
        tmp_path,
        {
            "mailer/long.py": (
                'def fits():\n    """Doc.\n\n    More.\n    """\n'
                + body
                + "def over():\n"
                + body
                + "    return 1\n"
                + "def waived():  # noqa: PLR0912 - many branches\n    pass\n"
                + "def celery_inside():\n    import kombu\n"
            ),
        },
    )
    found = _checker().problems(root)
    assert len(found) == 3, found
    assert "function over has 61 lines" in found[0]
    assert "complexity waiver" in found[1]
    assert found[2].endswith("mailer/ imports kombu")


def test_the_vocabulary_has_a_row_for_every_reason() -> None:
    """Every reason of :mod:`mailer.outcomes` has a row in :data:`mailer.steps.VOCABULARY`, and
    each status has one Celery state (SUCCESS for sent and dropped, DEFERRED, FAILURE)."""
    reasons = {
        value for name, value in vars(outcomes).items() if name.isupper() and isinstance(value, str)
    }
    assert reasons == {word.reason for word in VOCABULARY} - {None}
    assert {word.status: word.state for word in VOCABULARY} == {
        "sent": "SUCCESS",
        "dropped": "SUCCESS",
        "deferred": "DEFERRED",
        "failed": "FAILURE",
    }
    assert all(celery_state(word.status) == word.state for word in VOCABULARY)
