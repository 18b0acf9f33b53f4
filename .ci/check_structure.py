"""The project's structural measures, checked with ``ast``; exit 1 with the full list if any fails.

``python .ci/check_structure.py`` (run by ``make lint``) over the modules of ``mailer/`` and
``workers/``:

- no module over :data:`MAX_MODULE_LINES` lines;
- no function or method over :data:`MAX_FUNCTION_LINES` lines (from its ``def`` line to its
  last line, its docstring not counted, its decorators neither);
- no ``noqa`` waiver of the complexity rules (PLR0911, PLR0912, PLR0915);
- no import circle among these modules: every ``import`` counts, those inside functions and
  under ``if TYPE_CHECKING:`` too; a package's ``__init__`` importing its own submodules (a
  re-export) is not an edge of the graph;
- ``mailer/`` imports neither Celery nor kombu, nor anything of ``workers/``.

Every violation is printed, one a line, before the exit; nothing is allowed by name.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("mailer", "workers")
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60
WAIVER = re.compile(r"#\s*noqa\b[^\n]*\bPLR09(?:11|12|15)\b")
#: What ``mailer/`` must never import (its top-level package names).
LIBRARY_FORBIDDEN = ("celery", "kombu", "workers")


@dataclass
class Module:
    """One module of the checked packages: its dotted name, file and parsed tree."""

    name: str
    path: Path
    text: str
    tree: ast.Module
    imports: set[str] = field(default_factory=set)  # every module name it imports

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"

    @property
    def package(self) -> str:
        """The package relative imports start from."""
        return self.name if self.is_package else self.name.rpartition(".")[0]


def load(root: Path = ROOT) -> dict[str, Module]:
    """Every module of :data:`PACKAGES` under ``root``, by dotted name."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            text = path.read_text(encoding="utf-8")
            name = ".".join(parts)
            modules[name] = Module(name, path, text, ast.parse(text, filename=str(path)))
    return modules


def imported_names(module: Module) -> Iterator[str]:
    """The dotted names ``module`` imports, anywhere in it (``from X import Y`` gives X.Y)."""
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names if alias.name != "*")


def resolve(name: str, modules: dict[str, Module]) -> str | None:
    """The checked module ``name`` refers to: itself, or its longest known prefix."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph(modules: dict[str, Module]) -> dict[str, set[str]]:
    """Module -> the checked modules it imports (a package's own submodules left out)."""
    graph: dict[str, set[str]] = {}
    for module in modules.values():
        targets = {resolve(name, modules) for name in imported_names(module)}
        graph[module.name] = {
            target
            for target in targets
            if target is not None
            and target != module.name
            and not (module.is_package and target.startswith(module.name + "."))
        }
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_circle(component, graph) for component in sorted(components)]


def _circle(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest path from the component's first module back to itself, for the message."""
    members, start = set(component), component[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & members):
                if target == start:
                    return [*paths[node], start]
                if target not in paths:
                    paths[target] = [*paths[node], target]
                    following.append(target)
        frontier = following
    return component


def function_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from the ``def`` line to the last, without the docstring."""
    lines = (node.end_lineno or node.lineno) - node.lineno + 1
    first = node.body[0]
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        lines -= (first.end_lineno or first.lineno) - first.lineno + 1
    return lines


def _where(module: Module, line: int | None = None) -> str:
    path = module.path.relative_to(ROOT) if module.path.is_relative_to(ROOT) else module.path
    return f"{path}:{line}" if line else str(path)


def size_problems(module: Module) -> Iterator[str]:
    """Too long a module or function, and complexity waivers."""
    count = len(module.text.splitlines())
    if count > MAX_MODULE_LINES:
        yield f"{_where(module)}: module has {count} lines (at most {MAX_MODULE_LINES})"
    for node in ast.walk(module.tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = function_lines(node)
            if lines > MAX_FUNCTION_LINES:
                yield (
                    f"{_where(module, node.lineno)}: function {node.name} has {lines} lines "
                    f"without its docstring (at most {MAX_FUNCTION_LINES})"
                )
    for number, line in enumerate(module.text.splitlines(), start=1):
        if WAIVER.search(line):
            yield f"{_where(module, number)}: complexity waiver ({line.strip()})"


def library_problems(module: Module) -> Iterator[str]:
    """What ``mailer/`` must not import."""
    if module.name.split(".")[0] != "mailer":
        return
    seen = set()
    for name in imported_names(module):
        top = name.split(".")[0]
        if top in LIBRARY_FORBIDDEN and top not in seen:
            seen.add(top)
            yield f"{_where(module)}: mailer/ imports {top}"


def problems(root: Path = ROOT) -> list[str]:
    """Every violation found under ``root``, one line each."""
    modules = load(root)
    found = []
    for module in modules.values():
        found += size_problems(module)
        found += library_problems(module)
    found += [f"import circle: {' -> '.join(c)}" for c in cycles(import_graph(modules))]
    return found


def main() -> int:
    found = problems()
    for line in found:
        print(line)
    if found:
        print(f"check_structure: {len(found)} problem(s)", file=sys.stderr)
        return 1
    print("check_structure: modules, functions, waivers, import graph: all within the measures")
    return 0


if __name__ == "__main__":
    sys.exit(main())
