"""The rooms of ``workers/`` stand in floors: a room imports only itself and the rooms below it,
and none imports the modules at the top (``app``, ``tasks``, ``django``...) or the command and
the demo. The order is the one ``docs/explanation/code-map.md`` gives."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: From the ground up.
ROOMS = ("process", "waiting", "outbox", "brokers", "run", "polling")


def _imported(path: Path) -> set[str]:
    """The ``workers.*`` modules and packages ``path`` imports (inside functions too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == "workers":
            found.update(f"workers.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("workers."):
            found.add(str(node.module))
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("workers"))
    return found


def test_every_room_is_listed() -> None:
    folders = {p.parent.name for p in (ROOT / "workers").glob("*/__init__.py")}
    assert folders - {"cli", "demo"} == set(ROOMS)


def test_a_room_imports_only_the_rooms_below_it() -> None:
    wrong = []
    for floor, room in enumerate(ROOMS):
        for path in sorted((ROOT / "workers" / room).glob("*.py")):
            for module in _imported(path):
                parts = module.split(".")
                target = parts[1] if len(parts) > 1 else ""
                if target not in ROOMS or ROOMS.index(target) > floor:
                    wrong.append(f"{path.relative_to(ROOT)} imports {module}")
    assert wrong == []
