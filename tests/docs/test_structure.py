"""The structural measures (``.ci/check_structure.py``): the project holds them, and the checker
finds what it is meant to find."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import tomllib

from mailer import outcomes
from mailer.steps import VOCABULARY, celery_state

ROOT = Path(__file__).resolve().parents[2]
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
    """No module or Lua file over 450 lines, no function over 60 (Lua: 140 of its own), no
    complexity waiver, no import circle, no Celery in mailer/: the script finds nothing (its
    output lists what it found)."""
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


def test_long_lua_files_and_functions_are_found(tmp_path: Path) -> None:
    """A Lua file over 450 lines and a function with 141 lines of its own are reported; one with
    140, a maker whose nested functions make it long, and words in comments and strings are not."""
    checker = _checker()
    body = "".join(f"  local x{n} = {n}\n" for n in range(138))
    fits = "local function fits()\n" + body + "end\n"
    over = "local function over()\n" + body + "  local y = 1\nend\n"
    maker = (
        "local function maker()\n"
        + "".join(f"  L.f{n} = function()\n  if a then return end\n  end\n" for n in range(60))
        + "end\n"
    )
    tricky = (
        "--[[ function if do\n]] local s = 'end' .. \"function\" .. [==[\ndo]==]\n"
        "-- end end\nlocal function f() for i = 1, 2 do repeat x() until y end end\n"
    )
    root = _tree(
        tmp_path,
        {
            "mailer/lua/a.lua": fits + maker + tricky,
            "mailer/lua/b.lua": over,
            "mailer/lua/c.lua": "return 1\n" * 451,
        },
    )
    found = checker.problems(root)
    assert len(found) == 2, found
    assert "b.lua:1: Lua function 'local function over()' has 141 lines of its own" in found[0]
    assert found[1].endswith("c.lua: Lua file has 451 lines (at most 450)")
    assert [lines for _, lines in checker.lua_functions(tricky)] == [1]


def test_every_lua_file_is_package_data() -> None:
    """Each ``.lua`` file under ``mailer/`` (the scoped script's parts included) matches a
    package-data glob of ``pyproject.toml``, so the wheel carries it."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    globs = config["tool"]["setuptools"]["package-data"]["mailer"]
    files = sorted((ROOT / "mailer").rglob("*.lua"))
    assert len(files) > 10
    shipped = {path for pattern in globs for path in (ROOT / "mailer").glob(pattern)}
    assert [str(path.relative_to(ROOT)) for path in files if path not in shipped] == []


def test_the_vocabulary_has_a_row_for_every_reason() -> None:
    """Every reason of :mod:`mailer.outcomes` has a row in :data:`mailer.steps.VOCABULARY`, and
    each status has one Celery state (SUCCESS for sent and dropped, DEFERRED, FAILURE)."""
    reasons = {
        value
        for name, value in vars(outcomes).items()
        if name.isupper() and not name.startswith("_") and isinstance(value, str)
    }
    assert reasons == {word.reason for word in VOCABULARY} - {None}
    assert {word.status: word.state for word in VOCABULARY} == {
        "sent": "SUCCESS",
        "dropped": "SUCCESS",
        "deferred": "DEFERRED",
        "failed": "FAILURE",
    }
    assert all(celery_state(word.status) == word.state for word in VOCABULARY)
