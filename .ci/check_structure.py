"""The project's structural measures, checked with ``ast``; exit 1 with the full list if any fails.

``python .ci/check_structure.py`` (run by ``make lint``) over the modules of ``mailer/`` and
``workers/``:

- no module over :data:`MAX_MODULE_LINES` lines, no Lua file (every ``.lua`` under ``mailer/``)
  over it either;
- no function or method over :data:`MAX_FUNCTION_LINES` lines (from its ``def`` line to its
  last line, its docstring not counted, its decorators neither); no Lua function over
  :data:`MAX_LUA_FUNCTION_LINES` lines of its own (from its ``function`` to its ``end``, the
  functions defined inside it not counted: each is measured on its own, so a function that only
  defines others, as the scoped script's ``paged_lib`` parts do, is as long as its statements);
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
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("mailer", "workers")
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60
#: A Lua function's own lines at most: Lua says less per line than Python (no comprehensions,
#: explicit loops and ``end``s, a decision that must stay one atomic script), so about twice
#: the Python measure; what does not fit goes into a function of its own or a part file.
MAX_LUA_FUNCTION_LINES = 140
WAIVER = re.compile(r"#\s*noqa\b[^\n]*\bPLR09(?:11|12|15)\b")
#: The Lua words that open a block closed by ``end`` (``while`` and ``for`` open theirs with
#: ``do``), and ``repeat``, closed by ``until``.
LUA_OPENERS = ("function", "if", "do", "repeat")
#: Long comments and strings (``--[==[ ... ]==]``, ``[[ ... ]]``), the other comments and
#: strings, words, newlines: what the Lua measure reads of a file.
LUA_TOKEN = re.compile(
    r"--\[(=*)\[|\[(=*)\[|--[^\n]*|'(?:\\.|[^'\\\n])*'|\"(?:\\.|[^\"\\\n])*\"|[A-Za-z_]\w*|\n"
)
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


def lua_words(text: str) -> Iterator[tuple[str, int]]:
    """The words of Lua source and their line numbers, its comments and strings skipped."""
    line, pos = 1, 0
    while found := LUA_TOKEN.search(text, pos):
        level = found[1] if found[1] is not None else found[2]
        if level is not None:  # a long comment or string: up to its closing bracket
            close = text.find(f"]{level}]", found.end())
            pos = len(text) if close < 0 else close + len(level) + 2
            line += text.count("\n", found.start(), pos)
            continue
        pos, word = found.end(), found[0]
        if word == "\n":
            line += 1
        elif word[0].isalpha() or word[0] == "_":
            yield word, line


def lua_functions(text: str) -> Iterator[tuple[int, int]]:
    """Each Lua function's first line and its own lines (the functions inside it not counted)."""
    blocks: list[list[Any]] = []  # [opening word, its line, lines of the functions inside]
    for word, line in lua_words(text):
        if word in LUA_OPENERS:
            blocks.append([word, line, 0])
        elif word in ("end", "until") and blocks:
            opener, start, inner = blocks.pop()
            if opener != "function":
                continue
            lines = line - start + 1
            yield start, lines - inner
            outer = next((block for block in reversed(blocks) if block[0] == "function"), None)
            if outer is not None:
                outer[2] += lines


def lua_problems(root: Path) -> Iterator[str]:
    """Too long a Lua file under ``mailer/``, or a Lua function too long on its own."""
    for path in sorted((root / "mailer").rglob("*.lua")):
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(root)
        count = len(text.splitlines())
        if count > MAX_MODULE_LINES:
            yield f"{where}: Lua file has {count} lines (at most {MAX_MODULE_LINES})"
        rows = text.splitlines()
        for start, lines in lua_functions(text):
            if lines > MAX_LUA_FUNCTION_LINES:
                yield (
                    f"{where}:{start}: Lua function {rows[start - 1].strip()!r} has {lines} "
                    f"lines of its own (at most {MAX_LUA_FUNCTION_LINES})"
                )


def problems(root: Path = ROOT) -> list[str]:
    """Every violation found under ``root``, one line each."""
    modules = load(root)
    found = []
    for module in modules.values():
        found += size_problems(module)
        found += library_problems(module)
    found += lua_problems(root)
    found += [f"import circle: {' -> '.join(c)}" for c in cycles(import_graph(modules))]
    return found


def main() -> int:
    found = problems()
    for line in found:
        print(line)
    if found:
        print(f"check_structure: {len(found)} problem(s)", file=sys.stderr)
        return 1
    print(
        "check_structure: modules, functions, Lua files and functions, waivers, import graph: "
        "all within the measures"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
