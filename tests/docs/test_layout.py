"""The suite's layout: tests mirror the packages, shared fixtures are defined once in a
``conftest.py``, and nothing outside ``tests/`` imports from it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
#: Fixtures shared from a conftest.py: defined exactly once there, never again in a module.
SHARED_FIXTURES = ("stack", "cluster", "redis_url", "redis_server", "smtp_server", "loose_stack")


def _python_files(*folders: str) -> list[Path]:
    return sorted(path for folder in folders for path in (ROOT / folder).rglob("*.py"))


def _fixtures_defined(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        and any("fixture" in ast.unparse(decorator) for decorator in node.decorator_list)
    }


def test_nothing_outside_tests_imports_from_tests() -> None:
    """Benchmarks, devservers, the library and the workers import no test module: shared servers
    live in devservers/."""
    importers = []
    for path in _python_files("benchmarks", "devservers", "mailer", "workers", "examples"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            if any(name == "tests" or name.startswith("tests.") for name in names):
                importers.append(str(path.relative_to(ROOT)))
    assert importers == []


def test_shared_fixtures_are_defined_once_in_a_conftest() -> None:
    """``stack``, ``cluster`` and the servers' fixtures: one definition each, in a conftest.py."""
    where: dict[str, list[str]] = {name: [] for name in SHARED_FIXTURES}
    for path in TESTS.rglob("*.py"):
        for name in _fixtures_defined(path) & set(SHARED_FIXTURES):
            where[name].append(str(path.relative_to(ROOT)))
    assert all(len(paths) == 1 and paths[0].endswith("conftest.py") for paths in where.values()), (
        where
    )


def test_test_modules_sit_in_packages_that_mirror_the_code() -> None:
    """Every folder of tests/ is a package (unique module names), and no test module is left in
    tests/ but the tests of mailer's top-level modules and of the suite's own hooks."""
    folders = [
        folder for folder in TESTS.rglob("*") if folder.is_dir() and folder.name != "__pycache__"
    ]
    assert [f for f in folders if not (f / "__init__.py").exists()] == []
    top = {path.stem.removeprefix("test_") for path in TESTS.glob("test_*.py")}
    mailer_top = {path.stem for path in (ROOT / "mailer").glob("*.py")} | {"simulate"}
    assert top <= mailer_top | {"server_marks"}, top - mailer_top
