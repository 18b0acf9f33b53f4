"""The packages' faces: what a package exports is its ``__all__``, and the code imports from a
package only what that list names (as httpx's ``test_exported_members.py`` keeps its face).

A name a module imports from a package (``from mailer.records.holds import Holds``) must be in
that package's ``__all__``, every name listed must exist, and a package whose ``__init__``
defines or re-exports anything public lists it. A submodule imported by name
(``from workers import parking``) is not a member.
"""

from __future__ import annotations

import ast
import importlib
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = sorted(
    ".".join(init.parent.relative_to(ROOT).parts)
    for top in ("mailer", "workers")
    for init in (ROOT / top).rglob("__init__.py")
)


def _is_package(module: str) -> bool:
    return (ROOT.joinpath(*module.split(".")) / "__init__.py").exists()


def _is_submodule(package: str, name: str) -> bool:
    folder = ROOT.joinpath(*package.split("."))
    return (folder / f"{name}.py").exists() or (folder / name / "__init__.py").exists()


@pytest.mark.parametrize("package", PACKAGES)
def test_each_listed_member_exists(package: str) -> None:
    module = importlib.import_module(package)
    listed = getattr(module, "__all__", [])
    assert [n for n in listed if not hasattr(module, n)] == [], f"{package}.__all__"
    assert len(set(listed)) == len(listed), f"{package}.__all__ names a member twice"


@pytest.mark.parametrize("package", PACKAGES)
def test_a_package_that_defines_members_lists_them(package: str) -> None:
    """Classes and functions defined in the ``__init__`` itself are its face: listed."""
    module = importlib.import_module(package)
    own = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and getattr(value, "__module__", None) == package
    }
    assert own <= set(getattr(module, "__all__", [])), f"{package}: {sorted(own)}"


def test_the_code_imports_from_a_package_only_what_its_face_lists() -> None:
    wrong = []
    for path in sorted([*ROOT.glob("mailer/**/*.py"), *ROOT.glob("workers/**/*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            if node.module.split(".")[0] not in ("mailer", "workers"):
                continue
            if not _is_package(node.module):
                continue
            listed = set(getattr(importlib.import_module(node.module), "__all__", []))
            for alias in node.names:
                if alias.name not in listed and not _is_submodule(node.module, alias.name):
                    wrong.append(f"{path.relative_to(ROOT)}: {alias.name} from {node.module}")
    assert wrong == []


def test_workers_import_the_library_through_its_faces() -> None:
    """``workers/`` imports ``mailer`` from packages only (``from mailer.records.holds import
    Holds``, ``from mailer import Policy``), never from a module inside one."""
    reach = []
    for path in sorted(ROOT.glob("workers/**/*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and not node.level and node.module:
                inside = node.module.startswith("mailer.") and not _is_package(node.module)
                # a top-level module of mailer (mailer.settings, mailer.steps) is its own face
                if inside and node.module.count(".") > 1:
                    reach.append(f"{path.relative_to(ROOT)}: from {node.module}")
    assert reach == []
