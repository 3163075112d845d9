"""The package's import graph has no circle: read from the source, not by importing.

Every `import` / `from ... import` of an `idemtools` module counts, at module level and inside
functions alike (a lazy import only postpones a circle). Imports under `if TYPE_CHECKING:` count
too: annotations that need a circle are a sign the boundary is in the wrong place.
"""

from __future__ import annotations

import ast
from pathlib import Path

import idemtools

ROOT = Path(idemtools.__file__).parent


def _module_name(path: Path) -> str:
    parts = ["idemtools", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def import_graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_package, node)
                # `from . import x` names a submodule when x is one, else an attribute of base.
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            for target in targets:
                while target and target not in modules:  # `idemtools.a.b` → nearest module
                    target = target.rpartition(".")[0]
                if target.startswith("idemtools") and target != name:
                    graph[name].add(target)
    return graph


def _parents(module: str) -> list[str]:
    """Importing `a.b.c` first imports `a` and `a.b`: a package's `__init__` counts too."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    edges = {m: {t for t in targets if t not in _parents(m)} for m, targets in graph.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_graph_is_read() -> None:
    graph = import_graph()
    assert "idemtools.engine" in graph["idemtools.server.installation"]
    assert (
        "idemtools.server.adapters" in graph["idemtools.server.installation"]
    )  # a function-level import


def test_a_circle_would_be_found() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_package_has_no_import_circle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])
